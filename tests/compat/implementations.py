"""What each MCS implementation writes in a consuming cluster, as API objects: one namespace each.

Written from the facts of research/mcs-implementations.md (read from each project's source,
not copied from it): the ServiceImport's API version, its `spec.ips` (one per clusterset,
one per source cluster, empty, "None" for headless), its `status`, and the EndpointSlices the
implementation writes next to it, with their labels (relabelled `kubernetes.io/service-name`,
with or without `source-cluster`, none of the multicluster labels at all) and endpoint
conditions (`ready` only, or all three). Objects neither server reads (a core/v1 Endpoints, Services
named like the import or derived from it, slices without `multicluster.kubernetes.io/service-name`) and
a slice whose ServiceImport does not exist are there too: they must change nothing.

`implementations()` is a generator.Dataset: the differential suite asks every name form of it
of CoreDNS and mcsdns (test_implementations.py). `STATUSES` are the ServiceImport statuses, written
through the status subresource after the objects (an apply of the object itself drops them).
`USER_VIEW` is what a user asks first per implementation and what both servers answer: the
figures docs/implementations.md quotes.
"""

from __future__ import annotations

from typing import Any

from testsupport.objects import ES_API, MCS, SERVICE_NAME, SOURCE_CLUSTER, endpoint, endpoint_slice, namespace

from .generator import NON_IP_IMPORT_IP, Dataset

K8S_SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
V1ALPHA1, V1BETA1 = f"{MCS}/v1alpha1", f"{MCS}/v1beta1"

NS = {
    "mcs-api": "impl-mcsapi",
    "cilium": "impl-cilium",
    "lighthouse": "impl-lighthouse",
    "aws": "impl-aws",
    "karmada": "impl-karmada",
    "antrea": "impl-antrea",
}


def _import(api_version: str, ns: str, name: str, spec: dict, *, labels: dict | None = None,
            annotations: dict | None = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": api_version, "kind": "ServiceImport", "metadata": meta, "spec": spec}


def _relabel(sl: dict, labels: dict[str, str], drop: tuple[str, ...] = ()) -> dict:
    meta = dict(sl["metadata"])
    meta["labels"] = {k: v for k, v in {**meta["labels"], **labels}.items() if k not in drop}
    return dict(sl, metadata=meta)


def _condition(type_: str, status: str, reason: str, message: str) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-01T10:00:00Z"}


READY = _condition("Ready", "True", "Ready", "")
HTTP = {"name": "http", "protocol": "TCP", "port": 80}

# (namespace, name) -> status, written through the status subresource.
STATUSES: dict[tuple[str, str], dict] = {}


def _mcs_api(ds: Dataset) -> None:
    """The mcs-api reference controller: v1beta1; it writes only `spec.ips` (the derived Service's
    clusterIPs[:2]) and relabels slices that carry the multicluster service-name label with
    `kubernetes.io/service-name=derived-<hash>`; the agent that wrote those slices keeps
    source-cluster and all three endpoint conditions."""
    ns = NS["mcs-api"]
    ds.objects.append(_import(V1BETA1, ns, "web", {"type": "ClusterSetIP", "ports": [HTTP], "ips": ["10.96.10.1"],
                                                    "ipFamilies": ["IPv4"]}))
    ds.objects.append(_import(V1BETA1, ns, "dual", {"type": "ClusterSetIP", "ports": [HTTP],
                                                     "ips": ["10.96.10.2", "fd00:10::2"], "ipFamilies": ["IPv4", "IPv6"]}))
    ds.objects.append(_import(V1BETA1, ns, "db", {"type": "Headless", "ports": [{"name": "pg", "protocol": "TCP", "port": 5432}]}))
    # Created, not yet given an IP by the controller (its derived Service has none yet).
    ds.objects.append(_import(V1BETA1, ns, "fresh", {"type": "ClusterSetIP", "ports": [HTTP]}))
    for svc, derived in (("web", "derived-q2zk4xg6mh"), ("db", "derived-vj3wz7cmab")):
        for cid, base in (("east", 1), ("west", 2)):
            eps = [endpoint([f"10.{base}.1.{i}"], f"{svc}-{i}" if svc == "db" else None, ready=i != 2, serving=True,
                            terminating=i == 2) for i in (1, 2)]
            ports = [{"name": "pg", "protocol": "TCP", "port": 5432}] if svc == "db" else [HTTP]
            ds.objects.append(_relabel(endpoint_slice(ns, f"{svc}-{cid}", svc, cid, eps, ports=ports),
                                       {K8S_SERVICE_NAME: derived}))
    STATUSES[(ns, "web")] = {"clusters": [{"cluster": "east"}, {"cluster": "west"}], "conditions": [READY]}
    STATUSES[(ns, "fresh")] = {"conditions": [_condition("Ready", "False", "Pending", "waiting for the derived Service's IP")]}


def _cilium(ds: Dataset) -> None:
    """Cilium: v1beta1 with every spec field it sets and the exported labels/annotations; ips from
    the derived Service. A ClusterSetIP import gets only the local mirror slice (source-cluster =
    the local cluster); remote slices exist only for headless imports, conditions copied as is."""
    ns = NS["cilium"]
    local, remote = "cluster1", "cluster2"
    ds.objects.append(_import(V1BETA1, ns, "api", {
        "type": "ClusterSetIP", "ips": ["10.96.20.1"], "ipFamilies": ["IPv4"],
        "ports": [{"name": "grpc", "protocol": "TCP", "appProtocol": "kubernetes.io/h2c", "port": 9000}],
        "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 300}},
        "internalTrafficPolicy": "Cluster"},
        labels={"app": "api"}, annotations={"service.cilium.io/supported-ip-families": "IPv4"}))
    ds.objects.append(_import(V1BETA1, ns, "stateful", {"type": "Headless", "ips": [], "ipFamilies": ["IPv4"],
                                                         "ports": [{"name": "peer", "protocol": "TCP", "port": 7000}]}))
    mirror = endpoint_slice(ns, "derived-7d2kxm5pzq-local", "api", local,
                            [endpoint(["10.11.0.1"], ready=True, serving=True, terminating=False),
                             endpoint(["10.11.0.2"], ready=False, serving=True, terminating=True)],
                            ports=[{"name": "grpc", "protocol": "TCP", "port": 9000}])
    ds.objects.append(_relabel(mirror, {K8S_SERVICE_NAME: "derived-7d2kxm5pzq",
                                        MANAGED_BY: "endpointslice-local-mcsapi-controller.cilium.io",
                                        "service.cilium.io/local-endpointslice": "true"}))
    for cid, base in ((local, 11), (remote, 12)):
        eps = [endpoint([f"10.{base}.1.{i}"], f"stateful-{i}", ready=True, serving=True, terminating=False) for i in (0, 1)]
        sl = endpoint_slice(ns, f"stateful-{cid}-x7k2p", "stateful", cid, eps,
                            ports=[{"name": "peer", "protocol": "TCP", "port": 7000}])
        managed = ("endpointslice-local-mcsapi-controller.cilium.io" if cid == local
                   else "endpointslice-mesh-controller.cilium.io")
        ds.objects.append(_relabel(sl, {K8S_SERVICE_NAME: "derived-4hwc2n6vqx", MANAGED_BY: managed}))
    # The exported Service itself (the import has its name) and the derived Service: core objects neither
    # server reads for the clusterset zone, so a Service named like an import changes no answer.
    for name in ("api", "derived-7d2kxm5pzq"):
        ds.objects.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                           "spec": {"type": "ClusterIP", "ports": [{"name": "grpc", "protocol": "TCP", "port": 9000}]}})
    STATUSES[(ns, "api")] = {"clusters": [{"cluster": local}, {"cluster": remote}], "conditions": [READY]}
    STATUSES[(ns, "stateful")] = {"clusters": [{"cluster": local}, {"cluster": remote}], "conditions": [READY]}


def _lighthouse(ds: Dataset) -> None:
    """Submariner Lighthouse: v1alpha1; `spec.ips` empty unless its clusterset IP is enabled; each
    exporting cluster's slice holds one endpoint, that cluster's service IP, `ready` only, no
    hostname and no `kubernetes.io/service-name`; headless slices copy the pods with hostnames."""
    ns = NS["lighthouse"]
    ds.objects.append(_import(V1ALPHA1, ns, "nginx", {"type": "ClusterSetIP", "ports": [HTTP], "sessionAffinity": "None"}))
    ds.objects.append(_import(V1ALPHA1, ns, "vip", {"type": "ClusterSetIP", "ports": [HTTP], "ips": ["243.1.0.5"]},
                              annotations={"lighthouse.submariner.io/use-clusterset-ip": "true",
                                           "lighthouse.submariner.io/clusterset-ip-allocated-by": "cluster1"}))
    ds.objects.append(_import(V1ALPHA1, ns, "mysql", {"type": "Headless", "ports": [{"name": "mysql", "protocol": "TCP", "port": 3306}]}))

    def lh(svc: str, cid: str, eps: list[dict], ports: list[dict], headless: bool) -> dict:
        sl = endpoint_slice(ns, f"{svc}-{cid}-5xq2w", svc, cid, eps, ports=ports)
        return _relabel(sl, {MANAGED_BY: "lighthouse-agent.submariner.io", "lighthouse.submariner.io/sourceNamespace": ns,
                             "lighthouse.submariner.io/is-headless": str(headless).lower()})

    lport = [{"name": "http", "protocol": "TCP", "appProtocol": "http", "port": 80}]
    for svc in ("nginx", "vip"):
        ds.objects.append(lh(svc, "cluster1", [{"addresses": ["10.43.0.5"], "conditions": {"ready": True}}], lport, False))
        ds.objects.append(lh(svc, "cluster2", [{"addresses": ["10.44.0.7"], "conditions": {"ready": False}}], lport, False))
    mports = [{"name": "mysql", "protocol": "TCP", "port": 3306}]
    ds.objects.append(lh("mysql", "cluster1", [endpoint(["10.42.0.8"], "mysql-0", ready=True, serving=True, terminating=False)],
                         mports, True))
    # A slice synced before (or without) its import: labelled for a service that has no ServiceImport.
    ds.objects.append(lh("orphan", "cluster2", [endpoint(["10.44.0.9"], "orphan-0", ready=True)], mports, True))
    STATUSES[(ns, "nginx")] = {"clusters": [{"cluster": "cluster1"}, {"cluster": "cluster2"}]}
    STATUSES[(ns, "mysql")] = {"clusters": [{"cluster": "cluster1"}]}


def _aws(ds: Dataset) -> None:
    """AWS Cloud Map controller: v1alpha1 with type and ports {name, protocol, port} only; `spec.ips`
    holds one ClusterIP per source cluster, "None" for a headless import (inferred from its code);
    one slice set per cluster, relabelled `imported-<hash>`, `ready` only, targetRef a Service."""
    ns = NS["aws"]
    derived = '[{"cluster":"cls1","derived-service":"imported-a1b2c3d4e5"},{"cluster":"cls2","derived-service":"imported-f6g7h8i9j0"}]'
    ds.objects.append(_import(V1ALPHA1, ns, "backend", {"type": "ClusterSetIP", "ports": [HTTP],
                                                         "ips": ["10.100.1.1", "10.100.2.2"]},
                              annotations={"multicluster.k8s.aws/derived-service": derived}))
    for svc, ips in (("nodes", ["None", "None"]), ("nodes-twin", [])):
        ds.objects.append(_import(V1ALPHA1, ns, svc, {"type": "Headless", "ports": [HTTP], "ips": ips}))
    ds.tags[(ns, "nodes")].add(NON_IP_IMPORT_IP)
    ds.twins[(ns, "nodes")] = "nodes-twin"
    for svc in ("backend", "nodes", "nodes-twin"):
        for cid, derived_name, base in (("cls1", "imported-a1b2c3d4e5", 21), ("cls2", "imported-f6g7h8i9j0", 22)):
            eps = [{"addresses": [f"10.{base}.0.{i}"], "conditions": {"ready": True}, "nodeName": "ip-10-0-0-1",
                    "targetRef": {"kind": "Service", "namespace": ns, "name": derived_name},
                    **({"hostname": f"node-{i}"} if svc != "backend" and i == 1 else {})} for i in (1, 2)]
            sl = endpoint_slice(ns, f"{derived_name}-{svc}-k9z", svc, cid, eps,
                                ports=[{"name": "http", "protocol": "TCP", "port": 80}])
            ds.objects.append(_relabel(sl, {K8S_SERVICE_NAME: derived_name, MANAGED_BY: "aws-cloud-map-mcs-controller-for-k8s"}))
    STATUSES[(ns, "backend")] = {"clusters": [{"cluster": "cls1"}, {"cluster": "cls2"}]}


def _karmada(ds: Dataset) -> None:
    """Karmada: the user writes a v1alpha1 ServiceImport (no ips: nothing in Karmada sets them);
    its slices `imported-<cluster>-<orig>` carry only `kubernetes.io/service-name=derived-<svc>`,
    no multicluster label at all, so neither server sees them."""
    ns = NS["karmada"]
    ds.objects.append(_import(V1ALPHA1, ns, "serve", {"type": "ClusterSetIP", "ports": [HTTP]}))
    sl = endpoint_slice(ns, "imported-member1-serve-8fj2k", "serve", None,
                        [endpoint(["10.31.0.1"], ready=True, serving=True, terminating=False)], ports=[HTTP])
    ds.objects.append(_relabel(sl, {K8S_SERVICE_NAME: "derived-serve", MANAGED_BY: "endpointslice-controller.karmada.io",
                                    "work.karmada.io/permanent-id": "3f1c9a52-0d6e-4b8e-9b1e-2d7c4a6f0e11"},
                               drop=(SERVICE_NAME, SOURCE_CLUSTER)))


def _antrea(ds: Dataset) -> None:
    """Antrea: v1alpha1, always ClusterSetIP, ports {name, port, protocol}, `spec.ips` the ClusterIP of
    its `antrea-mc-<svc>` Service, whose addresses live in a core/v1 Endpoints: no EndpointSlice with
    a multicluster label (a mirrored one would carry only the Kubernetes labels)."""
    ns = NS["antrea"]
    ds.objects.append(_import(V1ALPHA1, ns, "nginx", {"type": "ClusterSetIP", "ports": [{"name": "tcp80", "port": 80, "protocol": "TCP"}],
                                                       "ips": ["10.96.30.1"]}))
    ds.objects.append({"apiVersion": "v1", "kind": "Endpoints",
                       "metadata": {"name": "antrea-mc-nginx", "namespace": ns,
                                    "annotations": {"multicluster.antrea.io/imported-service": "true"}},
                       "subsets": [{"addresses": [{"ip": "10.41.0.2"}, {"ip": "10.42.0.3"}],
                                    "ports": [{"name": "tcp80", "port": 80, "protocol": "TCP"}]}]})
    ds.objects.append({"apiVersion": ES_API, "kind": "EndpointSlice", "addressType": "IPv4",
                       "metadata": {"name": "antrea-mc-nginx-m4r7t", "namespace": ns,
                                    "labels": {K8S_SERVICE_NAME: "antrea-mc-nginx",
                                               MANAGED_BY: "endpointslicemirroring-controller.k8s.io"}},
                       "endpoints": [{"addresses": ["10.41.0.2"]}, {"addresses": ["10.42.0.3"]}],
                       "ports": [{"name": "tcp80", "port": 80, "protocol": "TCP"}]})


def implementations() -> Dataset:
    """Every implementation's objects, one namespace each."""
    ds = Dataset("MCS implementations", [namespace(ns) for ns in NS.values()])
    for build in (_mcs_api, _cilium, _lighthouse, _aws, _karmada, _antrea):
        build(ds)
    return ds


# Names no import makes (labels left of the zone): the orphan slice's service and endpoint.
EXTRA_NAMES = [("orphan", NS["lighthouse"], "svc"), ("orphan-0", "cluster2", "orphan", NS["lighthouse"], "svc")]


# What a user asks first, per implementation, and the answer both servers give (rcode, sorted rdata):
# the table in docs/implementations.md. ClusterSetIP answers are spec.ips; an empty spec.ips is NODATA
# even where slices hold addresses (CoreDNS never answers a ClusterSetIP name from its slices).
USER_VIEW: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    # (implementation, name, type, rcode, answers)
    ("mcs-api", "web.impl-mcsapi", "A", "NOERROR", ("10.96.10.1",)),
    ("mcs-api", "dual.impl-mcsapi", "AAAA", "NOERROR", ("fd00:10::2",)),
    ("mcs-api", "fresh.impl-mcsapi", "A", "NOERROR", ()),
    ("mcs-api", "db.impl-mcsapi", "A", "NOERROR", ("10.1.1.1", "10.2.1.1")),
    ("mcs-api", "db-1.east.db.impl-mcsapi", "A", "NOERROR", ("10.1.1.1",)),
    ("cilium", "api.impl-cilium", "A", "NOERROR", ("10.96.20.1",)),
    ("cilium", "stateful.impl-cilium", "A", "NOERROR", ("10.11.1.0", "10.11.1.1", "10.12.1.0", "10.12.1.1")),
    ("cilium", "stateful-0.cluster2.stateful.impl-cilium", "A", "NOERROR", ("10.12.1.0",)),
    ("lighthouse", "nginx.impl-lighthouse", "A", "NOERROR", ()),
    ("lighthouse", "vip.impl-lighthouse", "A", "NOERROR", ("243.1.0.5",)),
    ("lighthouse", "mysql.impl-lighthouse", "A", "NOERROR", ("10.42.0.8",)),
    ("aws", "backend.impl-aws", "A", "NOERROR", ("10.100.1.1", "10.100.2.2")),
    ("aws", "nodes.impl-aws", "A", "NOERROR", ("10.21.0.1", "10.21.0.2", "10.22.0.1", "10.22.0.2")),
    ("karmada", "serve.impl-karmada", "A", "NOERROR", ()),
    ("antrea", "nginx.impl-antrea", "A", "NOERROR", ("10.96.30.1",)),
]
