"""The soak checker (benchmarks/soak.py), short: 20 s of steady queries while the state changes every 100 ms.

The checker starts mcsdns on a manifests directory it rewrites itself, so it
knows the state at every moment; every answer is checked against the state
current when it was asked (allowing the propagation delay of the manifest
poll). The 5-minute run at 70% of the measured maximum, manifests- or
API-driven, is a documented command (docs/reliability.md).

CI machines are small and shared, so this run shortens the search for the
maximum to a 2 s closed-loop probe and one 3 s open-loop step (its updates
running, its answers checked, and the soak starting from the state it left),
sends at 30% of the result (capped at 5000 qps) and tolerates 1% loss; a
wrong answer is never tolerated.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from testsupport.mcsdnsserver import ROOT

pytestmark = pytest.mark.slow  # 20 s of load plus the search for the maximum

DURATION = 20


def test_soak_short(tmp_path):
    out = tmp_path / "soak-manifests.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "soak", "--duration", str(DURATION), "--rate-fraction", "0.3",
         "--max-rate", "5000", "--measure-seconds", "2", "--search-steps", "1", "--step-seconds", "3", "--save", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=DURATION + 180,
    )  # fmt: skip
    print(result.stdout)
    stored = json.loads(out.read_text())  # what --save stores under benchmarks/results/ for the README's figures
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", stored["date"]) and re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", stored["commit"])
    assert stored["machine"]["cpus"] >= 1 and stored["machine"]["cpu_model"] and "loadavg_at_start" in stored["machine"]
    assert stored["command"].startswith("python -m benchmarks.soak soak --duration 20 ")
    report = stored["report"]
    assert report["closed_loop"]["qps"] > 0 and report["closed_loop"]["wrong"] == 0, report["closed_loop"]
    search = report["search"]
    assert report["max_method"] == "open-loop search" and len(search["steps"]) == 1
    assert search["wrong"] == 0, search["examples"]
    assert search["steps"][0]["sent_qps"] > 0 and search["steps"][0]["verdict"] in ("pass", "fail", "checker behind")
    assert report["wrong"] == 0, report["examples"]
    assert report["sent"] > DURATION * 500
    assert report["lost_pct"] < 1.0, f"{report['lost']} lost of {report['sent']} ({report['server_socket_drops']} dropped by the server's socket)"
    assert report["updates"]["count"] >= DURATION * 10 * 0.8 and not report["update_errors"]
    assert report["propagation_s"]["n"] > 0 and report["propagation_s"]["max"] < 3.0
    assert report["checker_cpu_ms_per_1k"] > 0 and report["server_cpu_ms_per_1k"] > 0
    assert report["server_alive"] and report["server_tracebacks"] == 0
    assert report["rss_mb"]["second_half_growth"] < 5, report["rss_mb"]
