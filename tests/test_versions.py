"""The version matrix: the API-source tests that matter for version differences, on every minor.

Each Kubernetes minor with a wrapper module in tools/testbin (kube-<minor>/) has its own testbin,
built by tools/testbin/build-versions.sh into <testbin cache>/versions/<minor>/. For each, the
tests of TIER run in a pytest of their own with MCSDNS_TESTBIN_CACHE set to that testbin: the
same tests the suite runs on the default version (initial sync, list and watch of creates,
updates and deletes, 410 Gone and the relist, both ServiceImport CRD versions, the read-only
RBAC, the CoreDNS differential, and the list strategy each server's answers call for), not
copies of them. The rest of the suite stays on the default testbin. A minor whose testbin is not
built skips here, which fails in CI like any other real part that is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MINORS = sorted((p.name.removeprefix("kube-") for p in (ROOT / "tools" / "testbin").glob("kube-1.*")),
                key=lambda minor: tuple(int(part) for part in minor.split(".")))
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


@pytest.mark.parametrize("minor", MINORS)
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
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIER],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIER_TIMEOUT)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"{version.strip()}: {summary} ({time.monotonic() - started:.0f} s)")
    assert run.returncode == 0, f"{version.strip()}:\n{run.stdout[-8000:]}\n{run.stderr[-2000:]}"
