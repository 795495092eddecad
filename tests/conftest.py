"""Shared pytest fixtures.

Other fixtures may be added to this file; keep each group in its own delimited
block.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

# ============================================================================ #
# BEGIN CI: a test that cannot run here fails in CI instead of skipping
# ============================================================================ #


def in_ci() -> bool:
    """CI=true (or any value but empty, 0, false): every test must run, none may skip."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """In CI, a skip is a failure carrying the skip's reason.

    Tests skip when the machine lacks something they need (a binary such as dnsperf or
    knotd, the kube-apiserver build, mount namespaces). On a laptop that is a fair skip;
    in CI it would let a test silently vanish from the run while its claim stays in the
    README. Every skip in the suite goes through pytest.skip (or a skipif mark), so this
    one hook covers them all: write `pytest.skip(reason)` and CI fails with that reason.
    """
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    report.outcome = "failed"
    report.longrepr = f"{item.nodeid}: would be skipped, but CI={os.environ['CI']} runs every test: {reason}"


# ============================================================================ #
# END CI
# ============================================================================ #

# ============================================================================ #
# BEGIN kube testbed fixtures (real etcd + kube-apiserver, see testsupport/testbed.py)
# ============================================================================ #

from testsupport.testbed import ApiError, Testbed, find_testbin  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kube: needs the real etcd + kube-apiserver testbed (tools/testbin/build.sh)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the testbin as `kube`, so `-m "not kube"` deselects it."""
    for item in items:
        if "testbin" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kube)


def require_testbin() -> Path:
    """The testbin cache, or skip (a failure in CI: see pytest_runtest_makereport)."""
    try:
        return find_testbin()
    except RuntimeError as err:
        pytest.skip(str(err))


@pytest.fixture
def benchmark_tools() -> None:
    """dnsperf and knotd, which the benchmarks drive, or skip (a failure in CI: see pytest_runtest_makereport)."""
    from benchmarks.servers import tool_path

    for tool, package in (("dnsperf", "dnsperf"), ("knotd", "knot")):
        if tool_path(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package}; .ci/run installs it)")


@pytest.fixture(scope="session")
def testbin() -> Path:
    """The testbin cache dir, for tests that start their own Testbed (or CoreDNS)."""
    return require_testbin()


@pytest.fixture(scope="session")
def testbed(testbin: Path) -> Iterator[Testbed]:
    """One etcd + kube-apiserver for the whole session (start takes ~3 s).

    Tests share it, so they must isolate themselves by namespace (see
    `fresh_namespace`) and restore any cluster-scoped state they change (CRD
    version, apiserver running).
    """
    bed = Testbed(testbin)
    bed.start()
    try:
        yield bed
    finally:
        bed.stop()


_namespace_counter = itertools.count(1)


def _empty_namespace(testbed: Testbed, namespace: str) -> None:
    """Delete the objects mcsdns reads, whatever ServiceImport version is served now."""
    if not testbed.apiserver or not testbed.apiserver.running():
        return  # a test left the apiserver down; nothing to clean through
    paths = [f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
             f"/api/v1/namespaces/{namespace}/services"]
    paths += [f"/apis/multicluster.x-k8s.io/{v}/namespaces/{namespace}/serviceimports"
              for v in testbed.served_mcs_versions()[:1]]
    for path in paths:
        try:
            if path.endswith("/services"):
                # Services have no deletecollection; delete one by one.
                for svc in testbed.api.request("GET", path)["items"]:
                    testbed.api.request("DELETE", f"{path}/{svc['metadata']['name']}")
            else:
                testbed.api.request("DELETE", path)
        except ApiError as err:
            if err.status != 404:
                raise


@pytest.fixture
def fresh_namespace(testbed: Testbed, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new, uniquely named namespace; its EndpointSlices/ServiceImports are removed afterwards.

    The namespace itself is left in place on purpose: without kube-controller-manager
    nothing finalizes a deleted namespace, so it would hang in Terminating forever.
    """
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem or 'test'}-{next(_namespace_counter)}"
    testbed.create_namespace(name)
    yield name
    _empty_namespace(testbed, name)

# ============================================================================ #
# END kube testbed fixtures
# ============================================================================ #

# ============================================================================ #
# BEGIN server logs: each mcsdns server's log lands in a pytest temp directory
# ============================================================================ #

from testsupport import mcsdnsserver  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _server_logs_for_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Servers a module or session fixture starts (before any test's tmp_path exists) log here."""
    mcsdnsserver.LOG_DIR = tmp_path_factory.mktemp("server-logs")
    yield
    mcsdnsserver.LOG_DIR = None


@pytest.fixture(autouse=True)
def _server_logs_for_the_test(_server_logs_for_the_session: None, tmp_path: Path) -> Iterator[None]:
    """A server the test starts itself logs into the test's tmp_path, beside its other files."""
    session_dir = mcsdnsserver.LOG_DIR
    mcsdnsserver.LOG_DIR = tmp_path
    yield
    mcsdnsserver.LOG_DIR = session_dir

# ============================================================================ #
# END server logs
# ============================================================================ #
