"""The version matrix: the API-source tests that matter for version differences, on every minor.

Each Kubernetes minor with a wrapper module in tools/testbin (kube-<minor>/) has its own testbin,
built by tools/testbin/build-versions.sh into <testbin cache>/versions/<minor>/. For each, the
tests of TIER run in a pytest of their own with MCSDNS_TESTBIN_CACHE set to that testbin: the
same tests the suite runs on the default version (initial sync, list and watch of creates,
updates and deletes, 410 Gone and the relist, both ServiceImport CRD versions, the read-only
RBAC, the CoreDNS differential, and the list strategy each server's answers call for), not
copies of them. The rest of the suite stays on the default testbin, the newest minor (1.37), which
the tier leaves out: the whole suite runs there, the tier with it. A minor whose testbin is not
built skips here, which fails in CI like any other real part that is missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MINORS = sorted((p.name.removeprefix("kube-") for p in (ROOT / "tools" / "testbin").glob("kube-1.*")),
                key=lambda minor: tuple(int(part) for part in minor.split(".")))
# The default testbin's minor (tools/testbin/kube): the whole suite runs on it, the tier too.
DEFAULT = re.search(r"^\s*(?:require )?k8s\.io/kubernetes v(1\.\d+)\.", (ROOT / "tools/testbin/kube/go.mod").read_text(),
                    re.MULTILINE).group(1)
TIER = (
    "tests/test_kube_watchlist.py::test_the_list_strategy_is_the_one_the_server_answers_with",
    "tests/test_kube_changes.py",
    "tests/test_kube_gone.py",
    "tests/test_kube_crd.py",
    "tests/test_kube_rbac.py",
    "tests/compat/test_differential.py",
)
TIER_TIMEOUT = 900  # seconds for one version's run; it takes about 2 minutes on a quiet machine


def test_the_matrix_spans_the_supported_minors() -> None:
    assert len(MINORS) >= 4 and MINORS[0] == "1.31", MINORS  # the oldest the docs name as supported
    assert DEFAULT == MINORS[-1], (DEFAULT, MINORS)  # the default testbin is the newest minor


@pytest.mark.parametrize("minor", [m for m in MINORS if m != DEFAULT])
@pytest.mark.slow
def test_the_api_source_tests_pass_on(minor: str, testbin: Path) -> None:
    cache = testbin / "versions" / minor
    apiserver = cache / "bin" / "kube-apiserver"
    if not apiserver.exists():
        pytest.skip(f"no kube-apiserver {minor} in {cache}: build it with tools/testbin/build-versions.sh")
    version = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True, timeout=60).stdout
    assert version.startswith(f"Kubernetes v{minor}."), version  # the minor its directory names
    env = {**os.environ, "MCSDNS_TESTBIN_CACHE": str(cache)}
    env.pop("MCSDNS_COREDNS", None)  # that testbin's CoreDNS (the default one's, linked)
    started = time.monotonic()
    # `not slow`: the tier's one slow test, the differential over the generated cluster set, asks the
    # same objects many more questions; how the API serves them is the fixture's and the updates' part.
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *TIER],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIER_TIMEOUT)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"{version.strip()}: {summary} ({time.monotonic() - started:.0f} s)")
    assert run.returncode == 0, f"{version.strip()}:\n{run.stdout[-8000:]}\n{run.stderr[-2000:]}"


def test_the_install_docs_quote_the_stored_run() -> None:
    """docs/install.md's tables and its ranges are benchmarks/results/versions.txt's medians."""
    stored = (ROOT / "benchmarks" / "results" / "versions.txt").read_text()
    docs = (ROOT / "docs" / "install.md").read_text()
    rows = re.findall(r"^(v1\.\d+\.\d+) +10000 imports: sync mcsdns +([\d.]+) s, CoreDNS +([\d.]+) s, ratio ([\d.]+);",
                      stored, re.MULTILINE)
    assert {version.rsplit(".", 1)[0][1:] for version, *_ in rows} == set(MINORS), rows  # every minor measured
    for version, mine, theirs, ratio in rows:
        assert f"| {version[1:]} | " in docs and f"| {mine} s / {theirs} s ({ratio}) |" in docs, version
    ratios = sorted(float(r[3]) for r in rows)
    prose = " ".join(docs.split())
    assert f"run: {ratios[0]:.2f}-{ratios[-1]:.2f}x CoreDNS's time at 10k" in prose
    large = re.findall(r"^(v1\.\d+\.\d+) +50000 imports: sync mcsdns +([\d.]+) s, CoreDNS +([\d.]+) s, ratio ([\d.]+);",
                       stored, re.MULTILINE)
    assert {version.rsplit(".", 1)[0][1:] for version, *_ in large} == set(MINORS), large
    for version, mine, theirs, ratio in large:
        assert f"| {version[1:]} | {mine} s / {theirs} s ({ratio}) |" in docs, version
    ratios = sorted(float(r[3]) for r in large)
    assert f"and {ratios[0]:.2f}-{ratios[-1]:.2f}x at 50k" in prose
