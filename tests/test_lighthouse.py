"""A real MCS implementation exporting, mcsdns and CoreDNS answering what it wrote.

Submariner Lighthouse's agent (testsupport/lighthouse.py: broker in the same cluster, no
Lighthouse DNS server, no gateway, no Globalnet, clusterset IP on) runs in the one-node cluster of
testsupport/cluster.py. Three Services are exported with ServiceExports, as a user does: `web`
(ClusterSetIP, two ports), `db` (headless, a StatefulSet's pods with hostnames) and `plain`
(ClusterSetIP with the export's annotation turning the clusterset IP off). The tests check what
the agent wrote, then ask mcsdns (deploy/ through kustomize, as tests/test_cluster.py installs it)
and the cluster's CoreDNS (the testbin build, `kubernetes ... { multicluster clusterset.local }`
in a clusterset.local server block, as CoreDNS users set it up) every name form of every import
in the cluster, A/AAAA/SRV over UDP, UDP with EDNS and TCP: every difference must be one a
documented decision prescribes (tests/compat/, the differential's rules).

Needs tools/testbin/build-lighthouse.sh (a cold build of minutes; .ci/run does not run it), so the
module is marked `lighthouse`, which pyproject.toml's addopts deselect: run it with
`python3 -m pytest -q -m lighthouse tests/test_lighthouse.py`. Without the agent's binary it skips
with that reason (a failure under CI=true).
MCSDNS_LIGHTHOUSE_DUMP=PATH writes what the agent wrote there (benchmarks/results/conformance/
lighthouse-objects.yaml is such a dump).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compat import compare
from compat.dnsclient import TCP, UDP, UDP_EDNS, Ask
from compat.generator import Dataset, asks, names
from compat.harness import SEED
from testsupport import lighthouse
from testsupport.cluster import KUBEADM_COREFILE, Cluster, ClusterError, coredns_objects, kustomize_overlay, require_node
from testsupport.polling import eventually
from testsupport.testbed import testbin_cache as cache_dir

ROOT = Path(__file__).resolve().parent.parent
NS = "lh-demo"
MCSDNS_NS = "mcsdns"
ZONE = "clusterset.local"
MCS_V1A1 = "multicluster.x-k8s.io/v1alpha1"
SERVICE_NAME = "multicluster.kubernetes.io/service-name"
SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"

pytestmark = [pytest.mark.cluster, pytest.mark.lighthouse, pytest.mark.slow]  # slow: `-m "not slow"` replaces addopts' -m


def _run_script(name: str) -> None:
    done = subprocess.run([str(ROOT / "tools" / "testbin" / name)], capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"tools/testbin/{name} failed (exit {done.returncode}): {reason}")


@pytest.fixture(scope="module", autouse=True)
def images_of_this_checkout() -> None:
    """The agent binary must be built (build-lighthouse.sh is warm in seconds, cold in minutes);
    build-images.sh then makes every image from this checkout, the agent's included."""
    missing = [p for p in lighthouse.missing(cache_dir()) if "build-images.sh" not in p]
    if missing:
        pytest.skip("Lighthouse's agent is not built: " + "; ".join(missing))
    _run_script("build-lighthouse.sh")
    _run_script("build-images.sh")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_node()
    cl = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        cl.up()
    except ClusterError as err:
        pytest.fail(str(err))
    try:
        yield cl
    finally:
        cl.down()


def wait_for(check: Callable[[], object], timeout: float, what: str, interval: float = 0.5) -> object:
    """`eventually` with this file's argument order."""
    return eventually(check, timeout, interval, what)


@pytest.fixture(scope="module")
def agent(cluster: Cluster) -> Iterator[lighthouse.Deployed]:
    started = time.monotonic()
    try:
        deployed = lighthouse.deploy(cluster)
    except ClusterError as err:
        pytest.fail(f"{err}\nagent log:\n{lighthouse.logs(cluster, tail=40)}")
    print(f"\nLighthouse deployed in {time.monotonic() - started:.1f} s")
    yield deployed
    lighthouse.remove(cluster, deployed)


def _workloads() -> list[dict]:
    """The exported Services and the pods behind them (dnsutils pods that sleep: DNS needs no server)."""
    pod = {"containers": [{"name": "app", "image": "localhost/dnsutils:dev", "imagePullPolicy": "Never",
                           "command": ["sleep", "infinity"]}], "terminationGracePeriodSeconds": 1}
    web, db = {"app": "web"}, {"app": "db"}
    web_ports = [{"name": "http", "port": 80, "protocol": "TCP", "appProtocol": "http"},
                 {"name": "dns", "port": 53, "protocol": "UDP"}]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
         "spec": {"replicas": 2, "selector": {"matchLabels": web},
                  "template": {"metadata": {"labels": web}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
         "spec": {"selector": web, "ports": web_ports}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "plain", "namespace": NS},
         "spec": {"selector": web, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": NS},
         "spec": {"clusterIP": "None", "selector": db,
                  "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]}},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
         "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": db},
                  "template": {"metadata": {"labels": db}, "spec": pod}}},
        lighthouse.service_export(NS, "web"),
        lighthouse.service_export(NS, "db"),
        lighthouse.service_export(NS, "plain", use_clusterset_ip=False),
    ]


@pytest.fixture(scope="module")
def exported(cluster: Cluster, agent: lighthouse.Deployed) -> dict[str, list[dict]]:
    """The Services exported; returns what the agent wrote in their namespace once it is complete:
    an import per Service (ClusterSetIP ones with their ports), and slices for web and plain and
    both db pods."""
    api = cluster.api()
    started = time.monotonic()
    for obj in _workloads():
        api.apply(obj)
    for name in ("web", "db"):
        kind = "statefulset" if name == "db" else "deployment"
        cluster.kubectl("-n", NS, "rollout", "status", f"{kind}/{name}", "--timeout=180s", timeout=200)

    def complete() -> dict[str, list[dict]] | None:
        got = lighthouse.written(cluster, NS)
        imports = {i["metadata"]["name"]: i for i in got["imports"]}
        by_service: dict[str, list[dict]] = {}
        for sl in got["slices"]:
            by_service.setdefault(sl["metadata"]["labels"].get(SERVICE_NAME, ""), []).append(sl)
        db_addresses = [a for sl in by_service.get("db", []) for ep in sl.get("endpoints") or []
                        for a in ep["addresses"]]
        # A ClusterSetIP import gets its ports only once its slice reached the broker (seconds
        # after the import itself): wait for them, so what is compared and dumped is settled.
        ported = all(i["spec"].get("ports") for i in imports.values() if i["spec"]["type"] == "ClusterSetIP")
        if (set(imports) == {"web", "db", "plain"} and imports["web"]["spec"].get("ips") and ported
                and len(db_addresses) == 2 and by_service.get("web") and by_service.get("plain")):
            return got
        return None

    try:
        got = wait_for(complete, 120, "Lighthouse's imports and slices in " + NS)
    except AssertionError as err:
        pytest.fail(f"{err}\nagent log:\n{lighthouse.logs(cluster, tail=60)}")
    print(f"\nexports written by Lighthouse in {time.monotonic() - started:.1f} s")
    dump = os.environ.get("MCSDNS_LIGHTHOUSE_DUMP")
    if dump:
        Path(dump).write_text(lighthouse.dump(cluster, [NS, lighthouse.AGENT_NAMESPACE, lighthouse.BROKER_NAMESPACE]))
    return got  # type: ignore[return-value]


def _service(cluster: Cluster, name: str) -> dict:
    return cluster.api().get("v1", "Service", NS, name)


# --------------------------------------------------------------------------- what Lighthouse writes


def test_the_agent_writes_an_import_per_export_with_the_service_type_and_ports(
        cluster: Cluster, exported: dict[str, list[dict]]) -> None:
    imports = {i["metadata"]["name"]: i for i in exported["imports"]}
    web, db, plain = imports["web"]["spec"], imports["db"]["spec"], imports["plain"]["spec"]
    assert web["type"] == "ClusterSetIP" and plain["type"] == "ClusterSetIP" and db["type"] == "Headless"
    # The clusterset IP: one address of Lighthouse's range, not the Service's ClusterIP.
    (vip,) = web["ips"]
    assert vip.startswith("243.0.") and vip != _service(cluster, "web")["spec"]["clusterIP"]
    assert not plain.get("ips"), plain  # the export's annotation turned it off: no IP at all
    assert sorted((p["name"], p["protocol"], p["port"]) for p in web["ports"]) == [("dns", "UDP", 53), ("http", "TCP", 80)]
    # The import in the service's namespace is the broker's aggregate renamed: no labels, the
    # exporting clusters in status.clusters, the clusterset IP's bookkeeping in annotations.
    for imp in imports.values():
        assert not imp["metadata"].get("labels"), imp["metadata"]
        assert [c["cluster"] for c in imp.get("status", {}).get("clusters", [])] == [lighthouse.CLUSTER_ID]
    notes = {name: imp["metadata"].get("annotations", {}) for name, imp in imports.items()}
    assert notes["web"][lighthouse.USE_CLUSTERSET_IP] == "true"
    assert notes["web"]["lighthouse.submariner.io/clusterset-ip-allocated-by"] == lighthouse.CLUSTER_ID
    assert notes["plain"][lighthouse.USE_CLUSTERSET_IP] == "false"
    # What `kubectl get serviceexport` shows: the agent writes its conditions with an empty reason
    # where one is not needed (Valid=True), which the v0.5.0 CRD (reason: minLength 1) refuses, so
    # no export's Valid or Ready condition ever turns True; the agent logs each refusal.
    for name in ("web", "db", "plain"):
        export = cluster.api().get(MCS_V1A1, "ServiceExport", NS, name)
        conditions = export.get("status", {}).get("conditions", [])
        assert not [c for c in conditions if c["status"] == "True"], conditions
    assert "reason in body should be at least 1 chars long" in lighthouse.logs(cluster)


def test_the_agent_writes_one_service_ip_endpoint_for_clusterset_ip_and_the_pods_for_headless(
        cluster: Cluster, exported: dict[str, list[dict]]) -> None:
    by_service: dict[str, list[dict]] = {}
    for sl in exported["slices"]:
        labels = sl["metadata"]["labels"]
        assert labels[SOURCE_CLUSTER] == lighthouse.CLUSTER_ID
        assert labels["endpointslice.kubernetes.io/managed-by"] == lighthouse.MANAGED_BY
        assert "kubernetes.io/service-name" not in labels, labels
        by_service.setdefault(labels[SERVICE_NAME], []).append(sl)
    for name in ("web", "plain"):
        (sl,) = by_service[name]
        (ep,) = sl["endpoints"]
        assert ep["addresses"] == [_service(cluster, name)["spec"]["clusterIP"]]
        assert ep["conditions"] == {"ready": True} and "hostname" not in ep
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in
            cluster.api().list("v1", "Pod", NS, labelSelector="app=db")["items"]}
    endpoints = {ep["hostname"]: ep["addresses"] for sl in by_service["db"] for ep in sl["endpoints"]}
    assert endpoints == {name: [ip] for name, ip in pods.items()}


# --------------------------------------------------------------------------- mcsdns and CoreDNS


CLUSTERSET_BLOCK = f"""\
{ZONE}:53 {{
    errors
    kubernetes cluster.local {ZONE} {{
        multicluster {ZONE}
    }}
}}
"""


def _coredns_serves_the_zone(cluster: Cluster) -> None:
    """The cluster's CoreDNS serving clusterset.local itself: the `multicluster` option in a server
    block of its own, and list/watch of ServiceImports added to its ClusterRole."""
    api = cluster.api()
    objs = coredns_objects(KUBEADM_COREFILE + CLUSTERSET_BLOCK)
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    role["rules"].append({"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports"],
                          "verbs": ["list", "watch"]})
    for obj in objs:
        if obj["kind"] in ("ClusterRole", "ConfigMap"):
            api.apply(obj)
    cluster.kubectl("-n", "kube-system", "rollout", "restart", "deployment/coredns")
    cluster.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=180s", timeout=200)


def _running_pod_ip(cluster: Cluster, namespace: str, selector: str) -> str:
    def found() -> str | None:
        for pod in cluster.api().list("v1", "Pod", namespace, labelSelector=selector)["items"]:
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
            if ready and not pod["metadata"].get("deletionTimestamp"):
                return pod["status"]["podIP"]
        return None

    return wait_for(found, 120, f"a ready pod {selector} in {namespace}")  # type: ignore[return-value]


def _dataset(cluster: Cluster) -> Dataset:
    """Every ServiceImport and MCS EndpointSlice in the cluster (the broker's and the agent's own
    namespaces too: both servers serve every namespace), as the differential's Dataset."""
    api = cluster.api()
    imports = api.list(MCS_V1A1, "ServiceImport")["items"]
    slices = api.list("discovery.k8s.io/v1", "EndpointSlice", labelSelector=SERVICE_NAME)["items"]
    for obj in imports:
        obj.update(apiVersion=MCS_V1A1, kind="ServiceImport")
    for obj in slices:
        obj.update(apiVersion="discovery.k8s.io/v1", kind="EndpointSlice")
    namespaces = sorted({o["metadata"]["namespace"] for o in imports + slices})
    ns_objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces]
    return Dataset("lighthouse", ns_objects + imports + slices, missing_namespaces=["nowhere"])


def test_mcsdns_and_coredns_answer_every_name_of_lighthouse_imports_alike(
        cluster: Cluster, exported: dict[str, list[dict]], tmp_path_factory: pytest.TempPathFactory) -> None:
    cluster.kubectl("apply", "-k", str(kustomize_overlay(tmp_path_factory.mktemp("overlay"))))
    cluster.kubectl("-n", MCSDNS_NS, "rollout", "status", "deployment/mcsdns", "--timeout=180s", timeout=200)
    _coredns_serves_the_zone(cluster)
    mcsdns_ip = _running_pod_ip(cluster, MCSDNS_NS, "app.kubernetes.io/name=mcsdns")
    coredns_ip = _running_pod_ip(cluster, "kube-system", "k8s-app=kube-dns")
    servers = ((coredns_ip, 53), (mcsdns_ip, 5353))
    vip = next(i for i in exported["imports"] if i["metadata"]["name"] == "web")["spec"]["ips"][0]
    first = Ask(f"web.{NS}.svc.{ZONE}.", "A", UDP_EDNS, 1232)

    def both_answer_the_vip() -> bool:
        replies = compare.ask_both(servers, [first], timeout=2.0, retries=2)
        return all(r[0].rcode == "NOERROR" and any(vip in line for line in r[0].answer) for r in replies)

    wait_for(both_answer_the_vip, 60, f"CoreDNS and mcsdns answering web.{NS} with {vip}")
    ds = _dataset(cluster)
    items = asks(names(ds), SEED + 11, qtypes=("A", "AAAA", "SRV"), transports=(UDP_EDNS, UDP, TCP))
    diffs = compare.compare("Lighthouse in a cluster", servers, items, ds, ns_address=mcsdns_ip, tally=None)
    unexpected = [d for d in diffs if d.decision is None]
    documented = sorted({d.decision for d in diffs if d.decision})
    print(f"\n{len(items)} questions about {len(ds.imports())} imports in {len(ds.namespaces)} namespaces: "
          f"{len(diffs)} differ, {len(unexpected)} unexpected; documented: {documented}")
    assert not unexpected, "\n".join(d.describe() for d in unexpected[:15])
    # What was compared is what the agent wrote: both db pods answer on both servers.
    pods = sorted(p["status"]["podIP"] for p in cluster.api().list("v1", "Pod", NS, labelSelector="app=db")["items"])
    for replies in compare.ask_both(servers, [Ask(f"db.{NS}.svc.{ZONE}.", "A", TCP, 1232)]):
        assert sorted(line.rsplit(" ", 1)[1] for line in replies[0].answer) == pods, replies[0].short()
