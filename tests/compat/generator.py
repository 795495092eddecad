"""Cluster sets as API objects, and the questions to ask about them.

`generate(seed)` builds a random but reproducible cluster set: several
namespaces (one of them empty), ClusterSetIP imports with zero, one or two IPs
and zero or more ports (named and unnamed, TCP/UDP/SCTP, repeated numbers),
headless imports whose EndpointSlices come from several clusters, IPv4 and
IPv6 slices, endpoints with and without hostnames, ready true/false/unset, a
headless service too big for 512 bytes, and a namespace of objects on which
mcsdns deliberately differs (docs/compatibility.md).

`questions(dataset)` lists every name form of the contract for the objects
(service, `_port._proto`, per-endpoint, cluster-only, namespace, svc, pod, apex,
dns-version, ns.dns, too many labels, unknown names). `classify()` gives any
name its form and the tags of the service it names; the decision list keys on
those tags.
"""

from __future__ import annotations

import ipaddress
import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import yaml

from testsupport.objects import MCS, SERVICE_NAME, SOURCE_CLUSTER, endpoint, endpoint_slice, namespace, service_import

from .dnsclient import TCP, UDP, UDP_EDNS, Ask
ZONE = "clusterset.local"

QTYPES = ("A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY", "CNAME", "MX", "PTR", "HTTPS")
PAYLOADS = (256, 512, 1232, 4096)  # 256: below the minimum, which CoreDNS still echoes
# EDNS options sent now and then: NSID (empty), a client COOKIE, and an unassigned code.
OPTIONS = ((3, b""), (10, bytes.fromhex("0123456789abcdef")), (65001, b"\x01"))

# Tags on services whose answers differ on purpose (keys of decisions.py). Each such service has a
# "twin" (Dataset.twins): the same objects without the part mcsdns leaves out, which CoreDNS serves
# too; CoreDNS's reply about the twin is the exact reply the decision expects from mcsdns.
CLUSTERLESS = "clusterless-slice"
NON_IP_ADDRESS = "non-ip-address"
NON_IP_IMPORT_IP = "non-ip-import-ip"
NON_SRV_PORT = "non-srv-port"  # decision 12: a port whose protocol is none of TCP/UDP/SCTP
NON_SRV_PORT_NUMBER, NON_SRV_PORT_PROTOCOL = 7, "ICMP"  # (no twin: the expectation is CoreDNS's minus its SRV)


@dataclass
class Dataset:
    """API objects plus what the question generator needs to know about them."""

    name: str
    objects: list[dict]
    tags: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))  # (ns, svc)
    twins: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, svc) -> the twin's service name
    missing_namespaces: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ views

    def of_kind(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o["kind"] == kind]

    @property
    def namespaces(self) -> list[str]:
        return [o["metadata"]["name"] for o in self.of_kind("Namespace")]

    def imports(self) -> list[dict]:
        return self.of_kind("ServiceImport")

    def slices_of(self, namespace: str, service: str) -> list[dict]:
        return [s for s in self.of_kind("EndpointSlice")
                if s["metadata"]["namespace"] == namespace
                and (s["metadata"].get("labels") or {}).get(SERVICE_NAME) == service]

    def cluster_ids(self) -> set[str]:
        return {(s["metadata"].get("labels") or {}).get(SOURCE_CLUSTER, "") for s in self.of_kind("EndpointSlice")} - {""}


def load_manifests(path: Path, name: str) -> Dataset:
    """A dataset from a multi-document YAML file (the contract fixture)."""
    objects = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return Dataset(name, objects, missing_namespaces=["nsnoexist", "pod-nons"])


# --------------------------------------------------------------------------- objects


# --------------------------------------------------------------------------- the generator

NS_WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
SVC_WORDS = ["web", "api", "db", "cache", "queue", "auth", "search", "mail", "proxy", "store",
             "media", "feed", "stats", "log", "kv", "gw", "ui", "job"]
CLUSTERS = ["east", "west", "Central-1", "eu.prod", "c9"]
HOSTNAMES = ["web-0", "web-1", "db-0", "api", "dup", "x1"]
PORT_NAMES = ["http", "https", "dns", "grpc", "metrics", "tcp", "udp", "a-b"]
PROTOCOLS = ["TCP", "UDP", "SCTP"]


def _spelled(protocol: str, rng: random.Random) -> str:
    """A ServiceImport protocol as some controllers write it: mostly `TCP`, sometimes `tcp` (as
    CoreDNS's handler_test) or `Tcp`. The CRD accepts any string; CoreDNS compares with EqualFold.
    (EndpointSlices cannot: the API accepts only TCP, UDP and SCTP there.)"""
    roll = rng.random()
    return protocol.lower() if roll < 0.25 else protocol.capitalize() if roll < 0.35 else protocol
PORT_NUMBERS = [42, 53, 80, 443, 8080]


class _Addresses:
    """Unique addresses per family; a few IPv6 ones end in `::` (the `-0` hostname rule)."""

    def __init__(self) -> None:
        self.v4 = 0
        self.v6 = 0
        self.vip4 = 0
        self.vip6 = 0

    def endpoint_v4(self) -> str:
        self.v4 += 1
        return str(ipaddress.IPv4Address("10.128.0.0") + self.v4)

    def endpoint_v6(self, rng: random.Random) -> str:
        self.v6 += 1
        if rng.random() < 0.2:
            return str(ipaddress.IPv6Address(f"fd00:{self.v6:x}:{self.v6:x}::"))
        return str(ipaddress.IPv6Address("fd00:e::") + self.v6)

    def vip_v4(self) -> str:
        self.vip4 += 1
        return str(ipaddress.IPv4Address("10.96.100.0") + self.vip4)

    def vip_v6(self) -> str:
        self.vip6 += 1
        return str(ipaddress.IPv6Address("fd00:96::") + self.vip6)


def _import_ports(rng: random.Random) -> list[dict]:
    n = rng.choice([0, 1, 1, 2, 2, 3, 4])
    ports: list[dict] = []
    used: set[tuple[str, str]] = set()
    while len(ports) < n:
        name = rng.choice(PORT_NAMES + [""])
        protocol = rng.choice(PROTOCOLS + ["TCP"])
        if (name, protocol) in used:
            continue
        used.add((name, protocol))
        port: dict[str, Any] = {"port": rng.choice(PORT_NUMBERS)}
        if name:
            port["name"] = name
        if rng.random() < 0.9:
            port["protocol"] = _spelled(protocol, rng)
        ports.append(port)
    if n >= 2 and rng.random() < 0.5:  # the conformance shape: tcp/N and udp/N
        number = rng.choice(PORT_NUMBERS)
        ports[0]["port"] = ports[1]["port"] = number
    return ports


def _slice_ports(rng: random.Random) -> list[dict] | None:
    n = rng.choice([0, 1, 1, 2, 3])
    if n == 0:
        return None if rng.random() < 0.5 else []
    names = rng.sample(PORT_NAMES, n)
    if rng.random() < 0.3:
        names[0] = ""  # one unnamed port (names are unique within a slice)
    ports = []
    for name in names:
        port: dict[str, Any] = {"protocol": rng.choice(PROTOCOLS)}
        if rng.random() < 0.95:
            port["port"] = rng.choice(PORT_NUMBERS)
        if name:
            port["name"] = name
        ports.append(port)
    return ports


def _endpoints(rng: random.Random, addrs: _Addresses, v6: bool, n: int) -> list[dict]:
    eps = []
    for _ in range(n):
        count = 2 if rng.random() < 0.1 else 1
        addresses = [addrs.endpoint_v6(rng) if v6 else addrs.endpoint_v4() for _ in range(count)]
        hostname = rng.choice(HOSTNAMES) if rng.random() < 0.5 else None
        ready = rng.choice([True, True, True, False, None])
        serving = terminating = None
        if ready is False and rng.random() < 0.5:
            serving, terminating = True, True
        eps.append(endpoint(addresses, hostname, ready, serving, terminating))
    return eps


def generate(seed: int, prefix: str = "cx") -> Dataset:
    """A random cluster set; the same seed always gives the same objects."""
    rng = random.Random(seed)
    addrs = _Addresses()
    ds = Dataset(f"generated seed {seed}", [], missing_namespaces=[f"{prefix}-missing"])
    namespaces = [f"{prefix}-{w}" for w in rng.sample(NS_WORDS, 4)]
    empty = f"{prefix}-empty"
    decisions = f"{prefix}-decisions"
    for ns in namespaces + [empty, decisions]:
        ds.objects.append(namespace(ns))

    slices: list[dict] = []
    for ns in namespaces:
        for svc in rng.sample(SVC_WORDS, rng.randint(3, 6)):
            headless = rng.random() < 0.45
            if headless:
                ds.objects.append(service_import(ns, svc, headless=True, ports=_import_ports(rng), api_version=f"{MCS}/" + rng.choice(["v1alpha1", "v1beta1"])))
                clusters = rng.sample(CLUSTERS, rng.choice([0, 1, 2, 2, 3]))
            else:
                families = rng.choice([[], ["IPv4"], ["IPv4"], ["IPv6"], ["IPv4", "IPv6"], ["IPv6", "IPv4"]])
                ips = [addrs.vip_v4() if f == "IPv4" else addrs.vip_v6() for f in families]
                ds.objects.append(service_import(ns, svc, ips if ips or rng.random() < 0.5 else None, ports=_import_ports(rng), families=families, api_version=f"{MCS}/" + rng.choice(["v1alpha1", "v1beta1"])))
                clusters = rng.sample(CLUSTERS, rng.choice([0, 0, 1, 2]))
            for cid in clusters:
                families = rng.choice([["IPv4"], ["IPv4"], ["IPv6"], ["IPv4", "IPv6"]])
                for fam in families:
                    v6 = fam == "IPv6"
                    name = f"{svc}-{cid.lower().replace('.', '-')}-{fam.lower()}"
                    endpoints = _endpoints(rng, addrs, v6, rng.choice([0, 1, 2, 3, 4]))
                    ports = _slice_ports(rng)  # None: a slice without the field
                    slices.append(endpoint_slice(ns, name, svc, cid, endpoints, address_type=fam, ports=ports,
                                                 no_ports=ports is None))
    ns0 = namespaces[0]
    # Too big for 512 bytes (A) and for 4096 (SRV with glue): truncation.
    ds.objects.append(service_import(ns0, "big", headless=True, ports=[]))
    for cid in ("east", "west"):
        eps = [endpoint([addrs.endpoint_v4()], f"big-{i}" if i % 3 else None) for i in range(35)]
        slices.append(endpoint_slice(ns0, f"big-{cid}", "big", cid, eps, ports=[{"name": "http", "port": 80, "protocol": "TCP"}]))
    # A slice whose import does not exist, and one whose import lives in another namespace.
    slices.append(endpoint_slice(ns0, "ghost-east", "ghost", "east", [endpoint([addrs.endpoint_v4()], "g")], no_ports=True))
    other_svc = next(o["metadata"]["name"] for o in ds.imports() if o["metadata"]["namespace"] == namespaces[1])
    if not any(o["metadata"]["name"] == other_svc for o in ds.imports() if o["metadata"]["namespace"] == ns0):
        slices.append(endpoint_slice(ns0, f"{other_svc}-stray", other_svc, "east", [endpoint([addrs.endpoint_v4()])], no_ports=True))

    # Spellings CoreDNS serves, as its handler_test writes them (decision 12: served alike).
    d = decisions
    ds.objects.append(service_import(d, "plain", [addrs.vip_v4()], ports=[{"name": "http", "port": 80, "protocol": "TCP"}]))
    ds.objects.append(service_import(d, "lowproto", [addrs.vip_v4(), addrs.vip_v6()], ports=[{"name": "http", "port": 80, "protocol": "tcp"}, {"name": "dns", "port": 53, "protocol": "udp"},
                                      {"name": "Grpc", "port": 81, "protocol": "Sctp"}]))
    ds.objects.append(service_import(d, "1st", [addrs.vip_v4()], ports=[{"name": "http", "port": 80, "protocol": "TCP"}]))
    # A valid object name that is no DNS label: refused by mcsdns; no name reaches it in CoreDNS either.
    ds.objects.append(service_import(d, "two.labels", [addrs.vip_v4()], ports=[{"name": "http", "port": 80, "protocol": "TCP"}]))

    # Deliberate differences (docs/compatibility.md), each on its own service with its twin.
    http = [{"name": "http", "port": 80, "protocol": "TCP"}]
    m0, m1, m2 = addrs.endpoint_v4(), addrs.endpoint_v4(), addrs.endpoint_v4()
    for svc, with_clusterless in (("mixed", True), ("mixed-twin", False)):
        ds.objects.append(service_import(d, svc, headless=True, ports=[]))
        slices.append(endpoint_slice(d, f"{svc}-east", svc, "east", [endpoint([m0], "m0")], ports=http))
        if with_clusterless:
            slices.append(endpoint_slice(d, f"{svc}-nolabel", svc, None, [endpoint([m1], "m1"), endpoint([m2])], ports=http))
    ds.tags[(d, "mixed")].add(CLUSTERLESS)
    ds.twins[(d, "mixed")] = "mixed-twin"
    vip = addrs.vip_v4()
    ds.objects.append(service_import(d, "badip", ["not-an-ip"], ports=http))
    ds.objects.append(service_import(d, "badip-twin", [], ports=http))
    ds.objects.append(service_import(d, "badip2", [vip, "not-an-ip"], ports=http))
    ds.objects.append(service_import(d, "badip2-twin", [vip], ports=http))
    for svc in ("badip", "badip2"):
        ds.tags[(d, svc)].add(NON_IP_IMPORT_IP)
        ds.twins[(d, svc)] = f"{svc}-twin"
    ds.objects.append(service_import(d, "icmp", [addrs.vip_v4()], ports=http + [{"name": "ping", "port": NON_SRV_PORT_NUMBER, "protocol": NON_SRV_PORT_PROTOCOL}]))
    ds.tags[(d, "icmp")].add(NON_SRV_PORT)
    f1 = addrs.endpoint_v4()
    for svc, with_fqdn in (("fqdn", True), ("fqdn-twin", False)):
        ds.objects.append(service_import(d, svc, headless=True, ports=[]))
        if with_fqdn:
            slices.append(endpoint_slice(d, f"{svc}-east", svc, "east", [endpoint(["db.example.com"], "f0")], address_type="FQDN", ports=http))
        slices.append(endpoint_slice(d, f"{svc}-east-v4", svc, "east", [endpoint([f1], "f1")], ports=http))
    ds.tags[(d, "fqdn")].add(NON_IP_ADDRESS)
    ds.twins[(d, "fqdn")] = "fqdn-twin"

    ds.objects.extend(slices)
    return ds


# --------------------------------------------------------------------------- questions


@dataclass(frozen=True)
class Question:
    """A name left of the zone (lower case, canonical) and one type; `ask()` spells and sends it."""

    labels: tuple[str, ...]
    qtype: str

    def qname(self, rng: random.Random | None = None) -> str:
        text = ".".join(self.labels + (ZONE,)) + "."
        return random_case(text, rng) if rng else text


def random_case(text: str, rng: random.Random) -> str:
    return "".join(c.upper() if c.isalpha() and rng.random() < 0.5 else c for c in text)


def _port_prefixes(ports: Iterable[dict]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for p in ports:
        name = (p.get("name") or "").lower()
        proto = (p.get("protocol") or "").lower()
        if name:
            out.append((f"_{name}", f"_{proto}" if proto else "_tcp"))
            out.append((f"_{name}", "_udp" if proto != "udp" else "_sctp"))  # wrong protocol
        if proto:
            out.append(("_", f"_{proto}"))  # empty port name: a wildcard in CoreDNS
    return out


def names(ds: Dataset, extra_namespaces: Iterable[str] = ()) -> list[tuple[str, ...]]:
    """Every name form for the dataset's objects (labels left of the zone, lower case)."""
    out: list[tuple[str, ...]] = [
        (), ("svc",), ("pod",), ("dns-version",), ("ns", "dns"), ("foo",), ("dns",), ("apex", "dns"),
        ("*", "svc"), ("a", "b", "c", "d", "e", "f", "svc"),
    ]
    for ns in list(ds.namespaces) + list(ds.missing_namespaces) + list(extra_namespaces):
        out += [(ns, "svc"), ("nosuch", ns, "svc"), ("*", ns, "svc"), ("1-2-3-4", ns, "pod"), (ns, "pod")]
    clusters = sorted(c.lower() for c in ds.cluster_ids())
    for imp in ds.imports():
        ns, svc = imp["metadata"]["namespace"], imp["metadata"]["name"]
        base = (svc, ns, "svc")
        out += [base, (svc, ns, "pod"), ("dns-version",) + base]
        ports = list(imp["spec"].get("ports") or [])
        slices = ds.slices_of(ns, svc)
        for sl in slices:
            ports += sl.get("ports") or []
        prefixes = sorted(set(_port_prefixes(ports)))
        out += [p + base for p in prefixes]
        out += [("_nosuch", "_tcp") + base, ("http", "_tcp") + base, ("_http", "tcp") + base]
        seen_cids: set[str] = set()
        for sl in slices:
            cid = (sl["metadata"].get("labels") or {}).get(SOURCE_CLUSTER)
            for ep in sl.get("endpoints") or []:
                for addr in ep.get("addresses") or []:
                    host = ep.get("hostname") or _dashed(addr)
                    if cid:
                        out.append((host.lower(),) + tuple(cid.lower().split(".")) + base)
                    out.append((host.lower(),) + base)  # no cluster id: NXDOMAIN (decision 4 aside)
            if cid:
                seen_cids.add(cid.lower())
        for cid in sorted(seen_cids):
            if "." not in cid:
                out += [(cid,) + base, ("nosuch", cid) + base]
        if clusters and not imp["spec"]["type"] == "Headless":
            out.append(("x", clusters[0]) + base)
        out.append(("a", "b", "c") + base)
    # Dedupe, keep order; drop names that do not fit in 255 bytes.
    seen: set[tuple[str, ...]] = set()
    result = []
    for labels in out:
        if labels not in seen and len(".".join(labels)) + len(ZONE) < 250 and all(0 < len(x) < 64 for x in labels):
            seen.add(labels)
            result.append(labels)
    return result


def _dashed(ip: str) -> str:
    if "." in ip:
        return ip.replace(".", "-")
    dashed = ip.replace(":", "-")
    return dashed + "0" if dashed.endswith("-") else dashed


def asks(label_sets: Iterable[tuple[str, ...]], seed: int, *, qtypes: Iterable[str] = QTYPES,
         transports: Iterable[str] = (UDP_EDNS, UDP, TCP)) -> list[tuple[tuple[str, ...], Ask]]:
    """The cross product names x types x transports, each spelled in its own random case."""
    rng = random.Random(seed)
    out = []
    for labels in label_sets:
        for qtype in qtypes:
            for transport in transports:
                payload = rng.choice(PAYLOADS) if transport == UDP_EDNS else (1232 if transport == TCP and rng.random() < 0.5 else 0)
                do = bool(payload) and rng.random() < 0.3
                options = tuple(o for o in OPTIONS if payload and rng.random() < 0.02)
                out.append((labels, Ask(Question(labels, qtype).qname(rng), qtype, transport, payload, do, options)))
    return out


# --------------------------------------------------------------------------- classification


def twin_of(labels: tuple[str, ...], ds: Dataset | None) -> str | None:
    """The twin service of the service a name is about (labels left of the zone), if it has one."""
    labels = tuple(x.lower() for x in labels)
    if ds is None or len(labels) < 3 or labels[-1] != "svc":
        return None
    return ds.twins.get((labels[-2], labels[-3]))


def twin_ask(ask: Ask, labels: tuple[str, ...], twin: str) -> Ask:
    """The same question about the twin: the service label replaced, everything else as spelled."""
    spelled = ask.qname.rstrip(".").split(".")
    spelled[len(labels) - 3] = twin
    return replace(ask, qname=".".join(spelled) + ".")


def classify(labels: tuple[str, ...], ds: Dataset | None = None) -> tuple[str, frozenset[str]]:
    """(form, tags) of a name left of the zone: the report's categories, the decisions' keys."""
    labels = tuple(x.lower() for x in labels)
    n = len(labels)
    tags: set[str] = set()
    if n >= 3 and labels[-1] == "svc" and ds is not None:
        tags = set(ds.tags.get((labels[-2], labels[-3]), ()))
    if n == 0:
        form = "apex"
    elif labels == ("dns-version",):
        form = "dns-version"
    elif labels == ("ns", "dns"):
        form = "ns.dns"
    elif labels in (("svc",), ("pod",)):
        form = labels[0]
    elif labels[-1] == "pod":
        form = "pod-name"
    elif labels[-1] != "svc":
        form = "unknown"
    elif n == 2:
        form = "namespace"
    elif n == 3:
        form = "service"
    elif n == 4:
        clusters = {c.lower() for c in ds.cluster_ids()} if ds else set()
        form = "cluster-only" if labels[0] in clusters else "endpoint-no-cluster"
    elif n == 5:
        form = "port-proto" if labels[0].startswith("_") or labels[1].startswith("_") else "endpoint"
    else:
        form = "too-many-labels"
    return form, frozenset(tags)
