"""The version matrix: the API-source tests that matter for version differences, on every minor.

Each Kubernetes minor with a wrapper module in tools/testbin (kube-<minor>/) has its own testbin,
built by tools/testbin/build-versions.sh into <testbin cache>/versions/<minor>/. For each, the
tests of TIER run in a pytest of their own with MCSDNS_TESTBIN_CACHE set to that testbin (two
minors at a time, each with its own servers on free ports and its own temp directory): the
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
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
# Tier runs at once. Each run mostly waits (for its kube-apiserver to start and restart, for watches,
# relists and polls), so two share the 2 cores of the CI machine without slowing each other much; each
# has its own etcd, kube-apiserver, CoreDNS and mcsdns on free ports and its own pytest temp directory.
TIER_AT_ONCE = 2
TEST_NAME = "test_the_api_source_tests_pass_on"


@dataclass
class TierRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool


class Tiers:
    """The tier runs of the minors this session selected, TIER_AT_ONCE at a time, in MINORS' order."""

    def __init__(self, minors: list[str], testbin: Path, basetemp: Path) -> None:
        self.testbin = testbin
        self.basetemp = basetemp
        self.closed = False
        self.lock = threading.Lock()
        self.running: list[subprocess.Popen[str]] = []
        self.pool = ThreadPoolExecutor(TIER_AT_ONCE, thread_name_prefix="tier")
        self.runs: dict[str, Future[TierRun | None]] = {
            minor: self.pool.submit(self._run, minor) for minor in minors
            if (testbin / "versions" / minor / "bin" / "kube-apiserver").exists()}

    def _run(self, minor: str) -> TierRun | None:
        env = {**os.environ, "MCSDNS_TESTBIN_CACHE": str(self.testbin / "versions" / minor)}
        env.pop("MCSDNS_COREDNS", None)  # that testbin's CoreDNS (the default one's, linked)
        # `not slow`: the tier's one slow test, the differential over the generated cluster set, asks the
        # same objects many more questions; how the API serves them is the fixture's and the updates' part.
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
               "--basetemp", str(self.basetemp / minor), *TIER]
        with self.lock:
            if self.closed:
                return None
            started = time.monotonic()
            # A session of its own: a timeout or the module's end kills the run with every server it started.
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            self.running.append(proc)
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=TIER_TIMEOUT)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill(proc)
            stdout, stderr = proc.communicate()
        finally:
            with self.lock:
                self.running.remove(proc)
        return TierRun(proc.returncode, stdout, stderr, time.monotonic() - started, timed_out)

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        with self.lock:
            self.closed = True
            for proc in self.running:
                self._kill(proc)
        self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def tiers(testbin: Path, request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiers]:
    """Starts every selected minor's run when the first of them is asked for."""
    minors = [item.callspec.params["minor"] for item in request.session.items
              if getattr(item, "originalname", None) == TEST_NAME and item.module is request.module]
    runs = Tiers(minors, testbin, tmp_path_factory.mktemp("tiers"))
    try:
        yield runs
    finally:
        runs.close()


def test_the_matrix_spans_the_supported_minors() -> None:
    assert len(MINORS) >= 4 and MINORS[0] == "1.31", MINORS  # the oldest the docs name as supported
    assert DEFAULT == MINORS[-1], (DEFAULT, MINORS)  # the default testbin is the newest minor


@pytest.mark.parametrize("minor", [m for m in MINORS if m != DEFAULT])
@pytest.mark.slow
def test_the_api_source_tests_pass_on(minor: str, testbin: Path, tiers: Tiers) -> None:
    cache = testbin / "versions" / minor
    apiserver = cache / "bin" / "kube-apiserver"
    if not apiserver.exists():
        pytest.skip(f"no kube-apiserver {minor} in {cache}: build it with tools/testbin/build-versions.sh")
    version = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True, timeout=60).stdout
    assert version.startswith(f"Kubernetes v{minor}."), version  # the minor its directory names
    run = tiers.runs[minor].result()
    assert run is not None, f"{version.strip()}: the tier did not run"
    assert not run.timed_out, f"{version.strip()}: the tier took over {TIER_TIMEOUT} s\n{run.stdout[-8000:]}"
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"{version.strip()}: {summary} ({run.seconds:.0f} s)")
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
