"""Endpoint-level changes: readiness flips and a slice moving to another cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_server import NXDOMAIN, KubeServer, a, endpoint_slice, ensure_crd, fqdn, service_import
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube


def test_ready_endpoints_becoming_not_ready(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    web = fqdn("web", ns)
    testbed.create(service_import(ns, "web", headless=True))
    testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.2.0.1", True), ("10.2.0.2", True)]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        assert server.answer(web) == a("10.2.0.1", "10.2.0.2")

        testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.2.0.1", True), ("10.2.0.2", False)]))
        server.wait_answer(web, "A", a("10.2.0.1"))
        assert server.answer(f"10-2-0-2.east.{web}") == NXDOMAIN

        testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.2.0.1", False), ("10.2.0.2", False)]))
        server.wait_answer(web, "A", NXDOMAIN)  # a headless service without ready addresses does not exist

        testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.2.0.1", True), ("10.2.0.2", True)]))
        server.wait_answer(web, "A", a("10.2.0.1", "10.2.0.2"))


def test_slice_moving_between_clusters(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    web = fqdn("web", ns)
    testbed.create(service_import(ns, "web", headless=True))
    testbed.create(endpoint_slice(ns, "web-1", "web", "east", [("10.3.0.1", True)]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        assert server.answer(f"10-3-0-1.east.{web}") == a("10.3.0.1")
        assert server.answer(f"10-3-0-1.west.{web}") == NXDOMAIN

        testbed.apply(endpoint_slice(ns, "web-1", "web", "west", [("10.3.0.1", True)]))
        server.wait_answer(f"10-3-0-1.west.{web}", "A", a("10.3.0.1"))
        assert server.answer(f"10-3-0-1.east.{web}") == NXDOMAIN
        assert server.answer(web) == a("10.3.0.1")
        rcode, srv = server.answer(web, "SRV")
        assert rcode == "NOERROR" and srv == [f"0 100 80 10-3-0-1.west.{web}."]
