"""The manifest objects tests, benchmarks and the soak write: plain dicts, as `kubectl apply` takes them.

One set of builders so that every suite spells a ServiceImport or an MCS EndpointSlice the same
way (labels, port shape, condition shape); a test that needs an odd object (a missing field, a bad
value) builds the normal one here and then edits the dict.
"""

from __future__ import annotations

from typing import Any

MCS = "multicluster.x-k8s.io"
MCS_API = f"{MCS}/v1beta1"
ES_API = "discovery.k8s.io/v1"
ZONE = "clusterset.local"
SERVICE_NAME = "multicluster.kubernetes.io/service-name"
SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"


def http_ports(port: int = 80) -> list[dict]:
    """The one port most tests need: `http`, TCP."""
    return [{"name": "http", "port": port, "protocol": "TCP"}]


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def service_import(namespace: str, name: str, ips: list[str] | None = None, *, headless: bool = False,
                   ports: list[dict] | None = None, port: int = 80, families: list[str] | None = None,
                   api_version: str = MCS_API) -> dict:
    """A ServiceImport: ClusterSetIP (or Headless), `ports` or else one http port, `spec.ips` only if given."""
    spec: dict[str, Any] = {"type": "Headless" if headless else "ClusterSetIP",
                            "ports": http_ports(port) if ports is None else ports}
    if ips is not None:
        spec["ips"] = ips
    if families:
        spec["ipFamilies"] = families
    return {"apiVersion": api_version, "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def endpoint(addresses: list[str], hostname: str | None = None, ready: bool | None = True,
             serving: bool | None = None, terminating: bool | None = None) -> dict:
    """One EndpointSlice endpoint; a condition left None is left out (not false)."""
    ep: dict[str, Any] = {"addresses": addresses}
    conditions = {k: v for k, v in (("ready", ready), ("serving", serving), ("terminating", terminating))
                  if v is not None}
    if conditions:
        ep["conditions"] = conditions
    if hostname:
        ep["hostname"] = hostname
    return ep


def endpoint_slice(namespace: str, name: str, service: str, cluster: str | None,
                   endpoints: list[dict] | list[tuple[str, bool]], *, address_type: str = "IPv4",
                   ports: list[dict] | None = None, no_ports: bool = False, labels: dict[str, str] | None = None,
                   annotations: dict[str, str] | None = None) -> dict:
    """An MCS EndpointSlice of `service` from `cluster` (None: no source-cluster label).

    `endpoints` are `endpoint(...)` dicts, or (ip, ready) pairs for the common case; `ports`
    default to one http port (`no_ports` leaves the field out).
    """
    all_labels = {SERVICE_NAME: service, **(labels or {})}
    if cluster is not None:
        all_labels[SOURCE_CLUSTER] = cluster
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    if annotations:
        meta["annotations"] = annotations
    obj: dict[str, Any] = {
        "apiVersion": ES_API, "kind": "EndpointSlice", "metadata": meta, "addressType": address_type,
        "endpoints": [e if isinstance(e, dict) else endpoint([e[0]], ready=e[1]) for e in endpoints],
    }
    if not no_ports:
        obj["ports"] = http_ports() if ports is None else ports
    return obj


def headless_service(namespace: str, name: str, endpoints: list[dict], cluster: str = "c1") -> list[dict]:
    """A headless ServiceImport and one MCS EndpointSlice (port http/TCP/80) as manifest objects."""
    return [service_import(namespace, name, headless=True),
            endpoint_slice(namespace, f"{name}-1", service=name, cluster=cluster, endpoints=endpoints)]
