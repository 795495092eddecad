"""Tests of the testbed itself: if these fail, every kube test is suspect."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testsupport.objects import ES_API, MCS, endpoint_slice, service_import
from testsupport.polling import eventually
from testsupport.testbed import ApiError, KubeClient, Testbed, find_testbin



def labelled_slice(namespace: str, name: str, labels: dict[str, str], ip: str = "10.1.0.1") -> dict:
    """The shared EndpointSlice with exactly `labels` (these tests select and patch by label)."""
    obj = endpoint_slice(namespace, name, service="", cluster=None, endpoints=[(ip, True)])
    obj["metadata"]["labels"] = labels
    return obj


@pytest.fixture
def crd_v050(testbed: Testbed) -> Iterator[Testbed]:
    """The session default: mcs-api v0.5.0 (v1beta1 storage + v1alpha1)."""
    testbed.install_crd("v0.5.0")
    yield testbed


def test_find_testbin_explains_how_to_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MCSDNS_TESTBIN_CACHE", str(tmp_path))
    with pytest.raises(RuntimeError, match=r"tools/testbin/build\.sh"):
        find_testbin()


def test_apiserver_is_ready_and_kubeconfig_works(testbed: Testbed) -> None:
    assert testbed.api.request("GET", "/readyz") == "ok"
    assert testbed.api.request("GET", "/version")["gitVersion"] == "v1.37.2"
    assert testbed.server_url.startswith("https://127.0.0.1:")

    # Our own reader and the official Python client both accept the admin kubeconfig.
    admin = KubeClient.from_kubeconfig(testbed.kubeconfig_path)
    assert admin.request("GET", "/api/v1/namespaces/default")["metadata"]["name"] == "default"
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(testbed.kubeconfig_path)))
    assert "default" in [ns.metadata.name for ns in api.list_namespace().items]


def test_crd_v050_serves_v1beta1_and_v1alpha1(crd_v050: Testbed, fresh_namespace: str) -> None:
    group = crd_v050.api.request("GET", f"/apis/{MCS}")
    assert sorted(v["version"] for v in group["versions"]) == ["v1alpha1", "v1beta1"]
    assert group["preferredVersion"]["version"] == "v1beta1"

    # Same object through both versions (identical schemas, no conversion webhook).
    crd_v050.create(service_import(fresh_namespace, "web", api_version=f"{MCS}/v1alpha1"))
    got = crd_v050.get(f"{MCS}/v1beta1", "ServiceImport", fresh_namespace, "web")
    assert got["spec"]["type"] == "ClusterSetIP"


def test_crd_v041_serves_only_v1alpha1(crd_v050: Testbed, fresh_namespace: str) -> None:
    # A v1beta1-stored object forces the remove-and-recreate path of install_crd.
    crd_v050.create(service_import(fresh_namespace, "web", api_version=f"{MCS}/v1beta1"))
    try:
        crd_v050.install_crd("v0.4.1")
        group = crd_v050.api.request("GET", f"/apis/{MCS}")
        assert [v["version"] for v in group["versions"]] == ["v1alpha1"]
        with pytest.raises(ApiError) as err:
            crd_v050.list(f"{MCS}/v1beta1", "ServiceImport", fresh_namespace)
        assert err.value.status == 404
        assert crd_v050.list(f"{MCS}/v1alpha1", "ServiceImport", fresh_namespace)["items"] == []
    finally:
        crd_v050.install_crd("v0.5.0")
    assert crd_v050.served_mcs_versions() == ["v1alpha1", "v1beta1"]


def test_endpointslice_create_get_and_select(testbed: Testbed, fresh_namespace: str) -> None:
    labels = {
        "multicluster.kubernetes.io/service-name": "web",
        "multicluster.kubernetes.io/source-cluster": "east",
    }
    created = testbed.create(labelled_slice(fresh_namespace, "web-east", labels))
    assert created["metadata"]["resourceVersion"]

    got = testbed.get(ES_API, "EndpointSlice", fresh_namespace, "web-east")
    assert got["metadata"]["labels"] == labels
    assert got["endpoints"][0]["addresses"] == ["10.1.0.1"]

    testbed.apply(labelled_slice(fresh_namespace, "other", {"app": "x"}, ip="10.1.0.2"))
    selected = testbed.list(ES_API, "endpointslices", fresh_namespace,
                            labelSelector="multicluster.kubernetes.io/service-name=web")
    assert [i["metadata"]["name"] for i in selected["items"]] == ["web-east"]


def _first_watch_error(api: KubeClient, path: str, resource_version: str) -> dict:
    """The Status of the watch's ERROR event (or of its HTTP error)."""
    try:
        for event in api.watch(path, resource_version, timeout=3):
            if event["type"] == "ERROR":
                return event["object"]
    except ApiError as err:
        return err.body
    raise AssertionError("watch from the old resourceVersion did not fail")


def test_compact_etcd_expires_old_resource_versions(testbed: Testbed, fresh_namespace: str) -> None:
    old = testbed.create(labelled_slice(fresh_namespace, "a", {}))["metadata"]["resourceVersion"]
    latest = testbed.patch(ES_API, "EndpointSlice", fresh_namespace, "a",
                           {"metadata": {"labels": {"v": "2"}}})["metadata"]["resourceVersion"]

    revision = testbed.compact_etcd()
    assert revision > int(latest)

    path = f"/apis/discovery.k8s.io/v1/namespaces/{fresh_namespace}/endpointslices"
    for resource_version in (old, latest):  # even the newest version a client saw
        status = _first_watch_error(testbed.api, path, resource_version)
        assert status["code"] == 410
        assert status["reason"] == "Expired"
        assert "too old resource version" in status["message"]
    # The data survived the restart that compact_etcd does.
    assert testbed.get(ES_API, "EndpointSlice", fresh_namespace, "a")["metadata"]["labels"] == {"v": "2"}


def test_compaction_without_watch_cache_needs_no_restart(testbin: Path) -> None:
    """With --watch-cache=false watches go straight to etcd, so compaction alone expires them."""
    with Testbed(testbin, extra_apiserver_args=("--watch-cache=false",)) as bed:
        bed.create_namespace("ns")
        latest = bed.create(labelled_slice("ns", "a", {}))["metadata"]["resourceVersion"]
        bed.compact_etcd(restart_apiserver=False)
        path = "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices"
        status = _first_watch_error(bed.api, path, latest)
        assert status["code"] == 410
        assert "too old" in status["message"]


def test_apiserver_restart_keeps_url_and_data(testbed: Testbed, fresh_namespace: str) -> None:
    testbed.create(labelled_slice(fresh_namespace, "a", {}))
    testbed.stop_apiserver()
    try:
        with pytest.raises(OSError):
            testbed.api.request("GET", "/readyz")
    finally:
        testbed.start_apiserver()
    testbed.kill_apiserver()
    testbed.start_apiserver()
    assert testbed.get(ES_API, "EndpointSlice", fresh_namespace, "a")["metadata"]["name"] == "a"


def test_ordinary_user_needs_rbac_to_list_endpointslices(testbed: Testbed, fresh_namespace: str) -> None:
    user = testbed.client_for(testbed.make_user_kubeconfig("alice", groups=("team-dns",)))
    path = "/apis/discovery.k8s.io/v1/endpointslices"

    with pytest.raises(ApiError) as err:
        user.request("GET", path)
    assert err.value.status == 403
    assert 'User "alice"' in err.value.body["message"]

    role = f"{fresh_namespace}-reader"
    testbed.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role},
        "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                   "verbs": ["list", "watch"]}],
    })
    testbed.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team-dns"}],
    })
    try:
        def can_list() -> bool:
            try:
                return user.request("GET", path)["kind"] == "EndpointSliceList"
            except ApiError as exc:
                if exc.status != 403:
                    raise
                return False

        eventually(can_list, timeout=10.0, interval=0.1, what="RBAC and discovery are informer-driven: the new binding takes effect")
        assert list(user.watch(path, timeout=1, query={"labelSelector": "none=none"})) == []
        with pytest.raises(ApiError) as err:
            user.create(labelled_slice(fresh_namespace, "nope", {}))
        assert err.value.status == 403
    finally:
        testbed.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, role)
        testbed.delete("rbac.authorization.k8s.io/v1", "ClusterRole", None, role)
