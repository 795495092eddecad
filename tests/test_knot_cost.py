"""`python -m benchmarks.knot_cost`: mcsdns's CPU per query against Knot's in alternating rounds.

A short real run (both servers start, dnsperf drives each, the figures come from their processes'
CPU time), how the rounds are summarized (a round where either run missed its rate does not count),
and the flags it refuses. The figures of a short run mean nothing; docs/performance.md gives the
stored run's.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.knot_cost import summarize, verdicts

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.knot_cost", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_a_short_run_measures_both_servers_in_every_round(tmp_path: Path, benchmark_tools: None) -> None:
    out = tmp_path / "knot_cost.json"
    # No wait for a quiet core: the figures of a test's run mean nothing, and on a busy machine each of
    # the four runs would wait its full 30 s.
    proc = _run("--rounds", "2", "--rates", "2000", "--mixes", "clusterset_a", "--seconds", "1", "--out", str(out),
                "--quiet-wait", "0", timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())
    cell = got["cells"]["clusterset_a"]["2000"]
    assert cell["pairs"] == 2  # 2,000 q/s is far below either server's maximum: both rounds count
    assert all(v > 0 for v in cell["mcsdns_cpu_per_100k"] + cell["knot_cpu_per_100k"])
    assert cell["ratios"] == pytest.approx([a / k for a, k in zip(cell["mcsdns_cpu_per_100k"], cell["knot_cpu_per_100k"])],
                                           abs=0.002)  # (the ratios come from the unrounded figures)
    assert cell["low"] <= cell["median"] <= cell["high"]
    assert got["by_rate"]["2000"]["mixes"] == 1 and got["rounds"] == 2
    assert got["command"].startswith("python -m benchmarks.knot_cost --rounds 2")
    assert "clusterset_a" in proc.stdout and "median <= 1.25x" in proc.stdout


def _fig(cpu: float, passed: bool = True) -> dict:
    return {"qps": 1000, "loss": 0.0 if passed else 0.01, "passed": passed, "cpu_per_100k": cpu}


def test_a_round_where_either_run_missed_its_rate_is_left_out() -> None:
    rounds = [
        {"mcsdns": {"aaaa": {50000.0: _fig(1.2)}}, "knot": {"aaaa": {50000.0: _fig(1.0)}}},
        {"mcsdns": {"aaaa": {50000.0: _fig(3.0)}}, "knot": {"aaaa": {50000.0: _fig(1.0, passed=False)}}},
        {"mcsdns": {"aaaa": {50000.0: _fig(1.4)}}, "knot": {"aaaa": {50000.0: _fig(1.0)}}},
        {"mcsdns": {"aaaa": {50000.0: _fig(1.3)}}, "knot": {"aaaa": {50000.0: _fig(1.0)}}},
    ]
    cell = summarize(rounds)["aaaa"]["50000"]
    assert cell["pairs"] == 3 and cell["ratios"] == [1.2, 1.4, 1.3]
    assert (cell["median"], cell["low"], cell["high"]) == (1.3, 1.2, 1.4)
    assert cell["mcsdns_cpu_per_100k"] == [1.2, 3.0, 1.4, 1.3]  # every run is kept, counted or not
    assert verdicts({"aaaa": {"50000": cell}}) == {"50000": {"mixes": 1, "met": 0, "highest": 1.3, "highest_mix": "aaaa"}}


def test_a_mix_and_rate_without_a_passed_pair_has_no_median_and_no_verdict() -> None:
    rounds = [{"mcsdns": {"srv_bare": {90000.0: _fig(1.0, passed=False)}}, "knot": {"srv_bare": {90000.0: _fig(1.0)}}}]
    cell = summarize(rounds)["srv_bare"]["90000"]
    assert cell["pairs"] == 0 and "median" not in cell
    assert verdicts({"srv_bare": {"90000": cell}}) == {}


@pytest.mark.parametrize("args", [
    ("--rates", "0"), ("--rates", "nan"), ("--rates", "50000,-1"), ("--rates", ","),
    ("--rounds", "0"), ("--rounds", "two"), ("--seconds", "0"), ("--mixes", "clusterset_a,no_such_mix"),
])
def test_bad_flags_get_usage_not_a_traceback(args: tuple[str, ...]) -> None:
    proc = _run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "usage:" in proc.stderr and "Traceback" not in proc.stderr


def test_the_claims_row_quotes_the_stored_rounds_on_the_landing_code() -> None:
    """docs/performance.md's "Cached queries cost at most 1.25x Knot's CPU" row: the latest five rounds'
    verdicts, recomputed from the stored round figures, and the mixes over the target named."""
    stored = json.loads((ROOT / "benchmarks" / "results" / "knot_cost-cf1692d.json").read_text())
    cells = stored["cells"]
    for per_rate in cells.values():
        for cell in per_rate.values():
            assert cell["median"] == round(statistics.median(cell["ratios"]), 3) and cell["pairs"] == 5
    by_rate = verdicts(cells)
    assert {rate: (v["met"], v["mixes"]) for rate, v in by_rate.items()} == {"50000": (6, 8), "90000": (6, 8)}
    over = {rate: sorted((mix, f"{c[rate]['median']:.2f}x") for mix, c in cells.items() if c[rate]["median"] > 1.25)
            for rate in ("50000", "90000")}
    assert over == {"50000": [("headless10_a", "1.25x"), ("realistic", "1.27x")],
                    "90000": [("nxdomain", "1.27x"), ("realistic", "1.32x")]}
    row = next(line for line in (ROOT / "docs" / "performance.md").read_text().splitlines()
               if line.startswith("| Cached queries cost at most 1.25x Knot's CPU |"))
    assert ("on 6 of 8 mixes at both 50,000 and 90,000 q/s (over it: headless10_a 1.25x and realistic 1.27x at 50,000, "
            "nxdomain 1.27x and realistic 1.32x at 90,000)") in row and "`knot_cost-cf1692d.json`" in row
