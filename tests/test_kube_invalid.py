"""Objects DNS cannot represent are skipped and counted; their last good version is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_server import MCS, NXDOMAIN, McsDns, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from testbed import Testbed

pytestmark = pytest.mark.kube

REJECTED = "mcsdns_objects_rejected_total"


def test_invalid_objects(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    good, bad, web = fqdn("good", ns), fqdn("bad", ns), fqdn("web", ns)
    testbed.create(service_import(ns, "good", ["10.9.9.1"]))
    testbed.create(service_import(ns, "bad", ["not-an-ip"]))  # the CRD accepts any string
    testbed.create(service_import(ns, "web", headless=True))
    testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.9.8.1", True)]))
    # --resync 2s: relists run often, so the `keep` path of a relist is exercised too.
    with McsDns(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--resync", "2s") as server:
        server.wait_until_ready()
        assert server.answer(good) == a("10.9.9.1")
        assert server.answer(bad) == NXDOMAIN
        assert server.metric(REJECTED, reason="spec.ips") == 1
        line = f"ServiceImport {ns}/bad rejected: spec.ips[0]: 'not-an-ip' is not an IP address; skipped"
        assert line in server.log()

        # An update that makes a served object invalid: the last good version stays.
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "good", {"spec": {"ips": ["10.9.9.999"]}})
        eventually(lambda: (server.metric(REJECTED, reason="spec.ips") or 0) >= 2, 10)
        assert server.answer(good) == a("10.9.9.1")
        assert f"ServiceImport {ns}/good rejected" in server.log()
        assert "its last good version stays in service" in server.log()

        # Same for a slice: a service-name label the API accepts but that is no service name.
        testbed.apply(endpoint_slice(ns, "web-east", "Web_1", "east", [("10.9.8.2", True)]))
        eventually(lambda: server.metric(REJECTED, reason="label") is not None, 10)
        assert server.answer(web) == a("10.9.8.1")

        # Relists (every 2 s) keep them too.
        relists = server.metric("mcsdns_relists_total", resource="serviceimports") or 0
        eventually(lambda: (server.metric("mcsdns_relists_total", resource="serviceimports") or 0) >= relists + 1, 10)
        eventually(lambda: (server.metric("mcsdns_relists_total", resource="endpointslices") or 0) >= 2, 10)
        assert server.answer(good) == a("10.9.9.1")
        assert server.answer(web) == a("10.9.8.1")
        assert server.answer(bad) == NXDOMAIN

        # Fixing the object brings its new version in.
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "good", {"spec": {"ips": ["10.9.9.2"]}})
        server.wait_answer(good, "A", a("10.9.9.2"))
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "bad", {"spec": {"ips": ["10.9.9.3"]}})
        server.wait_answer(bad, "A", a("10.9.9.3"))
