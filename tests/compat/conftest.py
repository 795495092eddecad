"""Fixtures of the differential suite: the session's kube-apiserver, one CoreDNS and
mcsdns per data set, shared by every test of tests/compat (package scope).

Order matters and is forced by fixture dependencies:
  1. `unsynced`: the ServiceImport CRD is removed; a CoreDNS and an mcsdns start
     against the API without it (neither can sync) and are compared at once.
     They keep running so a later test can see both sync when the CRD returns.
  2. `world`: CRD v0.5.0 installed; the contract fixture (tests/fixtures/contract.yaml)
     and a generated cluster set loaded; one CoreDNS with two server blocks (all
     namespaces / `namespaces testns`) and two mcsdns (all / --namespaces testns).
Everything the suite created is deleted at the end (namespaces stay: without
kube-controller-manager nothing would finalize them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

import mcsdns
from testsupport.mcsdnsserver import FIXTURES
from testsupport.testbed import Testbed

from . import compare
from .compare import TALLY
from .coredns import Block, CoreDNS, coredns_version, find_coredns
from .dnsclient import UDP_EDNS, Ask
from .generator import asks, generate, load_manifests, names
from .harness import SEED, SOURCE, CompatServer, Unsynced, World, load, merge, unload


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    text = TALLY.summary()
    if not text:
        return
    terminalreporter.write_sep("=", "differential suite: CoreDNS vs mcsdns")
    terminalreporter.write_line(text)
    try:
        path = Path(config.cache.mkdir("mcsdns-compat")) / "summary.txt"
    except Exception:  # the cache may be disabled (-p no:cacheprovider)
        return
    path.write_text(text + "\n\nExamples of the documented differences:\n" + TALLY.details() + "\n")
    every = "\n".join(d.describe() for d in TALLY.unexpected + TALLY.documented_all)
    (path.parent / "differences.txt").write_text(every + "\n")
    terminalreporter.write_line(f"(written to {path}; every difference in {path.parent / 'differences.txt'})")


@pytest.fixture(scope="package")
def coredns_binary(testbin: Path) -> Path:
    try:
        path = find_coredns()
    except RuntimeError as err:
        if os.environ.get("CI"):
            pytest.fail(str(err), pytrace=False)
        pytest.skip(str(err))
    TALLY.coredns_version = coredns_version(path)
    TALLY.mcsdns_version = mcsdns.__version__
    return path


@pytest.fixture(scope="package")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compat")


@pytest.fixture(scope="package")
def unsynced(testbed: Testbed, coredns_binary: Path, workdir: Path) -> Iterator[Unsynced]:
    if testbed.served_mcs_versions():
        testbed.remove_crd()
    contract = load_manifests(FIXTURES / "contract.yaml", "contract fixture")
    load(testbed, [o for o in contract.objects if o["kind"] in ("Namespace", "EndpointSlice")])
    core = CoreDNS(testbed.kubeconfig_path, workdir, [Block(("testns",))], startup_timeout="1s",
                   name="coredns-unsynced")
    mine = CompatServer(testbed, workdir, "mcsdns-unsynced", "--namespaces", "testns", "--startup-timeout", "1s",
                  wait_ready=False)
    try:
        core.start(wait_ready=False)
        mine.start()
        state = Unsynced(core, mine, contract)
        if SOURCE != "manifests":  # a manifests file is always "synced"
            state.ready_before = (core.ready()[0], mine.http("/ready")[0])
            state.diffs = compare.compare("not synced", state.ports, asks(names(contract), SEED, transports=(UDP_EDNS,)),
                                          contract)
            for qname in ("svc1.testns.svc.clusterset.local.", "nosuch.testns.svc.clusterset.local.",
                          "foo.clusterset.local."):
                a, b = compare.ask_both(state.ports, [Ask(qname, "A", UDP_EDNS, 1232)])
                state.servfail[qname] = (a[0].rcode, b[0].rcode)
        yield state
    finally:
        core.stop()
        mine.stop()


@pytest.fixture(scope="package")
def world(testbed: Testbed, unsynced: Unsynced, coredns_binary: Path, workdir: Path) -> Iterator[World]:
    testbed.install_crd("v0.5.0")
    contract = unsynced.contract
    generated = generate(SEED)
    load(testbed, contract.objects + generated.objects)
    core = CoreDNS(testbed.kubeconfig_path, workdir, [Block(), Block(("testns",))], name="coredns")
    all_ns = CompatServer(testbed, workdir, "mcsdns-all", "--startup-timeout", "30s")
    testns = CompatServer(testbed, workdir, "mcsdns-testns", "--namespaces", "testns", "--startup-timeout", "30s")
    w = None
    try:
        core.start()
        all_ns.start()
        testns.start()
        w = World(testbed, core, all_ns, testns, contract, generated, merge("everything", contract, generated), workdir)
        yield w
    finally:
        for proc in (core, all_ns, testns):
            proc.stop()
        unload(testbed, contract.objects + generated.objects + (w.created if w else []))
