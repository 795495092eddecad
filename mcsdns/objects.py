"""Raw Kubernetes JSON -> small frozen records holding only what DNS reads.

Both sources (the API watch and the manifest files) hand this module the
object exactly as the API serves it (a dict from JSON or YAML). Everything the
zone logic needs is copied into slotted, immutable records here, and the raw
dict is dropped: a table of 50k imports then costs a few hundred bytes per
object instead of the tens of kilobytes a full API object (or a client model
instance) would.

Validation happens here too, once, at ingest: an object that DNS cannot
represent raises :class:`InvalidObject` with a reason, the caller logs and
counts it, and the rest of the table is unaffected.
"""

from __future__ import annotations

import logging
import re
import socket
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MCS_GROUP = "multicluster.x-k8s.io"
LABEL_SERVICE_NAME = "multicluster.kubernetes.io/service-name"
LABEL_SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"
ANNOTATION_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"

HEADLESS = "Headless"
CLUSTER_SET_IP = "ClusterSetIP"

# RFC 1123 label, as Kubernetes validates namespace names and endpoint hostnames.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# RFC 1035 label: Service (and so ServiceImport) names must also start with a letter.
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
# A label value as Kubernetes allows it (the cluster id lives in one).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# The API server's own limits (EndpointSlice validation; the ServiceImport CRD's maxItems). Objects
# from the API never exceed them; manifests might (a YAML alias can repeat a list 1000 times in a
# few bytes), and an object beyond them is rejected before anything is built from it.
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100  # per endpoint
MAX_SLICE_PORTS = 20000
MAX_IMPORT_IPS = 2  # one per family


class InvalidObject(ValueError):
    """An object DNS cannot represent; its message says which field and why."""


@dataclass(frozen=True, slots=True)
class Port:
    """One port as CoreDNS keeps it: number (-1 = "no ports" sentinel), name, protocol."""

    port: int
    name: str = ""
    protocol: str = ""


NO_PORTS = (Port(-1),)


@dataclass(frozen=True, slots=True)
class ServiceImport:
    namespace: str
    name: str
    headless: bool
    ips: tuple[str, ...]
    ports: tuple[Port, ...]


@dataclass(frozen=True, slots=True)
class Address:
    """One ready address of an MCS EndpointSlice, with its DNS host label."""

    ip: str
    v6: bool
    hostname: str


@dataclass(frozen=True, slots=True)
class EndpointSlice:
    namespace: str
    name: str
    service: str
    cluster: str | None  # None: the source-cluster label is missing (decision 4)
    addresses: tuple[Address, ...]
    ports: tuple[Port, ...]
    trigger_time: str | None = None  # last-change-trigger-time, for programming latency
    # Addresses of endpoints whose `conditions.ready` is false: in no answer, only for /imports and /explain.
    not_ready: tuple[Address, ...] = ()

    def dns_equivalent(self, other: "EndpointSlice | None") -> bool:
        """True when `other` would produce the same answers (trigger time ignored)."""
        return (
            other is not None
            and self.service == other.service
            and self.cluster == other.cluster
            and self.addresses == other.addresses
            and self.ports == other.ports
        )


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str


Object = ServiceImport | EndpointSlice | Namespace


# --------------------------------------------------------------------------- helpers


def _field(obj: dict, *path: str, kind: type | tuple[type, ...] = dict, default: Any = None, at: str = "") -> Any:
    """obj[path...] checked against `kind`; `at` is where `obj` sits, so messages name the full path."""
    cur: Any = obj
    for key in path:
        if not isinstance(cur, dict):
            raise InvalidObject(f"{_where(at, path)}: parent is not an object")
        cur = cur.get(key)
        if cur is None:
            return default
    if not isinstance(cur, kind):
        raise InvalidObject(f"{_where(at, path)}: expected {_kind_name(kind)}, got {type(cur).__name__}")
    return cur


def _where(at: str, path: tuple[str, ...]) -> str:
    return ".".join((at, *path) if at else path)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {dict: "object", list: "list", str: "string", int: "integer", bool: "boolean"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _metadata(obj: dict, name_pattern: re.Pattern[str], namespaced: bool = True) -> tuple[str, str]:
    meta = _field(obj, "metadata", default={})
    name = _field(meta, "name", kind=str, default="", at="metadata")
    if not name_pattern.match(name):
        raise InvalidObject(f"metadata.name {name!r} is not a valid DNS label")
    if not namespaced:
        return "", name
    namespace = _field(meta, "namespace", kind=str, default="", at="metadata")
    if not _DNS_LABEL.match(namespace):
        raise InvalidObject(f"metadata.namespace {namespace!r} is not a valid DNS label")
    return namespace, name


def object_ref(obj: Any) -> str:
    """`kind ns/name` for log lines, tolerant of any garbage."""
    if not isinstance(obj, dict):
        return f"<{type(obj).__name__}>"
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ns, name = meta.get("namespace"), meta.get("name")
    ref = f"{ns}/{name}" if ns else str(name)
    return f"{obj.get('kind', '?')} {ref}"


def _list(obj: dict, *path: str, limit: int, at: str = "") -> list:
    items = _field(obj, *path, kind=list, default=[], at=at)
    if len(items) > limit:
        raise InvalidObject(f"{_where(at, path)}: {len(items)} items, more than the API allows ({limit})")
    return items


def _port(item: Any, where: str, *, required: bool) -> Port:
    if not isinstance(item, dict):
        raise InvalidObject(f"{where}: expected object")
    number = item.get("port")
    if number is None and not required:
        number = -1
    elif isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise InvalidObject(f"{where}.port: {number!r} is not a port number (1..65535)")
    name = _field(item, "name", kind=str, default="", at=where)
    if name and not _PORT_NAME.match(name):
        raise InvalidObject(f"{where}.name: {name!r} is not a valid port name")
    protocol = _field(item, "protocol", kind=str, default="", at=where)
    if protocol not in ("", "TCP", "UDP", "SCTP"):
        raise InvalidObject(f"{where}.protocol: {protocol!r} is not TCP, UDP or SCTP")
    return Port(number, name, protocol)


_MAPPED_PREFIX = b"\0" * 10 + b"\xff\xff"  # ::ffff:a.b.c.d


def parse_ip(text: str) -> tuple[str, bool] | None:
    """(address as written, is_v6) or None; IPv4-mapped IPv6 counts as IPv4 (as CoreDNS).

    A zone index (`fe80::1%eth0`) is not an address Go's net.ParseIP (so the API
    and CoreDNS) accepts, and it would leak into host names: not an IP here either.
    inet_pton, not ipaddress: it accepts exactly what ipaddress.ip_address does
    here (checked on 700k random and structured strings) at a tenth of the cost,
    which was ~18% of an initial sync of 50k imports.
    """
    if "%" in text or not text.isascii():
        return None
    try:
        if ":" in text:
            return text, socket.inet_pton(socket.AF_INET6, text)[:12] != _MAPPED_PREFIX
        socket.inet_pton(socket.AF_INET, text)
        return text, False
    except (OSError, ValueError):
        return None


def endpoint_hostname(hostname: str, ip: str) -> str:
    """CoreDNS's endpointHostname: the hostname, else the address with separators dashed.

    IPv6 is dashed as written in the slice (not re-canonicalised), with a `0`
    appended when the result would end in `-` (CoreDNS >= 1.12.3).
    """
    if hostname:
        return hostname
    if "." in ip:
        return ip.replace(".", "-")
    dashed = ip.replace(":", "-")
    return dashed + "0" if dashed.endswith("-") else dashed


# --------------------------------------------------------------------------- converters


def to_service_import(obj: dict) -> ServiceImport:
    """Strip a ServiceImport (v1alpha1 or v1beta1: identical schemas) to its DNS fields."""
    namespace, name = _metadata(obj, _DNS1035_LABEL)
    spec = _field(obj, "spec", default={})
    kind = _field(spec, "type", kind=str, default="", at="spec")
    if kind not in (HEADLESS, CLUSTER_SET_IP):
        raise InvalidObject(f"spec.type: {kind!r} is not ClusterSetIP or Headless")
    ips: list[str] = []
    for i, text in enumerate(_list(spec, "ips", limit=MAX_IMPORT_IPS, at="spec")):
        if not isinstance(text, str) or parse_ip(text) is None:
            raise InvalidObject(f"spec.ips[{i}]: {text!r} is not an IP address")
        ips.append(text)
    ports = tuple(
        _port(item, f"spec.ports[{i}]", required=True)
        for i, item in enumerate(_field(spec, "ports", kind=list, default=[], at="spec"))
    )
    return ServiceImport(namespace, name, kind == HEADLESS, tuple(ips), ports)


def to_endpoint_slice(obj: dict) -> EndpointSlice:
    """Strip an MCS EndpointSlice to its ready addresses, hosts, ports and cluster id.

    Endpoints whose `conditions.ready` is false are dropped here (unset counts
    as ready, as in CoreDNS). Addresses that are not IPs are ignored with a
    warning (project decision 5); they never make the slice invalid.
    """
    namespace, name = _metadata(obj, _DNS_LABEL_OR_GENERATED)
    labels = _field(obj, "metadata", "labels", default={})
    service = labels.get(LABEL_SERVICE_NAME)
    if not isinstance(service, str) or not _DNS1035_LABEL.match(service):
        raise InvalidObject(f"label {LABEL_SERVICE_NAME}={service!r} is not a service name")
    cluster = labels.get(LABEL_SOURCE_CLUSTER)
    if cluster is not None and (not isinstance(cluster, str) or not cluster or not _LABEL_VALUE.match(cluster)):
        raise InvalidObject(f"label {LABEL_SOURCE_CLUSTER}={cluster!r} is not a valid cluster id")
    addresses: list[Address] = []
    not_ready: list[Address] = []
    ref = f"EndpointSlice {namespace}/{name}"
    not_ips, first_bad = 0, ""
    for i, ep in enumerate(_list(obj, "endpoints", limit=MAX_ENDPOINTS)):
        where = f"endpoints[{i}]"
        if not isinstance(ep, dict):
            raise InvalidObject(f"{where}: expected object")
        ready = _field(ep, "conditions", "ready", kind=bool, default=True, at=where)
        hostname = _field(ep, "hostname", kind=str, default="", at=where)
        if hostname and not _DNS_LABEL.match(hostname):
            raise InvalidObject(f"{where}.hostname: {hostname!r} is not a valid DNS label")
        addresses_raw = _field(ep, "addresses", kind=list, default=[], at=where)
        if len(addresses_raw) > MAX_ADDRESSES:
            raise InvalidObject(f"{where}.addresses: {len(addresses_raw)} items, more than the API allows ({MAX_ADDRESSES})")
        for j, text in enumerate(addresses_raw):
            parsed = parse_ip(text) if isinstance(text, str) else None
            if parsed is None:
                if not_ips == 0:
                    first_bad = f"{where}.addresses[{j}] {text!r:.80}"
                not_ips += 1
                continue
            ip, v6 = parsed
            (addresses if ready else not_ready).append(Address(ip, v6, endpoint_hostname(hostname, ip)))
    if not_ips:  # one line per slice, not per address: a slice may hold 100k of them
        log.warning("%s: %d address(es) are not IP addresses and are ignored (first: %s)", ref, not_ips, first_bad)
    raw_ports = _list(obj, "ports", limit=MAX_SLICE_PORTS)
    ports = tuple(_port(item, f"ports[{i}]", required=False) for i, item in enumerate(raw_ports)) or NO_PORTS
    annotations = _field(obj, "metadata", "annotations", default={})
    trigger = annotations.get(ANNOTATION_TRIGGER_TIME)
    return EndpointSlice(
        namespace, name, service, cluster, tuple(addresses), ports, trigger if isinstance(trigger, str) else None,
        tuple(not_ready),
    )


# EndpointSlice names are DNS subdomains (generated names like `web-abc12`, may contain dots).
_DNS_LABEL_OR_GENERATED = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def to_namespace(obj: dict) -> Namespace:
    return Namespace(_metadata(obj, _DNS_LABEL, namespaced=False)[1])


KINDS = {
    "ServiceImport": to_service_import,
    "EndpointSlice": to_endpoint_slice,
    "Namespace": to_namespace,
}

API_VERSIONS = {
    "ServiceImport": (f"{MCS_GROUP}/v1alpha1", f"{MCS_GROUP}/v1beta1"),
    "EndpointSlice": ("discovery.k8s.io/v1",),
    "Namespace": ("v1",),
}


def convert(obj: Any) -> Object:
    """Any supported object as served by the API -> its DNS record; InvalidObject otherwise."""
    if not isinstance(obj, dict):
        raise InvalidObject(f"object: expected a mapping, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InvalidObject(f"kind: {kind!r} is not a supported kind")
    if obj.get("apiVersion") not in API_VERSIONS[kind]:
        raise InvalidObject(f"apiVersion: {obj.get('apiVersion')!r} is not a supported version of {kind}")
    return KINDS[kind](obj)
