"""410 Gone: after etcd compaction and an API server restart, the watch relists and converges."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_server import MCS, NXDOMAIN, KubeServer, a, ensure_crd, eventually, fqdn, service_import
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

RESOURCES = ("serviceimports", "endpointslices", "namespaces")


def test_watch_gone_relists(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    for i in range(5):
        testbed.create(service_import(ns, f"svc{i}", [f"10.7.0.{i + 1}"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        for i in range(5):  # several writes the watch has seen...
            testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, f"svc{i}", {"spec": {"ips": [f"10.7.1.{i + 1}"]}})
        server.wait_answer(fqdn("svc4", ns), "A", a("10.7.1.5"))
        relists = {r: server.metric("mcsdns_relists_total", resource=r) for r in RESOURCES}
        assert relists == {r: 1.0 for r in RESOURCES}

        # ...then every resourceVersion it knows expires; the restart forces it to reconnect.
        testbed.compact_etcd()
        # Changes made while the watch may still be reconnecting: only a relist can see a delete missed here.
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "svc0")
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "svc1", {"spec": {"ips": ["10.7.2.2"]}})

        server.wait_answer(fqdn("svc0", ns), "A", NXDOMAIN, timeout=45)
        server.wait_answer(fqdn("svc1", ns), "A", a("10.7.2.2"))
        for resource in RESOURCES:
            eventually(lambda: (server.metric("mcsdns_relists_total", resource=resource) or 0) >= 2, 30,
                       what=lambda: f"{resource} relisted after 410\n{server.tail()}")
        assert "410 Gone" in server.log()
        assert server.answer(fqdn("svc4", ns)) == a("10.7.1.5")

        testbed.create(service_import(ns, "late", ["10.7.3.1"]))  # the new watch works
        server.wait_answer(fqdn("late", ns), "A", a("10.7.3.1"))
