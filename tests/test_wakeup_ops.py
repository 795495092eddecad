"""`python -m benchmarks.wakeup_ops`: the Python each UDP wakeup runs, mcsdns's App against the floor's loop.

A short real run (the floor's loop on its own socket, mcsdns's App from the benchmark's manifests,
datagrams sent over loopback and every reply read back): the three rows are there, each row's
functions add up to its total, and the resolver's share is the same in all three, since each
answered the same cached queries (a row that did not, or counted another path, shows it). The
counts themselves are the benchmark's to print, not this test's to bound.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_short_run_counts_the_floor_and_mcsdns_with_and_without_metrics(tmp_path: Path) -> None:
    out = tmp_path / "wakeup_ops.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.wakeup_ops", "--wakeups", "40", "--no-timing",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(out.read_text())
    rows = {row["name"]: row for row in got["rows"]}
    assert list(rows) == ["floor", "mcsdns", "mcsdns without metrics"]
    for name, row in rows.items():
        assert row["bytecodes_per_wakeup"] > 0, name
        assert abs(sum(row["by_function"].values()) - row["bytecodes_per_wakeup"]) < 1.0, name
        assert "wall_us_per_wakeup" not in row  # --no-timing
        assert f"== {name}: {row['bytecodes_per_wakeup']} bytecodes" in proc.stdout
    resolver = {name: row["by_function"].get("resolve.py:resolve") for name, row in rows.items()}
    assert resolver["floor"] and len(set(resolver.values())) == 1, resolver
    assert rows["mcsdns"]["by_function"].get("metrics.py:observe_batch", 0) > 0
    assert not any(key.startswith("metrics.py:") for key in rows["mcsdns without metrics"]["by_function"])
    assert "selector.py:select" in rows["mcsdns"]["by_function"]  # the App's own loop served it


def test_bad_flags_are_refused() -> None:
    for args in (["--wakeups", "0"], ["--datagrams", "65"], ["--mix", "nope"]):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.wakeup_ops", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "usage: python -m benchmarks.wakeup_ops" in proc.stderr
