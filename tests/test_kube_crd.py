"""The ServiceImport CRD: installed after the server started, served at v1alpha1 only, or at both."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube_server import MCS, NXDOMAIN, SERVFAIL, KubeServer, a, eventually, fqdn, service_import
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

NOT_INSTALLED = "ServiceImport: the CRD serviceimports.multicluster.x-k8s.io is not installed"


def test_crd_installed_after_start(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ns = fresh_namespace
    testbed.remove_crd()
    try:
        with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", startup_timeout="1s") as server:
            status, body = server.ready()
            assert status == 503 and NOT_INSTALLED in body, body
            assert "EndpointSlice" not in body and "Namespace" not in body, body  # those are listed
            assert server.answer(fqdn("web", ns)) == SERVFAIL  # would be NXDOMAIN once synced
            assert server.metric("mcsdns_synced") == 0

            testbed.install_crd("v0.5.0")
            # Written through v1alpha1, read through v1beta1: the schemas are identical.
            testbed.create(service_import(ns, "web", ["10.5.0.1"], api_version=f"{MCS}/v1alpha1"))
            server.wait_until_ready(timeout=30)
            server.wait_answer(fqdn("web", ns), "A", a("10.5.0.1"))
            assert server.answer(fqdn("nope", ns)) == NXDOMAIN
            log = server.log()
            # One log line per state change, not per retry: the missing CRD once (the server retried it
            # for about a second), and any later reason only where it differs from the one before (a
            # just-installed CRD's storage can answer "busy" for a moment: a new state, a new line).
            reasons = [line.split("cannot list: ", 1)[1] for line in log.splitlines() if "ServiceImport: cannot list: " in line]
            assert reasons and "is not installed" in reasons[0], log
            assert sum("is not installed" in r for r in reasons) == 1, log
            assert all(a != b for a, b in zip(reasons, reasons[1:])), log
            assert "ServiceImport: using multicluster.x-k8s.io/v1beta1" in log
    finally:
        testbed.install_crd("v0.5.0")


def test_crd_serving_only_v1alpha1(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ns = fresh_namespace
    testbed.install_crd("v0.4.1")
    try:
        testbed.create(service_import(ns, "web", ["10.5.1.1"], api_version=f"{MCS}/v1alpha1"))
        with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
            server.wait_until_ready()
            assert server.answer(fqdn("web", ns)) == a("10.5.1.1")
            testbed.patch(f"{MCS}/v1alpha1", "ServiceImport", ns, "web", {"spec": {"ips": ["10.5.1.2"]}})
            server.wait_answer(fqdn("web", ns), "A", a("10.5.1.2"))
            assert "ServiceImport: using multicluster.x-k8s.io/v1alpha1" in server.log()

            # Upgrading the CRD under a running server (v1alpha1 stays served) changes nothing visible.
            testbed.install_crd("v0.5.0")
            testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "web", {"spec": {"ips": ["10.5.1.3"]}})
            server.wait_answer(fqdn("web", ns), "A", a("10.5.1.3"))
            eventually(lambda: server.ready()[0] == 200, 5)
    finally:
        testbed.install_crd("v0.5.0")
