"""A short run of the benchmark suite (benchmarks/): every peer starts (CoreDNS
with and without `cache 30`), every mix runs (the random-case and random-subdomain
ones at 2,000 lines), the answer checker checks each server x mix, propagation and
scale run once, and the report renders.

The numbers of a smoke run mean nothing; the full measurement is
`python -m benchmarks run` (docs/performance.md), not part of CI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.queries import MIXES, RANDOM_SUBDOMAIN
from benchmarks.suite import SERVERS

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.kube, pytest.mark.slow]  # a benchmark run against the test bed


def test_benchmark_smoke(testbin: Path, tmp_path: Path, benchmark_tools: None) -> None:
    out = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "--smoke", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, f"smoke run failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    results = json.loads((out / "results.json").read_text())
    assert results["errors"] == []
    assert "coredns-cache30" in SERVERS and results["servers"]["coredns-cache30"]["cache"] == 30
    # Knot answers with mcsdns's receive buffer, where the suite could set it (as root).
    knot = results["servers"]["knot"]
    if knot["udp_rcvbuf_matched"]:
        assert knot["udp_rcvbuf"] == results["servers"]["mcsdns"]["udp_rcvbuf"]
    for mix in MIXES:
        for server in SERVERS:
            got = results["throughput"][mix][server]
            assert got["error"] is None and got["max_qps"] > 0, (mix, server, got)
            assert sum(got["rcodes"].values()) > 0, (mix, server)
            # The answer checker ran beside dnsperf and found every reply right.
            assert got["check"]["checked"] > 0 and got["check"]["wrong"] == 0, (mix, server, got["check"])
            assert got["limit"] in ("server", "load generator", "not reached", "unclear"), (mix, server)
            # The one-rate CPU step ran (the smoke's rate, 500 q/s, is far below any server's 2,000).
            assert got["cost"]["rate"] == 500 and got["cost"]["qps"] > 0, (mix, server, got["cost"])
    # Every server agrees on what each mix is (same data, same rcodes).
    for mix in ("clusterset_a", "nxdomain", "headless100_a", "clusterset_a_case", RANDOM_SUBDOMAIN):
        kinds = {server: set(results["throughput"][mix][server]["rcodes"]) for server in SERVERS}
        assert len({frozenset(v) for v in kinds.values()}) == 1, (mix, kinds)
    for server in ("mcsdns-api", "coredns"):
        assert results["propagation"][server]["timeouts"] == 0
        assert results["propagation"][server]["p50_ms"] is not None
    row = results["scale"][0]
    for server in ("mcsdns-api", "coredns", "mcsdns"):
        assert row[server]["sync_seconds"] > 0 and row[server]["rss_mb"] > 0
    assert row["mcsdns-api"]["relist_peak_mb"] > 0
    md = (out / "results.md").read_text()
    assert "## Throughput and latency" in md and "## Targets" in md and "## Scale" in md
    assert (out / "results.csv").read_text().count("\n") == 1 + len(MIXES) * len(SERVERS)
    assert "## Targets: the fair comparison" in md and "Answers checked under load" in md
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # plots need the `bench` extra
    for png in ("throughput.png", "latency_p99.png", "rss.png"):
        assert (out / png).stat().st_size > 1000
