"""A Kubernetes source begun before the event loop exists (`KubeSource.begin`, as `mcsdns serve` does).

`cli.main` starts the watch threads before it imports and builds the App, so the API server prepares
the first lists meanwhile. Until `run` takes over, the threads' events wait; these tests hold that
nothing is lost or reordered in the handover, on the test bed's real API server, and that a
kubeconfig that cannot be loaded still fails `run` (where the App reports a source's failure).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import dns.message
import dns.rcode
import pytest
from prometheus_client import CollectorRegistry

from kube_server import MCS, endpoint_slice, ensure_crd, service_import
from mcsdns.metrics import Metrics
from mcsdns.serve.resolve import Resolver
from mcsdns.sources.kube import KubeSettings, KubeSource
from mcsdns.sources.kubeapi import KubeConfigError
from mcsdns.sources.events import Listed
from testsupport.inprocess import ask, build_table
from testsupport.testbed import Testbed

Z = "clusterset.local"


def addresses(resolver: Resolver, name: str, namespace: str) -> tuple[str, list[str]]:
    query = dns.message.make_query(f"{name}.{namespace}.svc.{Z}", "A")
    reply = ask(resolver, query)
    return dns.rcode.to_text(reply.rcode()), sorted(rd.to_text() for rrset in reply.answer for rd in rrset)


def test_events_before_the_loop_are_applied_in_order_once_it_runs(testbed: Testbed, fresh_namespace: str) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    for i in range(3):
        testbed.create(service_import(ns, f"vip-{i}", [f"10.7.0.{i + 1}"]))
    testbed.create(service_import(ns, "web", headless=True))
    testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.8.0.1", True)]))

    source = KubeSource(KubeSettings(kubeconfig=testbed.kubeconfig_path))
    source.begin()  # no loop, no store yet: what mcsdns serve does before it builds the App
    try:
        deadline = time.monotonic() + 30
        while {s.resource.kind for s, e in list(source._early) if type(e) is Listed} != set(source.states):
            assert time.monotonic() < deadline, f"the lists did not arrive: {source._early!r}"
            time.sleep(0.05)
        # After the lists, while nothing is applied: a change (a watch event, queued behind them), a
        # delete, and a slice that changes the headless answer.
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip-0", {"spec": {"ips": ["10.7.1.1"]}})
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip-1")
        testbed.create(endpoint_slice(ns, "web-west", "web", "west", [("10.8.0.2", True)]))
        time.sleep(1.0)  # the watch events arrive (and wait) before run() takes over

        table = build_table(zones=(Z,))
        resolver = Resolver(table)
        source.attach(table.store, Metrics(CollectorRegistry()))
        assert not table.store.imports  # nothing reached the store before the loop

        async def main() -> None:
            stop = asyncio.Event()
            task = asyncio.create_task(source.run(stop))
            try:
                deadline = time.monotonic() + 30
                while addresses(resolver, "web", ns)[1] != ["10.8.0.1", "10.8.0.2"]:
                    assert time.monotonic() < deadline, addresses(resolver, "web", ns)
                    await asyncio.sleep(0.05)
                assert table.synced
                assert addresses(resolver, "vip-0", ns) == ("NOERROR", ["10.7.1.1"])  # the change, after its list
                assert addresses(resolver, "vip-1", ns)[0] == "NXDOMAIN"  # the delete, after its list
                assert addresses(resolver, "vip-2", ns) == ("NOERROR", ["10.7.0.3"])
                assert not source._early  # all handed over

                testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip-2", {"spec": {"ips": ["10.7.2.2"]}})
                deadline = time.monotonic() + 30
                while addresses(resolver, "vip-2", ns) != ("NOERROR", ["10.7.2.2"]):  # and from then on, directly
                    assert time.monotonic() < deadline, addresses(resolver, "vip-2", ns)
                    await asyncio.sleep(0.05)
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)

        asyncio.run(main())
    finally:
        source._stop.set()  # the threads end if an assertion came before run()


@pytest.mark.parametrize("early", [True, False])
def test_a_kubeconfig_that_does_not_load_fails_run_begun_early_or_not(tmp_path: Path, early: bool) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: [\n")
    source = KubeSource(KubeSettings(kubeconfig=broken))
    if early:
        source.begin()  # does not raise: the App reports the source's failure, as without it
        assert not any(s.thread for s in source.states.values())
    table = build_table(zones=(Z,))
    source.attach(table.store, Metrics(CollectorRegistry()))
    with pytest.raises(KubeConfigError, match=str(broken)):
        asyncio.run(source.run(asyncio.Event()))
