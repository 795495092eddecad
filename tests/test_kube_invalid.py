"""Objects DNS cannot fully represent are served without that part (decision 12); only a name that
cannot be a DNS label refuses an object. Each omission and refusal is logged and counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_server import MCS, NODATA, KubeServer, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

REJECTED = "mcsdns_objects_rejected_total"


def test_invalid_objects(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    """Decision 12 on a real API: what the CRD accepts is served, without only the part DNS cannot
    represent; an object refused whole (no usable name) keeps its last good version out of reach."""
    ensure_crd(testbed)
    ns = fresh_namespace
    good, bad, web, first = fqdn("good", ns), fqdn("bad", ns), fqdn("web", ns), fqdn("1st", ns)
    testbed.create(service_import(ns, "good", ["10.9.9.1"]))
    testbed.create(service_import(ns, "bad", ["not-an-ip", "10.9.9.4"]))  # the CRD accepts any string
    testbed.create(service_import(ns, "1st", ["10.9.9.5"]))  # a DNS label, not a DNS-1035 one: served
    testbed.create(service_import(ns, "two.labels", ["10.9.9.6"]))  # a valid object name, no DNS label
    testbed.create(service_import(ns, "web", headless=True))
    testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.9.8.1", True)]))
    # --resync 2s: relists run often, so the `keep` path of a relist is exercised too.
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--resync", "2s") as server:
        server.wait_until_ready()
        assert server.answer(good) == a("10.9.9.1")
        assert server.answer(bad) == a("10.9.9.4")
        assert server.answer(first) == a("10.9.9.5")
        assert server.metric(REJECTED, reason="spec.ips") == 1
        assert server.metric(REJECTED, reason="metadata.name") == 1
        line = (f"ServiceImport {ns}/bad served without what DNS cannot represent: "
                "spec.ips[0]: 'not-an-ip' is not an IP address; left out")
        assert line in server.log()
        assert f"ServiceImport {ns}/two.labels rejected: metadata.name 'two.labels' cannot be a DNS label" in server.log()

        # An update whose only address is no IP: the name stays, without addresses (NODATA).
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "good", {"spec": {"ips": ["10.9.9.999"]}})
        server.wait_answer(good, "A", NODATA)
        assert server.metric(REJECTED, reason="spec.ips") == 2

        # A slice whose service-name label (the API accepts it) names no ServiceImport: its last good
        # version stays.
        testbed.apply(endpoint_slice(ns, "web-east", "Web_1", "east", [("10.9.8.2", True)]))
        eventually(lambda: server.metric(REJECTED, reason="label") is not None, 10)
        assert server.answer(web) == a("10.9.8.1")
        assert "its last good version stays in service" in server.log()

        # Relists (every 2 s) report nothing again, and keep what they kept.
        relists = server.metric("mcsdns_relists_total", resource="serviceimports") or 0
        eventually(lambda: (server.metric("mcsdns_relists_total", resource="serviceimports") or 0) >= relists + 1, 10)
        eventually(lambda: (server.metric("mcsdns_relists_total", resource="endpointslices") or 0) >= 2, 10)
        assert server.answer(web) == a("10.9.8.1")
        assert server.answer(bad) == a("10.9.9.4")
        assert server.metric(REJECTED, reason="spec.ips") == 2
        assert server.metric(REJECTED, reason="metadata.name") == 1

        # Fixing the objects brings their new versions in.
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "good", {"spec": {"ips": ["10.9.9.2"]}})
        server.wait_answer(good, "A", a("10.9.9.2"))
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "bad", {"spec": {"ips": ["10.9.9.3"]}})
        server.wait_answer(bad, "A", a("10.9.9.3"))
