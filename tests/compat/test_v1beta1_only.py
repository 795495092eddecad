"""Further than CoreDNS can go: a ServiceImport CRD that serves only v1beta1.

mcs-api releases after v0.5 drop v1alpha1; CoreDNS 1.14 reads ServiceImports
only at v1alpha1 (contract section 1.1), mcsdns at whichever version the
cluster serves (decision 2). Here the v0.5.0 CRD is installed with v1alpha1
removed from spec.versions, the contract fixture is loaded at v1beta1, and a
fresh mcsdns and a fresh CoreDNS (both `namespaces testns`) are started:
mcsdns must answer every case of the contract tables; the suite records how
CoreDNS fares (it never syncs). Runs last in the package: it changes the CRD,
and restores v0.5.0 when done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import dns.exception
import dns.message
import dns.query
import pytest

from testsupport.cases import MAIN, check, make_query
from testsupport.testbed import Testbed

from .compare import TALLY
from .coredns import Block, CoreDNS
from .generator import MCS
from .harness import SOURCE, CompatServer, World, load

pytestmark = [pytest.mark.kube,
              pytest.mark.skipif(SOURCE == "manifests", reason="the manifests debugging aid dumps v1alpha1 objects")]


def _failures(port: int) -> dict[str, str]:
    out = {}
    for c in MAIN:
        try:
            check(c, dns.query.udp(make_query(c), "127.0.0.1", port=port, timeout=2))
        except (AssertionError, dns.exception.Timeout) as err:
            out[c.id] = str(err) or type(err).__name__
    return out


@pytest.fixture(scope="module")
def v1beta1_only(testbed: Testbed, world: World, workdir: Path) -> Iterator[tuple[CoreDNS, CompatServer]]:
    testbed.remove_crd()  # objects written at v1alpha1 keep it in their managedFields: start afresh
    testbed.install_crd("v0.5.0", only="v1beta1")
    assert testbed.served_mcs_versions() == ["v1beta1"]
    objects = [dict(o, apiVersion=f"{MCS}/v1beta1") if o["kind"] == "ServiceImport" else o
               for o in world.contract.objects]
    load(testbed, objects)
    core = CoreDNS(testbed.kubeconfig_path, workdir, [Block(("testns",))], startup_timeout="2s",
                   name="coredns-v1beta1")
    mine = CompatServer(testbed, workdir, "mcsdns-v1beta1", "--namespaces", "testns", "--startup-timeout", "30s")
    try:
        core.start(wait_ready=False)
        mine.start()
        yield core, mine
    finally:
        core.stop()
        mine.stop()
        testbed.install_crd("v0.5.0")
        load(testbed, world.contract.objects)


def test_mcsdns_passes_the_whole_contract_on_a_v1beta1_only_crd(v1beta1_only) -> None:
    core, mine = v1beta1_only
    assert mine.http("/ready")[0] == 200
    assert "using multicluster.x-k8s.io/v1beta1" in mine.log()
    assert _failures(mine.dns_port) == {}


def test_coredns_cannot_read_a_v1beta1_only_crd(v1beta1_only) -> None:
    """Recorded, not required: CoreDNS (v1alpha1 only) never becomes ready and misses the imports."""
    core, mine = v1beta1_only
    status = core.ready()[0]
    failed = _failures(core.port)
    TALLY.notes.append(
        f"CRD serving only v1beta1: mcsdns passes {len(MAIN)}/{len(MAIN)} contract cases; CoreDNS "
        f"{TALLY.coredns_version} passes {len(MAIN) - len(failed)}/{len(MAIN)} (/ready {status}: it reads only v1alpha1)")
    assert status != 200
    reply = dns.query.udp(dns.message.make_query("svc1.testns.svc.clusterset.local.", "A"), "127.0.0.1",
                          port=core.port, timeout=2)
    assert not reply.answer  # the ServiceImport is invisible to it
