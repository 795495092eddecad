"""Issue 15 against a real kube-apiserver: `--local-cluster auto`, `--reverse-cidr`, and
`mcsdns_programming_duration_seconds`.

The server runs as an ordinary user bound to the base ClusterRole plus the rule of
deploy/components/local-cluster-auto (rendered by the real kubectl), so the component is shown to
be all `auto` needs. The KEP-2149 ClusterProperty CRD comes from tests/fixtures (the about-api
schema); the property is written at v1alpha1 and changed while the server runs.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path

import dns.rcode
import dns.reversename
import pytest
import yaml

from kube_server import CLUSTER_ROLE_RULES, ES_API, MCS, KubeServer, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from test_deploy import with_component
from testsupport.mcsdnsserver import FIXTURES
from testsupport.testbed import ApiError, Testbed

pytestmark = pytest.mark.kube

RBAC = "rbac.authorization.k8s.io/v1"
ABOUT = "about.k8s.io"
PROPERTY = "cluster.clusterset.k8s.io"


def install_cluster_property_crd(testbed: Testbed) -> None:
    testbed.apply(yaml.safe_load((FIXTURES / "clusterproperty-crd.yaml").read_text()))

    def listable() -> bool:
        try:
            versions = {v["version"] for v in testbed.api.request("GET", f"/apis/{ABOUT}")["versions"]}
            for version in ("v1alpha1", "v1beta1"):
                testbed.api.request("GET", f"/apis/{ABOUT}/{version}/clusterproperties", query={"limit": 1})
        except ApiError as err:
            if err.status in (404, 429, 503):
                return False
            raise
        return versions == {"v1alpha1", "v1beta1"}

    eventually(listable, 30, what="ClusterProperty CRD served")


def set_cluster_id(testbed: Testbed, value: str) -> None:
    testbed.apply({"apiVersion": f"{ABOUT}/v1alpha1", "kind": "ClusterProperty",
                   "metadata": {"name": PROPERTY}, "spec": {"value": value}})


def component_rules(testbin: Path, tmp_path: Path) -> list[dict]:
    """The ClusterRole rules of deploy/base with the local-cluster-auto component, as kubectl renders them."""
    (role,) = [d for d in with_component("local-cluster-auto", tmp_path) if d["kind"] == "ClusterRole"]
    return role["rules"]


@pytest.fixture
def reader(testbed: Testbed, testbin: Path, tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig of a user bound to the rendered ClusterRole (base + local-cluster-auto)."""
    rules = component_rules(testbin, tmp_path)
    assert rules == CLUSTER_ROLE_RULES + [{"apiGroups": [ABOUT], "resources": ["clusterproperties"],
                                           "verbs": ["list", "watch"]}]
    name = f"mcsdns-auto-{uuid.uuid4().hex[:8]}"
    testbed.apply({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
    testbed.apply({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": name},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]})
    kubeconfig = testbed.make_user_kubeconfig(name)

    def allowed() -> bool:
        try:
            testbed.client_for(kubeconfig).request("GET", f"/apis/{ABOUT}/v1beta1/clusterproperties", query={"limit": 1})
        except ApiError as err:
            if err.status != 403:
                raise
            return False
        return True

    eventually(allowed, 10, what="RBAC in effect")
    yield kubeconfig
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        testbed.delete(RBAC, kind, None, name)


@pytest.fixture
def cluster_property_crd(testbed: Testbed) -> Iterator[None]:
    install_cluster_property_crd(testbed)
    yield
    testbed.delete(f"{ABOUT}/v1beta1", "ClusterProperty", None, PROPERTY)


def order(server: KubeServer, name: str, rdtype: str = "A") -> list[str]:
    return [rd.to_text() for rrset in server.query(name, rdtype, timeout=1.0).answer for rd in rrset]


def priorities(server: KubeServer, name: str) -> dict[str, int]:
    return {rd.target.to_text().split(".")[1]: rd.priority
            for rrset in server.query(name, "SRV", timeout=1.0).answer for rd in rrset}


def test_local_cluster_auto_follows_the_cluster_property(testbed: Testbed, fresh_namespace: str,
                                                         cluster_property_crd: None, reader: Path,
                                                         tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    db = fqdn("db", ns)
    set_cluster_id(testbed, "east")
    testbed.create(service_import(ns, "db", headless=True))
    testbed.create(endpoint_slice(ns, "db-west", "db", "west", [("10.61.2.1", True), ("10.61.2.2", True)]))
    testbed.create(endpoint_slice(ns, "db-east", "db", "east", [("10.61.1.1", True)]))
    testbed.create(endpoint_slice(ns, "db-north", "db", "north", [("10.61.3.1", True)]))
    everyone = a("10.61.1.1", "10.61.2.1", "10.61.2.2", "10.61.3.1")
    with KubeServer(reader, tmp_path / "mcsdns.log", "--local-cluster", "auto") as server:
        server.wait_until_ready()
        assert server.answer(db) == everyone
        eventually(lambda: order(server, db)[0] == "10.61.1.1", 10, what=lambda: f"east first\n{server.tail()}")
        assert priorities(server, db) == {"east": 0, "west": 10, "north": 10}

        set_cluster_id(testbed, "west")  # changed at run time: every answer reorders, no restart
        eventually(lambda: set(order(server, db)[:2]) == {"10.61.2.1", "10.61.2.2"}, 10,
                   what=lambda: f"west first\n{server.tail()}")
        assert server.answer(db) == everyone
        assert priorities(server, db) == {"east": 10, "west": 0, "north": 10}

        testbed.delete(f"{ABOUT}/v1beta1", "ClusterProperty", None, PROPERTY)
        eventually(lambda: set(priorities(server, db).values()) == {0}, 10, what="no local cluster: CoreDNS's priority 0")
        assert server.answer(db) == everyone
        assert "cannot list" not in server.log()  # the component's rule is enough
        assert server.shutdown() < 3.0


def _about_gone(testbed: Testbed) -> bool:
    try:
        testbed.api.request("GET", f"/apis/{ABOUT}")
    except ApiError as err:
        return err.status == 404
    return False


def test_local_cluster_auto_without_the_crd_serves_unordered(testbed: Testbed, fresh_namespace: str,
                                                             tmp_path: Path) -> None:
    """No ClusterProperty CRD: ready all the same (the sets are the same), the reason logged once."""
    ensure_crd(testbed)
    try:
        testbed.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, f"clusterproperties.{ABOUT}")
        eventually(lambda: _about_gone(testbed), 30, what="ClusterProperty CRD removed")
    except ApiError:
        pass
    ns = fresh_namespace
    testbed.create(service_import(ns, "db", headless=True))
    testbed.create(endpoint_slice(ns, "db-west", "db", "west", [("10.62.2.1", True)]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--local-cluster", "auto") as server:
        server.wait_until_ready()
        assert server.answer(fqdn("db", ns)) == a("10.62.2.1")
        assert priorities(server, fqdn("db", ns)) == {"west": 0}
        eventually(lambda: "ClusterProperty: cannot list" in server.log(), 10)
        assert "answers are not ordered by locality until it can" in server.log()


def ptr(server: KubeServer, ip: str) -> tuple[str, list[str]]:
    return server.answer(dns.reversename.from_address(ip).to_text(), "PTR")


def test_reverse_zones_follow_the_api(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--reverse-cidr", "10.63.0.0/16",
                "--reverse-cidr", "fd00:63::/64") as server:
        server.wait_until_ready()
        assert ptr(server, "10.63.0.10")[0] == "NXDOMAIN"
        testbed.create(service_import(ns, "vip", ["10.63.0.10", "fd00:63::10"]))
        server.wait_answer(dns.reversename.from_address("10.63.0.10").to_text(), "PTR",
                           ("NOERROR", [f"vip.{ns}.svc.clusterset.local."]))
        assert ptr(server, "fd00:63::10") == ("NOERROR", [f"vip.{ns}.svc.clusterset.local."])

        testbed.create(service_import(ns, "db", headless=True))
        testbed.create(endpoint_slice(ns, "db-east", "db", "east", [("10.63.1.1", True), ("10.63.1.2", False)]))
        testbed.create(endpoint_slice(ns, "db-west", "db", "west", [("10.63.1.1", True)]))
        name = dns.reversename.from_address("10.63.1.1").to_text()
        server.wait_answer(name, "PTR", ("NOERROR", [f"10-63-1-1.east.db.{ns}.svc.clusterset.local.",
                                                     f"10-63-1-1.west.db.{ns}.svc.clusterset.local."]))
        assert ptr(server, "10.63.1.2")[0] == "NXDOMAIN"  # not ready
        testbed.delete(ES_API, "EndpointSlice", ns, "db-west")
        server.wait_answer(name, "PTR", ("NOERROR", [f"10-63-1-1.east.db.{ns}.svc.clusterset.local."]))
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip")
        server.wait_answer(dns.reversename.from_address("10.63.0.10").to_text(), "PTR", ("NXDOMAIN", []))


def count(server: KubeServer, kind: str) -> float:
    return server.metric("mcsdns_programming_duration_seconds_count", kind=kind) or 0


def test_programming_duration_is_observed_for_api_writes(testbed: Testbed, fresh_namespace: str,
                                                         tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        before = {kind: count(server, kind) for kind in ("serviceimport", "endpointslice")}
        sums = {kind: server.metric("mcsdns_programming_duration_seconds_sum", kind=kind) or 0.0 for kind in before}

        testbed.create(service_import(ns, "vip", ["10.64.0.1"]))
        server.wait_answer(fqdn("vip", ns), "A", a("10.64.0.1"))
        eventually(lambda: count(server, "serviceimport") == before["serviceimport"] + 1, 5)
        seconds = server.metric("mcsdns_programming_duration_seconds_sum", kind="serviceimport") - sums["serviceimport"]
        # From the managedFields time (whole seconds) to the swap: under 1 s plus the real delay.
        assert 0 <= seconds < 3, seconds

        testbed.create(service_import(ns, "db", headless=True))
        testbed.create(endpoint_slice(ns, "db-east", "db", "east", [("10.64.1.1", True)]))
        server.wait_answer(fqdn("db", ns), "A", a("10.64.1.1"))
        eventually(lambda: count(server, "endpointslice") == before["endpointslice"] + 1, 5)

        # The trigger-time annotation wins over managedFields: dated 60 s ago, observed as >= 60 s.
        stale = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=60)).strftime(
            "%Y-%m-%dT%H:%M:%S.%f000Z")  # RFC 3339 with nanoseconds, as the EndpointSlice controller writes it
        over = server.metric("mcsdns_programming_duration_seconds_bucket", kind="endpointslice", le="+Inf")
        under = server.metric("mcsdns_programming_duration_seconds_bucket", kind="endpointslice", le="32.768")
        testbed.apply(endpoint_slice(ns, "db-east", "db", "east", [("10.64.1.1", True), ("10.64.1.2", True)],
                                     annotations={"endpoints.kubernetes.io/last-change-trigger-time": stale}))
        server.wait_answer(fqdn("db", ns), "A", a("10.64.1.1", "10.64.1.2"))
        eventually(lambda: server.metric("mcsdns_programming_duration_seconds_bucket", kind="endpointslice",
                                         le="+Inf") == over + 1, 5)
        assert server.metric("mcsdns_programming_duration_seconds_bucket", kind="endpointslice", le="32.768") == under
        # A write DNS cannot see (a label) changes no answer and observes nothing.
        seen = count(server, "serviceimport")
        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"metadata": {"labels": {"x": "y"}}})
        testbed.create(service_import(ns, "marker", ["10.64.0.9"]))
        server.wait_answer(fqdn("marker", ns), "A", a("10.64.0.9"))
        eventually(lambda: count(server, "serviceimport") == seen + 1, 5)  # the marker only


@pytest.mark.parametrize("balance", [False, True])
def test_local_cluster_id_orders_two_clusters_from_the_api(testbed: Testbed, fresh_namespace: str, tmp_path: Path,
                                                           balance: bool) -> None:
    """`--local-cluster west` against the API, with and without round robin: west's addresses always
    lead (rotating among themselves with round robin), the set is the flag-free one."""
    ensure_crd(testbed)
    ns = fresh_namespace
    db = fqdn("db", ns)
    west, east = {"10.65.2.1", "10.65.2.2", "10.65.2.3"}, {"10.65.1.1", "10.65.1.2"}
    testbed.create(service_import(ns, "db", headless=True))
    testbed.create(endpoint_slice(ns, "db-east", "db", "east", [(ip, True) for ip in sorted(east)]))
    testbed.create(endpoint_slice(ns, "db-west", "db", "west", [(ip, True) for ip in sorted(west)]))
    extra = ("--loadbalance", "round_robin") if balance else ()
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--local-cluster", "west", *extra) as server:
        server.wait_until_ready()
        server.wait_answer(db, "A", a(*west, *east))
        replies = [order(server, db) for _ in range(7)]
        for got in replies:
            assert set(got[:3]) == west and set(got[3:]) == east, got
        assert priorities(server, db) == {"west": 0, "east": 10}
        leaders = {got[0] for got in replies}
        assert leaders == (west if balance else {replies[0][0]})  # round robin: each local address leads in turn
        assert {got[3] for got in replies} == (east if balance else {replies[0][3]})
