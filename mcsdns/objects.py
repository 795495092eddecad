"""Raw Kubernetes JSON -> small frozen records holding only what DNS reads.

Both sources (the API watch and the manifest files) hand this module the
object exactly as the API serves it (a dict from JSON or YAML). Everything the
zone logic needs is copied into slotted, immutable records here, and the raw
dict is dropped: a table of 50k imports then costs a few hundred bytes per
object instead of the tens of kilobytes a full API object (or a client model
instance) would.

Validation happens here too, once, at ingest, by project decision 12: an
object is never dropped whole for something DNS can serve around. Spellings
CoreDNS accepts (a lower-case protocol `tcp`, a name like `1st`) are served as
CoreDNS serves them; only the part DNS cannot represent (a non-IP entry of
`spec.ips`, a port whose protocol is none of TCP/UDP/SCTP in any case) is left
out, and the record says so in `omitted` for the source to log and count. An
object is refused whole (:class:`InvalidObject`) only when it has no usable
name or a field of the wrong JSON type, which the API itself never serves.
"""

from __future__ import annotations

import logging
import re
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

MCS_GROUP = "multicluster.x-k8s.io"
LABEL_SERVICE_NAME = "multicluster.kubernetes.io/service-name"
LABEL_SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"
ANNOTATION_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"

HEADLESS = "Headless"
CLUSTER_SET_IP = "ClusterSetIP"

# RFC 1123 label, as Kubernetes validates namespace names and endpoint hostnames. A ServiceImport
# name must be one too: `1st` is (CoreDNS serves it), `a.b` (a valid object name) is not.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# An endpoint hostname as CoreDNS uses it: one label, compared case-insensitively.
_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?$")
_DNS_LABEL_RULE = "lower-case letters, digits and '-', at most 63, not starting or ending with '-'"
# A label value as Kubernetes allows it (the cluster id lives in one).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
# A port name a `_name._proto` question can spell as one label (CoreDNS compares it case-insensitively).
_PORT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,63}$")
# Protocols an SRV name can carry (`_tcp`, `_udp`, `_sctp`), in any case: CoreDNS compares with EqualFold.
PROTOCOLS = ("TCP", "UDP", "SCTP")

# The API server's own limits (EndpointSlice validation). Objects
# from the API never exceed them; manifests might (a YAML alias can repeat a list 1000 times in a
# few bytes), and an object beyond them is rejected before anything is built from it.
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100  # per endpoint
MAX_SLICE_PORTS = 20000
# spec.ips: the mcs-api CRD allows 2 (one per family), but not every CRD in use does (the AWS Cloud Map
# controller writes one ClusterIP per source cluster) and CoreDNS serves them all: so do we, up to a
# bound no cluster set reaches; entries beyond it are left out with a note (decision 12), never the object.
MAX_IMPORT_IPS = 256

# ServiceImport status (decision 14): what mcs-api defines, and how much of it is kept per import.
CONDITION_READY = "Ready"
KNOWN_CONDITIONS = {CONDITION_READY: ("Ready", "Pending", "IPFamilyNotSupported")}  # type -> reasons mcs-api names
CONDITION_STATUSES = ("True", "False", "Unknown")
MAX_CONDITIONS = 8
MAX_CONDITION_TYPE = 63
MAX_CONDITION_REASON = 63
MAX_CONDITION_MESSAGE = 256
MAX_STATUS_CLUSTERS = 16


class InvalidObject(ValueError):
    """An object DNS cannot represent; its message says which field and why."""


@dataclass(frozen=True, slots=True)
class Port:
    """One port as CoreDNS keeps it: number (-1 = "no ports" sentinel), name, protocol."""

    port: int
    name: str = ""
    protocol: str = ""


NO_PORTS = (Port(-1),)


class Condition(NamedTuple):
    """One `status.conditions[]` entry of a ServiceImport, as shown to people (bounded in size)."""

    type: str
    status: str  # True, False or Unknown
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class ImportStatus:
    """A ServiceImport's status as the MCS controller wrote it: for people, never for answers (decision 14).

    Bounded whatever the object holds: at most MAX_CONDITIONS conditions, each field cut to
    its limit, at most MAX_STATUS_CLUSTERS cluster names (`cluster_count` has them all).
    `notes` says what was cut, left out or odd (`status.conditions[2]: ...`), for the log and /explain.
    """

    conditions: tuple[Condition, ...] = ()
    clusters: tuple[str, ...] = ()
    cluster_count: int = 0
    notes: tuple[str, ...] = ()

    def ready(self) -> Condition | None:
        """The `Ready` condition, if the controller wrote one."""
        return next((c for c in self.conditions if c.type == CONDITION_READY), None)

    def not_ready(self) -> str | None:
        """`reason: message` when the import's Ready condition is not True; None when Ready or unknown."""
        ready = self.ready()
        if ready is None or ready.status == "True":
            return None
        text = ready.reason or "(no reason)"
        return f"{text}: {ready.message}" if ready.message else text


NO_STATUS = ImportStatus()


@dataclass(frozen=True, slots=True)
class ServiceImport:
    namespace: str
    name: str
    headless: bool
    ips: tuple[str, ...]
    ports: tuple[Port, ...]
    # What was left out because DNS cannot represent it (decision 12), one `field: why` per part;
    # the source logs one warning and counts each. Not part of the answers: never compared.
    omitted: tuple[str, ...] = field(default=(), compare=False)
    changed: str | None = field(default=None, compare=False)  # newest managedFields time: programming latency
    # status.conditions and status.clusters (decision 14): shown by discovery, counted in metrics, never
    # compared, so a status update alone changes no answer and compiles nothing.
    status: ImportStatus = field(default=NO_STATUS, compare=False)


class Address(NamedTuple):
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
    omitted: tuple[str, ...] = field(default=(), compare=False)  # as ServiceImport.omitted
    changed: str | None = None  # newest managedFields time, for programming latency (ignored by dns_equivalent)
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


CLUSTER_ID_PROPERTY = "cluster.clusterset.k8s.io"  # KEP-2149: this cluster's id is its spec.value
ABOUT_GROUP = "about.k8s.io"


@dataclass(frozen=True, slots=True)
class ClusterProperty:
    """A KEP-2149 ClusterProperty (cluster-scoped): only its name and spec.value."""

    name: str
    value: str

    @property
    def namespace(self) -> str:
        return ""  # cluster-scoped: keyed like a Namespace


Object = ServiceImport | EndpointSlice | Namespace | ClusterProperty
# Which object: (namespace, name), namespace "" for the cluster-scoped kinds (Namespace,
# ClusterProperty). The store, the relist and the watch key objects by it; a service is keyed
# by (namespace, service name) instead (store.ServiceKey), which a slice's key is not.
ObjectKey = tuple[str, str]


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


def _metadata(obj: dict, name_pattern: re.Pattern[str], namespaced: bool = True,
              rule: str = _DNS_LABEL_RULE) -> tuple[str, str]:
    # `_field` inlined for the shapes the API serves (every object of a sync comes here); anything
    # else takes `_field` itself, for its exact errors.
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = _field(obj, "metadata", default={})
    name = meta.get("name")
    if not isinstance(name, str):
        name = _field(meta, "name", kind=str, default="", at="metadata")
    if not name_pattern.match(name):
        raise InvalidObject(f"metadata.name {name!r} cannot be a DNS label ({rule})")
    if not namespaced:
        return "", name
    namespace = meta.get("namespace")
    if not isinstance(namespace, str):
        namespace = _field(meta, "namespace", kind=str, default="", at="metadata")
    if not _DNS_LABEL.match(namespace):
        raise InvalidObject(f"metadata.namespace {namespace!r} cannot be a DNS label ({_DNS_LABEL_RULE})")
    return namespace, name


def reason_of(message: str) -> str:
    """`spec.ips[0]: ...` -> `spec.ips`: the bounded metric label of a rejection or omission message."""
    head = message.split(":", 1)[0].split(" ", 1)[0]
    return head.split("[", 1)[0] or "invalid"


def report_omitted(ref: str, omitted: tuple[str, ...], count: Any) -> None:
    """One warning for an object served without the parts DNS cannot represent; `count(reason)` per part."""
    log.warning("%s served without what DNS cannot represent: %s", ref, "; ".join(omitted))
    for message in omitted:
        count(reason_of(message))


def report_status_notes(ref: str, notes: tuple[str, ...]) -> None:
    """One line for a ServiceImport whose status is shown only in part (or is back to whole: notes empty)."""
    if notes:
        log.warning("%s: its status is shown in part (it never changes an answer): %s", ref, "; ".join(notes))
    else:
        log.info("%s: its status is shown whole again", ref)


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


def _port(item: Any, where: str, *, required: bool, omitted: list[str]) -> Port:
    """One port as CoreDNS keeps it; its SRV records left out (a note in `omitted`) when no SRV can carry it.

    Spelling is kept as written: CoreDNS matches `_name._proto` case-insensitively
    (`tcp` answers `_tcp`), and so does compile. A protocol that is none of
    TCP/UDP/SCTP in any case, or a number no SRV record can hold, makes the port
    the "no port" sentinel (-1): it still counts for the addresses and the SRV
    weights as in CoreDNS, but has no SRV record and no `_name._proto` name. A
    name no question can spell as one label is dropped (the port stays):
    CoreDNS never matches it either, and an unnamed port answers the same questions.
    """
    if not isinstance(item, dict):
        raise InvalidObject(f"{where}: expected object")
    number = item.get("port")
    if number is None and not required:
        number = -1
    elif isinstance(number, bool) or not isinstance(number, int):
        raise InvalidObject(f"{where}.port: {number!r} is not a port number")
    name = item.get("name")
    if not isinstance(name, str):  # `_field` inlined, as in _metadata
        name = _field(item, "name", kind=str, default="", at=where)
    protocol = item.get("protocol")
    if not isinstance(protocol, str):
        protocol = _field(item, "protocol", kind=str, default="", at=where)
    if protocol and protocol.upper() not in PROTOCOLS:
        omitted.append(f"{where}.protocol: {protocol!r:.80} is none of TCP, UDP, SCTP; its SRV records are left out")
        return NO_PORTS[0]
    if number != -1 and not 0 <= number <= 65535:
        omitted.append(f"{where}.port: {number} is no port number (0..65535); its SRV records are left out")
        return NO_PORTS[0]
    if name and not _PORT_NAME.match(name):
        omitted.append(f"{where}.name: {name!r:.80} cannot be spelled as a DNS label; served as an unnamed port")
        name = ""
    return Port(number, name, protocol)


def _ports(raw: list, at: str, *, required: bool, omitted: list[str]) -> tuple[Port, ...]:
    """`_port` of every item of `raw` (`at`: where the list sits), shared between objects that list the same.

    Most slices of a service, and most services, list the same ports, and a sync converts every one
    (a good part of converting an EndpointSlice). A list whose items hold only the values `_port` reads,
    each an exact int, str or None, is keyed by them; what it converts to is kept only when it added
    no note to `omitted` (a note is the object's own), so a kept list never needed one. Anything else
    takes `_port` item by item, for its exact errors and notes. Bounded: cleared when full.
    """
    key = _port_key(raw, required)
    if key is not None:
        shared = _PORT_LISTS.get(key)
        if shared is not None:
            return shared
    noted = len(omitted)
    ports = tuple(_port(item, f"{at}[{i}]", required=required, omitted=omitted) for i, item in enumerate(raw))
    if key is not None and len(omitted) == noted:
        if len(_PORT_LISTS) >= _SHARED_MAX:
            _PORT_LISTS.clear()
        _PORT_LISTS[key] = ports
    return ports


def _port_key(raw: list, required: bool) -> tuple | None:
    """What `_port` reads of each item of `raw`, flattened; None when an item is not a plain dict of such values."""
    values: list[Any] = [required]
    for item in raw:
        if type(item) is not dict:
            return None
        number, name, protocol = item.get("port"), item.get("name"), item.get("protocol")
        if type(number) not in _PORT_VALUE or type(name) not in _PORT_VALUE or type(protocol) not in _PORT_VALUE:
            return None
        values += (number, name, protocol)
    return tuple(values)


_PORT_VALUE = frozenset((int, str, type(None)))  # exact types: a bool is not a port number, nor a key for one
_PORT_LISTS: dict[tuple, tuple[Port, ...]] = {}
# Objects and parts that many objects share (port lists, import statuses) are kept once each, up to this many.
_SHARED_MAX = 4096


_MAPPED_PREFIX = b"\0" * 10 + b"\xff\xff"  # ::ffff:a.b.c.d
_inet_pton, _AF_INET = socket.inet_pton, socket.AF_INET
_new_tuple = tuple.__new__  # Address(...) without the Python frame of NamedTuple's __new__


def parse_ip(text: str) -> tuple[str, bool] | None:
    """(address as written, is_v6) or None; IPv4-mapped IPv6 counts as IPv4 (as CoreDNS).

    A zone index (`fe80::1%eth0`) is not an address Go's net.ParseIP (so the API
    and CoreDNS) accepts, and it would leak into host names: not an IP here either.
    inet_pton, not ipaddress: it accepts exactly what ipaddress.ip_address does
    here at a fraction of the cost, and a sync reads every address.
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
    """Strip a ServiceImport (v1alpha1 or v1beta1: identical schemas) to its DNS fields.

    As CoreDNS: any type but `Headless` (exactly) is a ClusterSetIP import (the
    CRD allows only the two; a manifest may say anything).
    """
    namespace, name = _metadata(obj, _DNS_LABEL)
    spec = _field(obj, "spec", default={})
    kind = _field(spec, "type", kind=str, default="", at="spec")
    omitted: list[str] = []
    if kind not in (HEADLESS, CLUSTER_SET_IP):
        omitted.append(f"spec.type: {kind!r:.80} is not ClusterSetIP or Headless; served as ClusterSetIP, as CoreDNS does")
    ips: list[str] = []
    raw_ips = _field(spec, "ips", kind=list, default=[], at="spec")
    if len(raw_ips) > MAX_IMPORT_IPS:
        omitted.append(f"spec.ips: {len(raw_ips)} entries; those after the first {MAX_IMPORT_IPS} are left out")
    for i, text in enumerate(raw_ips[:MAX_IMPORT_IPS]):
        if not isinstance(text, str) or parse_ip(text) is None:
            omitted.append(f"spec.ips[{i}]: {text!r:.80} is not an IP address; left out")
            continue
        ips.append(text)
    ports = _ports(_field(spec, "ports", kind=list, default=[], at="spec"), "spec.ports", required=True, omitted=omitted)
    return ServiceImport(namespace, name, kind == HEADLESS, tuple(ips), ports, omitted=tuple(omitted), changed=changed_at(obj),
                         status=import_status(obj.get("status")))


def _cut(value: Any, limit: int, where: str, notes: list[str]) -> str:
    """A condition field as text of at most `limit` characters; a note when it was not a string or was cut."""
    if value is None:
        return ""
    if not isinstance(value, str):
        notes.append(f"{where}: {type(value).__name__}, not a string; shown as text")
        value = str(value)
    if len(value) > limit:
        notes.append(f"{where}: {len(value)} characters, cut to {limit}")
        return value[: limit - 1] + "\u2026"
    return value


def import_status(raw: Any) -> ImportStatus:
    """A ServiceImport's `status` -> ImportStatus. Never raises: a status changes no answer, so no
    status, however malformed, refuses the object; what is odd or cut becomes a note instead."""
    if raw is None:
        return NO_STATUS
    notes: list[str] = []
    if not isinstance(raw, dict):
        return ImportStatus(notes=(f"status: {type(raw).__name__}, not an object; ignored",))
    conditions: list[Condition] = []
    raw_conditions = raw.get("conditions") or []
    if not isinstance(raw_conditions, list):
        notes.append(f"status.conditions: {type(raw_conditions).__name__}, not a list; ignored")
        raw_conditions = []
    if len(raw_conditions) > MAX_CONDITIONS:
        notes.append(f"status.conditions: {len(raw_conditions)} conditions, the first {MAX_CONDITIONS} shown")
    for i, item in enumerate(raw_conditions[:MAX_CONDITIONS]):
        where = f"status.conditions[{i}]"
        if not isinstance(item, dict):
            notes.append(f"{where}: {type(item).__name__}, not an object; left out")
            continue
        type_ = _cut(item.get("type"), MAX_CONDITION_TYPE, f"{where}.type", notes)
        if not type_:
            notes.append(f"{where}: no type; left out")
            continue
        status = _cut(item.get("status"), 16, f"{where}.status", notes)
        if status not in CONDITION_STATUSES:
            notes.append(f"{where}.status: {status!r} is none of True, False, Unknown; shown as Unknown")
            status = "Unknown"
        reason = _cut(item.get("reason"), MAX_CONDITION_REASON, f"{where}.reason", notes)
        message = _cut(item.get("message"), MAX_CONDITION_MESSAGE, f"{where}.message", notes)
        if type_ not in KNOWN_CONDITIONS:
            notes.append(f"{where}.type: {type_!r} is not a condition mcs-api defines ({', '.join(KNOWN_CONDITIONS)}); shown as written")
        conditions.append(Condition(sys.intern(type_), sys.intern(status), sys.intern(reason), message))
    raw_clusters = raw.get("clusters") or []
    if not isinstance(raw_clusters, list):
        notes.append(f"status.clusters: {type(raw_clusters).__name__}, not a list; ignored")
        raw_clusters = []
    names = [c["cluster"] for c in raw_clusters if isinstance(c, dict) and isinstance(c.get("cluster"), str)]
    if len(names) < len(raw_clusters):
        notes.append(f"status.clusters: {len(raw_clusters) - len(names)} entries without a cluster name; left out")
    clusters = tuple(sys.intern(n[:MAX_CONDITION_TYPE]) for n in names[:MAX_STATUS_CLUSTERS])
    status = ImportStatus(tuple(conditions), clusters, len(names), tuple(notes))
    # Most imports of a cluster set carry the same status (Ready, the same clusters): one shared copy each,
    # so 50k imports cost a dict entry apiece, not a status apiece. Bounded: cleared when full.
    shared = _STATUSES.get(status)
    if shared is not None:
        return shared
    if len(_STATUSES) >= _SHARED_MAX:
        _STATUSES.clear()
    _STATUSES[status] = status
    return status


_STATUSES: dict[ImportStatus, ImportStatus] = {}


def to_endpoint_slice(obj: dict) -> EndpointSlice:
    """Strip an MCS EndpointSlice to its ready addresses, hosts, ports and cluster id.

    Endpoints whose `conditions.ready` is false are dropped here (unset counts
    as ready, as in CoreDNS). Addresses that are not IPs are ignored with a
    warning (project decision 5); they never make the slice invalid.
    """
    namespace, name = _metadata(obj, _DNS_LABEL_OR_GENERATED, rule="a DNS subdomain")
    labels = _field(obj, "metadata", "labels", default={})
    service = labels.get(LABEL_SERVICE_NAME)
    if not isinstance(service, str) or not _DNS_LABEL.match(service):
        raise InvalidObject(f"label {LABEL_SERVICE_NAME}={service!r} cannot name a ServiceImport ({_DNS_LABEL_RULE})")
    cluster = labels.get(LABEL_SOURCE_CLUSTER)
    if cluster is not None and (not isinstance(cluster, str) or not cluster or not _LABEL_VALUE.match(cluster)):
        raise InvalidObject(f"label {LABEL_SOURCE_CLUSTER}={cluster!r} is not a valid cluster id")
    addresses: list[Address] = []
    omitted: list[str] = []
    not_ready: list[Address] = []
    not_ips, first_bad = 0, ""
    for i, ep in enumerate(_list(obj, "endpoints", limit=MAX_ENDPOINTS)):
        if not isinstance(ep, dict):
            raise InvalidObject(f"endpoints[{i}]: expected object")
        # The three reads below are `_field` inlined for the shapes the API serves (a sync reads
        # every endpoint of every slice); anything else takes `_field` itself, for its exact errors.
        conditions = ep.get("conditions")
        ready = conditions.get("ready") if isinstance(conditions, dict) else None
        if conditions is None or (ready is None and isinstance(conditions, dict)):
            ready = True
        elif not isinstance(ready, bool):  # conditions not an object, or ready not a boolean: refused
            ready = _field(ep, "conditions", "ready", kind=bool, default=True, at=f"endpoints[{i}]")
        hostname = ep.get("hostname")
        if hostname is None:
            hostname = ""
        elif not isinstance(hostname, str):
            hostname = _field(ep, "hostname", kind=str, default="", at=f"endpoints[{i}]")
        if hostname and not _HOST_LABEL.match(hostname):
            omitted.append(f"endpoints[{i}].hostname: {hostname!r:.80} cannot be a DNS label; the endpoint is left out")
            continue
        addresses_raw = ep.get("addresses")
        if addresses_raw is None:
            addresses_raw = []
        elif not isinstance(addresses_raw, list):
            addresses_raw = _field(ep, "addresses", kind=list, default=[], at=f"endpoints[{i}]")
        if len(addresses_raw) > MAX_ADDRESSES:
            raise InvalidObject(f"endpoints[{i}].addresses: {len(addresses_raw)} items, more than the API allows ({MAX_ADDRESSES})")
        kept = addresses if ready else not_ready
        for j, text in enumerate(addresses_raw):
            # parse_ip and endpoint_hostname inlined for an IPv4 address (a sync reads every one):
            # accepted, it has dots, so its host label is the hostname or the address dashed.
            if isinstance(text, str) and ":" not in text and "%" not in text and text.isascii():
                try:
                    _inet_pton(_AF_INET, text)
                except (OSError, ValueError):
                    pass
                else:
                    kept.append(_new_tuple(Address, (text, False, hostname or text.replace(".", "-"))))
                    continue
            parsed = parse_ip(text) if isinstance(text, str) else None
            if parsed is None:
                if not_ips == 0:
                    first_bad = f"endpoints[{i}].addresses[{j}] {text!r:.80}"
                not_ips += 1
                continue
            ip, v6 = parsed
            kept.append(Address(ip, v6, endpoint_hostname(hostname, ip)))
    if not_ips:  # one line per slice, not per address: a slice may hold 100k of them
        log.warning("EndpointSlice %s/%s: %d address(es) are not IP addresses and are ignored (first: %s)",
                    namespace, name, not_ips, first_bad)
    raw_ports = _list(obj, "ports", limit=MAX_SLICE_PORTS)
    ports = _ports(raw_ports, "ports", required=False, omitted=omitted)
    annotations = _field(obj, "metadata", "annotations", default={})
    trigger = annotations.get(ANNOTATION_TRIGGER_TIME)
    return EndpointSlice(
        namespace, name, service, cluster, tuple(addresses), ports or NO_PORTS,
        trigger if isinstance(trigger, str) else None, omitted=tuple(omitted), changed=changed_at(obj),
        not_ready=tuple(not_ready),
    )


def changed_at(obj: dict) -> str | None:
    """The newest `metadata.managedFields[].time`: when the API last saw a write (one-second resolution).

    Only this timestamp is kept from managedFields (the rest is dropped with the raw object).
    RFC 3339 times as the API writes them (`2026-12-01T23:40:05Z`) sort as text.
    """
    meta = obj.get("metadata")
    fields = meta.get("managedFields") if isinstance(meta, dict) else None
    if not isinstance(fields, list):
        return None
    if len(fields) == 1:  # one writer, the common case: no list to build (a sync reads every object's)
        stamp = fields[0].get("time") if isinstance(fields[0], dict) else None
        return sys.intern(stamp) if isinstance(stamp, str) else None
    times = [f["time"] for f in fields if isinstance(f, dict) and isinstance(f.get("time"), str)]
    return sys.intern(max(times)) if times else None  # objects written in the same second share one string


# EndpointSlice names are DNS subdomains (generated names like `web-abc12`, may contain dots).
_DNS_LABEL_OR_GENERATED = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def to_namespace(obj: dict) -> Namespace:
    return Namespace(_metadata(obj, _DNS_LABEL, namespaced=False)[1])


def to_cluster_property(obj: dict) -> ClusterProperty:
    """A ClusterProperty (about.k8s.io, any served version: the schema is one string)."""
    name = _metadata(obj, _DNS_LABEL_OR_GENERATED, namespaced=False)[1]
    value = _field(obj, "spec", "value", kind=str, default="", at="")
    if not value:
        raise InvalidObject("spec.value: empty (a ClusterProperty needs a value)")
    return ClusterProperty(name, value)


KINDS = {
    "ServiceImport": to_service_import,
    "EndpointSlice": to_endpoint_slice,
    "Namespace": to_namespace,
    "ClusterProperty": to_cluster_property,
}

API_VERSIONS = {
    "ServiceImport": (f"{MCS_GROUP}/v1alpha1", f"{MCS_GROUP}/v1beta1"),
    "EndpointSlice": ("discovery.k8s.io/v1",),
    "Namespace": ("v1",),
    "ClusterProperty": tuple(f"{ABOUT_GROUP}/{v}" for v in ("v1alpha1", "v1beta1", "v1")),
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
