"""A namespace that goes away takes its names with it (the objects in it may linger)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kube_server import MCS, NXDOMAIN, KubeServer, a, ensure_crd, fqdn, service_import
from testsupport.testbed import ApiError, Testbed

pytestmark = pytest.mark.kube


def finalize_namespace(testbed: Testbed, name: str) -> None:
    """Finish a namespace deletion as kube-controller-manager would (none runs here).

    kube-apiserver adds the `kubernetes` finalizer to every namespace; clearing it
    through the /finalize subresource lets the Terminating namespace go.
    """
    ns = testbed.get("v1", "Namespace", None, name)
    ns["spec"]["finalizers"] = []
    testbed.api.request("PUT", f"/api/v1/namespaces/{name}/finalize", ns)


def test_deleted_namespace_takes_its_names(testbed: Testbed, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = f"doomed-{uuid.uuid4().hex[:8]}"  # not fresh_namespace: this one is really deleted
    testbed.create_namespace(ns)
    testbed.create(service_import(ns, "vip", ["10.4.0.1"]))
    vip = fqdn("vip", ns)
    try:
        with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
            server.wait_until_ready()
            assert server.answer(vip) == a("10.4.0.1")

            testbed.delete("v1", "Namespace", None, ns)
            # Terminating: the Namespace object still exists, so (as in CoreDNS) its names do too.
            assert testbed.get("v1", "Namespace", None, ns)["status"]["phase"] == "Terminating"
            assert server.answer(vip) == a("10.4.0.1")

            finalize_namespace(testbed, ns)
            server.wait_answer(vip, "A", NXDOMAIN)
            # The ServiceImport itself is still stored (nothing deletes a namespace's contents here).
            assert testbed.get(f"{MCS}/v1beta1", "ServiceImport", ns, "vip")["spec"]["ips"] == ["10.4.0.1"]

            testbed.create_namespace(ns)  # the namespace comes back: so does the name
            server.wait_answer(vip, "A", a("10.4.0.1"))
    finally:
        try:
            testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip")
        except ApiError:
            pass
