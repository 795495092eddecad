"""A tiny run of `python -m benchmarks.churn` (query latency while the API churns), so it cannot rot.

Its figures mean nothing at this size; what is checked is that every server answered in both phases,
the churner wrote, mcsdns saw the writes, each watching server's final answers are the API's final
state, and the reference servers (--reference: they watch nothing) are reported as such.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.servers import tool_path

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.kube


def test_churn_benchmark_tiny(testbin: Path, tmp_path: Path) -> None:
    for tool, package in (("dnsperf", "dnsperf"), ("knotd", "knot")):
        if tool_path(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package})")
    out = tmp_path / "churn.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.churn", "--seconds", "1", "--rate", "300", "--imports", "20",
         "--headless", "2", "--endpoints", "10", "--churners", "1", "--coredns-cache", "30",
         "--reference", "floor,knot", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, f"churn benchmark failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    got = json.loads(out.read_text())
    assert set(got["servers"]) == {"mcsdns-w1", "coredns", "coredns-cache30", "floor", "knot"}
    for label in ("mcsdns-w1", "floor", "knot"):
        assert {"vs_coredns", "vs_coredns_cache30"} <= set(got["servers"][label]), label
    assert "vs_floor" in got["servers"]["mcsdns-w1"] and "vs_floor" not in got["servers"]["knot"]
    for label, server in got["servers"].items():
        for phase in ("quiet", "churn"):
            run = server["rounds"][0][phase]
            assert run["answered"] > 0 and run["mean_ms"] is not None, (label, phase, run)
            assert run["rcodes"].get("NOERROR", 0) == run["answered"], (label, phase, run["rcodes"])
        updates = server["rounds"][0]["updates"]
        assert updates["writes"] > 0, (label, updates)
        if label in ("floor", "knot"):
            assert updates["watches"] is False and "final_answers_right" not in updates, (label, updates)
        else:
            assert updates["final_answers_right"] == "2/2", (label, updates)
    mcsdns = got["servers"]["mcsdns-w1"]["rounds"][0]["updates"]
    assert 0 < mcsdns["slice_changes"] <= mcsdns["writes"] and mcsdns["propagation_p99_s"] is not None
    assert "mcsdns-w1" in proc.stdout and "churn" in proc.stdout
