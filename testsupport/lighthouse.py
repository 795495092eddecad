"""Submariner Lighthouse's agent exporting Services in the one-node cluster (testsupport/cluster.py).

Lighthouse (github.com/submariner-io/lighthouse, v0.20.0, built by tools/testbin/build-lighthouse.sh
into the image localhost/lighthouse-agent:dev by build-images.sh) is a real MCS implementation: for
a Service with a ServiceExport it writes a ServiceImport and EndpointSlices, through a broker. Here
the broker lives in the same cluster, as Submariner allows, and the cluster consumes its own
exports with an external DNS server for clusterset.local (mcsdns, or CoreDNS's `multicluster`),
so Lighthouse's own DNS server is not deployed, and no Submariner gateway either.

`deploy(cl)` installs what `subctl deploy-broker` and the Submariner operator would for the agent
alone, from the operator's manifests (config/broker, config/rbac/lighthouse-agent) and its agent
Deployment's environment:

* the broker: namespace `submariner-k8s-broker`, ServiceAccount `submariner-k8s-broker-client`
  with Role `submariner-k8s-broker-cluster` (Submariner clusters/endpoints, every
  multicluster.x-k8s.io resource, EndpointSlices), and that account's token Secret, whose token
  and CA the agent is given as BROKER_K8S_APISERVERTOKEN and BROKER_K8S_CA;
* the mcs-api ServiceExport CRD (sigs.k8s.io/mcs-api v0.5.0, copied into the testbin cache by
  build-lighthouse.sh; the cluster already has the ServiceImport CRD of the same release);
* the agent: namespace `submariner-operator` (SUBMARINER_NAMESPACE, where it keeps one
  ServiceImport per export of this cluster), ServiceAccount `submariner-lighthouse-agent` with
  the operator's ClusterRole and Role, and a one-replica Deployment configured by environment:
  SUBMARINER_CLUSTERID, SUBMARINER_GLOBALNET_ENABLED=false (no Globalnet: the agent then reads no
  GlobalIngressIP and needs no Submariner CRD), and the clusterset IP (SUBMARINER_CLUSTERSET_IP_*,
  Lighthouse's MCS-compliance option: a ClusterSetIP import gets a virtual IP in `spec.ips`, which
  an external DNS server answers; without it `spec.ips` stays empty and the name is NODATA). A
  ServiceExport can override the global setting with the annotation
  `lighthouse.submariner.io/use-clusterset-ip: "true"|"false"` (USE_CLUSTERSET_IP).

The agent reads no Submariner Endpoint, Cluster or Gateway object (those serve Lighthouse's DNS
server and the dataplane), so none is created. The clusterset IPs are only names: nothing routes
243.0.0.0/16 here, as nothing would without Submariner's dataplane.

`remove(cl)` runs the agent once more with SUBMARINER_UNINSTALL=true, as the operator does on
uninstall: it deletes every ServiceImport outside the broker namespace (whoever wrote it) and the
EndpointSlices Lighthouse manages, then `remove` deletes the Deployment, the RBAC, both
namespaces and the ServiceExport CRD if `deploy` created it.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import yaml

from testsupport.cluster import Cluster, ClusterError, _run, deployment_ready
from testsupport.testbed import ApiError

AGENT_IMAGE = "localhost/lighthouse-agent:dev"
AGENT_NAMESPACE = "submariner-operator"
AGENT_NAME = "submariner-lighthouse-agent"
BROKER_NAMESPACE = "submariner-k8s-broker"
BROKER_CLIENT = "submariner-k8s-broker-client"
CLUSTER_ID = "cluster1"
# Lighthouse's default clusterset IP range for the first cluster (its MCS-compliance proposal:
# 243.0.0.0/8 for the clusterset, a /16 of it per cluster).
CLUSTERSET_IP_CIDR = "243.0.0.0/16"
USE_CLUSTERSET_IP = "lighthouse.submariner.io/use-clusterset-ip"
MANAGED_BY = "lighthouse-agent.submariner.io"
SERVICE_EXPORT_CRD = "serviceexports.multicluster.x-k8s.io"


@dataclass
class Deployed:
    """What `deploy` set up: the names a caller checks or passes on."""

    cluster_id: str
    clusterset_ip: bool
    broker_server: str  # host:port, BROKER_K8S_APISERVER
    created_crd: bool  # the ServiceExport CRD was installed by `deploy` (so `remove` deletes it)


def archive(cache: Path) -> Path:
    """The agent image's OCI archive (build-images.sh)."""
    return cache / "images" / "lighthouse-agent.tar"


def binary(cache: Path) -> Path:
    return cache / "bin" / "lighthouse-agent"


def service_export_crd_path(cache: Path) -> Path:
    return cache / "crds" / "v0.5.0" / "serviceexports.yaml"


def missing(cache: Path) -> list[str]:
    """What this machine lacks to deploy the agent; empty when nothing."""
    out = []
    if not binary(cache).is_file():
        out.append(f"{binary(cache)} is missing: run tools/testbin/build-lighthouse.sh")
    if not archive(cache).exists():
        out.append(f"{archive(cache)} is missing: run tools/testbin/build-images.sh after build-lighthouse.sh")
    if not service_export_crd_path(cache).is_file():
        out.append(f"{service_export_crd_path(cache)} is missing: run tools/testbin/build-lighthouse.sh")
    return out


# --------------------------------------------------------------------------- the objects


def broker_objects() -> list[dict]:
    """The broker in this cluster: namespace, the clusters' ServiceAccount, its Role and token."""
    rule_verbs = ["create", "get", "list", "watch", "patch", "update", "delete"]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BROKER_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": BROKER_CLIENT, "namespace": BROKER_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "submariner-k8s-broker-cluster", "namespace": BROKER_NAMESPACE},
         "rules": [{"apiGroups": ["submariner.io"], "resources": ["clusters", "endpoints"], "verbs": rule_verbs},
                   {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["*"], "verbs": rule_verbs},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices", "endpointslices/restricted"],
                    "verbs": rule_verbs}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "submariner-k8s-broker-cluster", "namespace": BROKER_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "submariner-k8s-broker-cluster"},
         "subjects": [{"kind": "ServiceAccount", "name": BROKER_CLIENT, "namespace": BROKER_NAMESPACE}]},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": f"{BROKER_CLIENT}-token", "namespace": BROKER_NAMESPACE,
                      "annotations": {"kubernetes.io/service-account.name": BROKER_CLIENT}}},
    ]


def agent_env(cluster_id: str, broker_server: str, token: str, ca_b64: str, clusterset_ip: bool,
              uninstall: bool = False) -> list[dict]:
    """The environment the operator gives the agent (plus the clusterset IP settings)."""
    env = {
        "SUBMARINER_NAMESPACE": AGENT_NAMESPACE,
        "SUBMARINER_CLUSTERID": cluster_id,
        "SUBMARINER_DEBUG": "false",
        "SUBMARINER_GLOBALNET_ENABLED": "false",
        "SUBMARINER_CLUSTERSET_IP_ENABLED": str(clusterset_ip).lower(),
        "SUBMARINER_CLUSTERSET_IP_CIDR": CLUSTERSET_IP_CIDR,
        "SUBMARINER_HALT_ON_CERT_ERROR": "false",
        "BROKER_K8S_APISERVER": broker_server,
        "BROKER_K8S_APISERVERTOKEN": token,
        "BROKER_K8S_REMOTENAMESPACE": BROKER_NAMESPACE,
        "BROKER_K8S_CA": ca_b64,
        "BROKER_K8S_INSECURE": "false",
    }
    if uninstall:
        env["SUBMARINER_UNINSTALL"] = "true"
    return [{"name": k, "value": v} for k, v in env.items()]


def agent_objects(env: list[dict]) -> list[dict]:
    """Namespace, ServiceAccount, the operator's ClusterRole/Role for the agent, and its Deployment."""
    labels = {"app": AGENT_NAME, "component": "lighthouse-agent"}
    read = ["get", "list", "watch"]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_NAME, "namespace": AGENT_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": AGENT_NAME},
         "rules": [{"apiGroups": [""], "resources": ["services", "namespaces", "endpoints"], "verbs": read + ["update"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices", "endpointslices/restricted"],
                    "verbs": ["create", "get", "list", "watch", "update", "delete", "deletecollection"]},
                   {"apiGroups": ["submariner.io"], "resources": ["gateways", "globalingressips"], "verbs": read},
                   {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["*"],
                    "verbs": ["create", "get", "list", "watch", "update", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": AGENT_NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": AGENT_NAMESPACE}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": AGENT_NAME, "namespace": AGENT_NAMESPACE},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": read}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": AGENT_NAME, "namespace": AGENT_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_NAME, "namespace": AGENT_NAMESPACE}]},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": AGENT_NAME, "namespace": AGENT_NAMESPACE, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": _agent_pod_spec(env, "Always")}}},
    ]


def _agent_pod_spec(env: list[dict], restart: str) -> dict:
    return {
        "serviceAccountName": AGENT_NAME,
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 2,
        "containers": [{
            "name": "submariner-lighthouse-agent", "image": AGENT_IMAGE, "imagePullPolicy": "Never",
            "env": env,
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True, "runAsUser": 65532, "capabilities": {"drop": ["ALL"]}},
        }],
    }


# --------------------------------------------------------------------------- deploy and remove


def import_image(cl: Cluster) -> None:
    """The agent image into the node's containerd (k8s.io namespace), where the kubelet finds it."""
    path = archive(cl.cache)
    if not path.exists():
        raise ClusterError(f"{path} is missing: run tools/testbin/build-lighthouse.sh, then build-images.sh")
    _run(cl.bin["ctr"], f"--address={cl.socket}", "-n", "k8s.io", "images", "import", "--all-platforms",
         path.resolve(), timeout=180)


def _poll(check, timeout: float, what: str, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiError as err:
            last = err
        else:
            if last:
                return last
        time.sleep(interval)
    raise ClusterError(f"{what}: not after {timeout:.0f} s (last: {last})")


def _install_service_export_crd(cl: Cluster) -> bool:
    """The ServiceExport CRD, established; True when this call created it."""
    api = cl.api()
    crd = yaml.safe_load(service_export_crd_path(cl.cache).read_text())
    try:
        api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, SERVICE_EXPORT_CRD)
        existed = True
    except ApiError as err:
        if err.status != 404:
            raise
        existed = False
    api.apply(crd)

    def usable() -> bool:
        got = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, SERVICE_EXPORT_CRD)
        established = any(c["type"] == "Established" and c["status"] == "True"
                           for c in (got.get("status") or {}).get("conditions") or [])
        return established and bool(api.list("multicluster.x-k8s.io/v1alpha1", "ServiceExport").get("kind"))

    _poll(usable, 60, "ServiceExport CRD established")
    return not existed


def broker_server(cl: Cluster) -> str:
    """host:port of the cluster's API server, as the kubeconfig names it (what subctl records)."""
    server = yaml.safe_load(cl.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return urllib.parse.urlsplit(server).netloc


def _broker_credentials(cl: Cluster) -> tuple[str, str]:
    """(token, base64 CA) of the broker client's token Secret, once the token controller filled it."""
    api = cl.api()

    def filled() -> dict | None:
        data = api.get("v1", "Secret", BROKER_NAMESPACE, f"{BROKER_CLIENT}-token").get("data") or {}
        return data if data.get("token") and data.get("ca.crt") else None

    data = _poll(filled, 60, "the broker client's token Secret filled")
    return base64.b64decode(data["token"]).decode(), data["ca.crt"]


def deploy(cl: Cluster, *, cluster_id: str = CLUSTER_ID, clusterset_ip: bool = True,
           timeout: float = 180.0) -> Deployed:
    """Broker, ServiceExport CRD and the agent (see the module docstring); returns once the agent
    Deployment is ready and has logged that its controllers started."""
    problems = missing(cl.cache)
    if problems:
        raise ClusterError("cannot deploy Lighthouse: " + "; ".join(problems))
    import_image(cl)
    created_crd = _install_service_export_crd(cl)
    api = cl.api()
    for obj in broker_objects():
        api.apply(obj)
    token, ca = _broker_credentials(cl)
    server = broker_server(cl)
    for obj in agent_objects(agent_env(cluster_id, server, token, ca, clusterset_ip)):
        api.apply(obj)
    _poll(lambda: deployment_ready(api, AGENT_NAMESPACE, AGENT_NAME), timeout,
          f"Deployment {AGENT_NAMESPACE}/{AGENT_NAME} ready")
    _poll(lambda: "Agent controller started" in logs(cl), 60, "the agent logging 'Agent controller started'")
    return Deployed(cluster_id, clusterset_ip, server, created_crd)


def logs(cl: Cluster, tail: int | None = None) -> str:
    """The agent's log (kubectl logs deployment/...), "" when there is no pod to read."""
    args = ["-n", AGENT_NAMESPACE, "logs", f"deployment/{AGENT_NAME}"]
    if tail is not None:
        args.append(f"--tail={tail}")
    return cl.kubectl(*args, check=False).stdout


def remove(cl: Cluster, deployed: Deployed | None = None, *, timeout: float = 120.0) -> None:
    """Lighthouse's uninstall, then everything `deploy` created (see the module docstring).

    `deployed` None: what `deploy` with its defaults would have made, the ServiceExport CRD kept."""
    api = cl.api()
    agent = _get(api, "apps/v1", "Deployment", AGENT_NAMESPACE, AGENT_NAME)
    if agent is not None:
        env = agent["spec"]["template"]["spec"]["containers"][0]["env"]
        api.delete("apps/v1", "Deployment", AGENT_NAMESPACE, AGENT_NAME)
        _poll(lambda: not _agent_pods(cl), timeout, "the agent's pods gone")
        _uninstall(cl, [dict(e) for e in env if e["name"] != "SUBMARINER_UNINSTALL"], timeout)
    for obj in reversed(agent_objects([]) + broker_objects()):
        meta = obj["metadata"]
        api.delete(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
    for ns in (AGENT_NAMESPACE, BROKER_NAMESPACE):
        _poll(lambda ns=ns: _get(api, "v1", "Namespace", None, ns) is None, timeout, f"namespace {ns} gone")
    if deployed is not None and deployed.created_crd:
        api.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, SERVICE_EXPORT_CRD)
        _poll(lambda: _get(api, "apiextensions.k8s.io/v1", "CustomResourceDefinition", None,
                           SERVICE_EXPORT_CRD) is None, timeout, "ServiceExport CRD gone")


def _uninstall(cl: Cluster, env: list[dict], timeout: float) -> None:
    """The agent once with SUBMARINER_UNINSTALL=true, as a pod that must succeed."""
    api = cl.api()
    name = f"{AGENT_NAME}-uninstall"
    env.append({"name": "SUBMARINER_UNINSTALL", "value": "true"})
    api.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": AGENT_NAMESPACE},
               "spec": _agent_pod_spec(env, "Never")})

    def finished() -> str | None:
        phase = api.get("v1", "Pod", AGENT_NAMESPACE, name).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = _poll(finished, timeout, "the agent's uninstall pod finished")
    if phase != "Succeeded":
        log = cl.kubectl("-n", AGENT_NAMESPACE, "logs", name, check=False).stdout
        raise ClusterError(f"Lighthouse's uninstall failed:\n{log[-3000:]}")
    api.delete("v1", "Pod", AGENT_NAMESPACE, name)


def _agent_pods(cl: Cluster) -> list[dict]:
    out = cl.api().list("v1", "Pod", AGENT_NAMESPACE, labelSelector=f"app={AGENT_NAME}")
    return out.get("items", [])


def _get(api, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:  # type: ignore[no-untyped-def]
    try:
        return api.get(api_version, kind, namespace, name)
    except ApiError as err:
        if err.status == 404:
            return None
        raise


# --------------------------------------------------------------------------- exporting


def service_export(namespace: str, name: str, use_clusterset_ip: bool | None = None) -> dict:
    """A v1alpha1 ServiceExport (what Lighthouse watches); the annotation only when given."""
    meta: dict = {"name": name, "namespace": namespace}
    if use_clusterset_ip is not None:
        meta["annotations"] = {USE_CLUSTERSET_IP: str(use_clusterset_ip).lower()}
    return {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport", "metadata": meta}


def written(cl: Cluster, namespace: str) -> dict[str, list[dict]]:
    """What Lighthouse wrote in `namespace`: its ServiceImports and the EndpointSlices it manages."""
    api = cl.api()
    imports = api.list("multicluster.x-k8s.io/v1alpha1", "ServiceImport", namespace).get("items", [])
    slices = api.list("discovery.k8s.io/v1", "EndpointSlice", namespace,
                      labelSelector=f"endpointslice.kubernetes.io/managed-by={MANAGED_BY}").get("items", [])
    return {"imports": imports, "slices": slices}


def dump(cl: Cluster, namespaces: list[str]) -> str:
    """The objects Lighthouse wrote (and the ServiceExports it reads) as multi-document YAML,
    server-managed noise removed, for benchmarks/results/."""
    api = cl.api()
    docs = []
    kinds = (("multicluster.x-k8s.io/v1alpha1", "ServiceExport"), ("multicluster.x-k8s.io/v1alpha1", "ServiceImport"),
             ("discovery.k8s.io/v1", "EndpointSlice"))
    for ns in namespaces:
        for api_version, kind in kinds:
            query = {"labelSelector": f"endpointslice.kubernetes.io/managed-by={MANAGED_BY}"} \
                if kind == "EndpointSlice" else {}
            for obj in api.list(api_version, kind, ns, **query).get("items", []):
                obj = json.loads(json.dumps(obj))
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                meta = obj["metadata"]
                for key in ("managedFields", "uid", "resourceVersion", "generation", "creationTimestamp"):
                    meta.pop(key, None)
                for cond in obj.get("status", {}).get("conditions", []) or []:
                    cond.pop("lastTransitionTime", None)
                docs.append(obj)
    return yaml.safe_dump_all(docs, sort_keys=False)
