"""Creates, updates and deletes of ServiceImports and EndpointSlices reach the answers, fast."""

from __future__ import annotations

import datetime
import signal
import time
from pathlib import Path

import pytest

from kube_server import (
    ES_API,
    MCS,
    NXDOMAIN,
    KubeServer,
    a,
    endpoint_slice,
    ensure_crd,
    fqdn,
    service_import,
)
from testsupport.polling import eventually
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

LATENCY_BOUND = 3.0  # seconds from the API write returning to the new answer; typically ~10-50 ms


def test_changes_show_up_in_answers(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    vip, web = fqdn("vip", ns), fqdn("web", ns)
    latencies: dict[str, float] = {}
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        assert server.answer(vip) == NXDOMAIN

        testbed.create(service_import(ns, "vip", ["10.9.0.1"]))
        latencies["ServiceImport create"] = server.wait_answer(vip, "A", a("10.9.0.1"))
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.9.0.2"]}})
        latencies["ServiceImport update"] = server.wait_answer(vip, "A", a("10.9.0.2"))

        testbed.create(service_import(ns, "web", headless=True))
        testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.1", True)]))
        latencies["EndpointSlice create"] = server.wait_answer(web, "A", a("10.1.0.1"))
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.1", True), ("10.1.0.2", True)],
                                     annotations={"endpoints.kubernetes.io/last-change-trigger-time": now}))
        latencies["EndpointSlice update"] = server.wait_answer(web, "A", a("10.1.0.1", "10.1.0.2"))
        assert server.answer(f"10-1-0-2.east.web.{ns}.svc.clusterset.local") == a("10.1.0.2")
        testbed.delete(ES_API, "EndpointSlice", ns, "web-east")
        latencies["EndpointSlice delete"] = server.wait_answer(web, "A", NXDOMAIN)

        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip")
        latencies["ServiceImport delete"] = server.wait_answer(vip, "A", NXDOMAIN)

        # Programming latency is observed both from event arrival and from the trigger-time annotation.
        name = "coredns_kubernetes_dns_programming_duration_seconds_count"
        assert (server.metric(name, service_kind="cluster_ip") or 0) >= 3
        assert (server.metric(name, service_kind="headless_with_selector") or 0) >= 2
        assert server.metric("mcsdns_watch_up", resource="serviceimports") == 1
        assert server.shutdown() < 3.0, "shutdown must be prompt"

    for what, seconds in latencies.items():
        print(f"{what}: {seconds * 1000:.0f} ms")
    slow = {k: v for k, v in latencies.items() if v > LATENCY_BOUND}
    assert not slow, f"changes took longer than {LATENCY_BOUND}s: {slow}"


def test_changes_made_during_the_lameduck_reach_its_answers(testbed: Testbed, fresh_namespace: str,
                                                           tmp_path: Path) -> None:
    """After SIGTERM a pod keeps answering for --lameduck while kube-proxy and conntrack move its
    clients away: those answers follow the API to the end (the watches stop after the last answer).
    In the one-node cluster a frozen watch here answered a rollout's queries 7-9 s stale."""
    ensure_crd(testbed)
    ns = fresh_namespace
    vip = fqdn("vip", ns)
    testbed.create(service_import(ns, "vip", ["10.9.0.1"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--lameduck", "8s") as server:
        server.wait_until_ready()
        server.wait_answer(vip, "A", a("10.9.0.1"))
        server.signal(signal.SIGTERM)
        signalled = time.monotonic()
        eventually(lambda: server.ready() == (503, "Shutting down"))
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.9.0.2"]}})
        server.wait_answer(vip, "A", a("10.9.0.2"), timeout=LATENCY_BOUND)
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip")
        server.wait_answer(vip, "A", NXDOMAIN, timeout=LATENCY_BOUND)
        assert time.monotonic() - signalled < 8 and server.proc.poll() is None, "answered after the lameduck"
        assert server.proc.wait(20) == 0, server.tail()
