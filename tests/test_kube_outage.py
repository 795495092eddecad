"""kube-apiserver down for 20 s: answers continue, and later changes arrive without a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kube_server import MCS, KubeServer, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

OUTAGE = 20.0


def test_apiserver_outage(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    vip, web = fqdn("vip", ns), fqdn("web", ns)
    testbed.create(service_import(ns, "vip", ["10.6.0.1"]))
    testbed.create(service_import(ns, "web", headless=True))
    testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.6.1.1", True)]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        testbed.stop_apiserver()
        try:
            down_at = time.monotonic()
            saw_down = False
            while time.monotonic() - down_at < OUTAGE:
                assert server.answer(vip) == a("10.6.0.1")
                assert server.answer(web) == a("10.6.1.1")
                assert server.ready()[0] == 200, "an outage after sync keeps the server ready"
                saw_down = saw_down or server.metric("mcsdns_watch_up", resource="endpointslices") == 0
                time.sleep(0.5)
            assert saw_down, "mcsdns_watch_up should report the watch down"
            assert "watch down" in server.log()
        finally:
            testbed.start_apiserver()
        restarted = time.monotonic()

        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.6.0.2"]}})
        testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.6.1.1", True), ("10.6.1.2", True)]))
        server.wait_answer(vip, "A", a("10.6.0.2"), timeout=45)
        server.wait_answer(web, "A", a("10.6.1.1", "10.6.1.2"), timeout=10)
        print(f"changes visible {time.monotonic() - restarted:.1f}s after the API server was back")
        for resource in ("serviceimports", "endpointslices", "namespaces"):
            eventually(lambda: server.metric("mcsdns_watch_up", resource=resource) == 1, 30,
                       what=lambda: f"{resource} watch up\n{server.tail()}")
        assert "watch up again" in server.log()
