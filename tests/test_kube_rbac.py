"""An ordinary user bound only to the project's ClusterRole syncs; without it, /ready says why."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_server import CLUSTER_ROLE_RULES, KubeServer, a, ensure_crd, eventually, fqdn, service_import
from testsupport.testbed import ApiError, Testbed

pytestmark = pytest.mark.kube

RBAC = "rbac.authorization.k8s.io/v1"


def bind(testbed: Testbed, name: str, user: str) -> None:
    """The project's ClusterRole (under a unique name), bound to `user`."""
    testbed.apply({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name},
                   "rules": CLUSTER_ROLE_RULES})
    testbed.apply({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })


@pytest.fixture
def role_name(testbed: Testbed) -> Iterator[str]:
    name = f"mcsdns-{uuid.uuid4().hex[:8]}"
    yield name
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        testbed.delete(RBAC, kind, None, name)


def can_list_all(testbed: Testbed, kubeconfig: Path) -> bool:
    """RBAC changes reach the authorizer through an informer: wait until they did."""
    client = testbed.client_for(kubeconfig)
    try:
        for path in ("/api/v1/namespaces", "/apis/discovery.k8s.io/v1/endpointslices",
                     "/apis/multicluster.x-k8s.io/v1beta1/serviceimports"):
            client.request("GET", path, query={"limit": 1})
    except ApiError as err:
        if err.status != 403:
            raise
        return False
    return True


def test_user_with_cluster_role_syncs(testbed: Testbed, fresh_namespace: str, role_name: str,
                                      tmp_path: Path) -> None:
    ensure_crd(testbed)
    user = f"dns-{role_name}"
    kubeconfig = testbed.make_user_kubeconfig(user)
    bind(testbed, role_name, user)
    eventually(lambda: can_list_all(testbed, kubeconfig), 10)
    testbed.create(service_import(fresh_namespace, "web", ["10.8.0.1"]))
    with KubeServer(kubeconfig, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        assert server.answer(fqdn("web", fresh_namespace)) == a("10.8.0.1")
        testbed.create(service_import(fresh_namespace, "api", ["10.8.0.2"]))  # the watch is allowed too
        server.wait_answer(fqdn("api", fresh_namespace), "A", a("10.8.0.2"))


def test_user_without_cluster_role_is_not_ready(testbed: Testbed, fresh_namespace: str, role_name: str,
                                                tmp_path: Path) -> None:
    ensure_crd(testbed)
    user = f"dns-{role_name}"
    kubeconfig = testbed.make_user_kubeconfig(user)
    testbed.create(service_import(fresh_namespace, "web", ["10.8.1.1"]))
    with KubeServer(kubeconfig, tmp_path / "mcsdns.log", startup_timeout="1s") as server:
        status, body = server.ready()
        assert status == 503, body
        for kind, plural in (("ServiceImport", "serviceimports"), ("EndpointSlice", "endpointslices"),
                             ("Namespace", "namespaces")):
            assert f"{kind}: forbidden (" in body, body
            assert f'User "{user}" cannot list resource "{plural}"' in body, body
        assert server.log().count("ServiceImport: cannot list: forbidden") == 1

        # Granting the role later is picked up without a restart.
        bind(testbed, role_name, user)
        server.wait_until_ready(timeout=30)
        assert server.answer(fqdn("web", fresh_namespace)) == a("10.8.1.1")
        # The sync, long after start-up, left its services to compile after it: they are, not only when asked.
        assert "more to compile while serving" in server.log()
        eventually(lambda: "compiled every service" in server.log(), 10, what="the compile after a late sync")
