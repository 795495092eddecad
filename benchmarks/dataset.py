"""The benchmark's cluster set: generated objects, and the same data as manifests,
as a Knot zone file and as API objects.

Every name and address is a function of an index, so any size can be built
on demand and queries can be generated without keeping the objects around:

* ClusterSetIP imports `svc-<i>` in namespace `bench-<i % namespaces>`, one
  port `http/TCP 80`, a VIP 10.96/16 (even i also get an IPv6 VIP, so AAAA
  queries see both answers and NODATA), and one EndpointSlice from cluster
  `east` with `endpoints` ready addresses (no hostnames: their per-endpoint
  names are the dashed addresses, as CoreDNS makes them).
* Headless imports `hl-<n>` in namespace `bench-hl` with `n` ready endpoints
  named `pod-<k>`, split into slices of at most 100 (what the EndpointSlice
  controller does).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from testsupport.objects import ES_API, MCS_API, ZONE, endpoint, endpoint_slice, namespace, service_import

CLUSTER = "east"
HEADLESS_NS = "bench-hl"
SLICE_MAX = 100
TTL = 5  # mcsdns's and CoreDNS's default TTL; the Knot zone uses the same

_VIP4 = int(ipaddress.IPv4Address("10.96.0.0"))
_EP4 = int(ipaddress.IPv4Address("10.128.0.0"))
_HL4 = int(ipaddress.IPv4Address("10.64.0.0"))


@dataclass(frozen=True)
class Spec:
    imports: int = 1000  # ClusterSetIP ServiceImports
    endpoints: int = 10  # ready endpoints of each ClusterSetIP import
    headless: tuple[int, ...] = (10, 100)  # one headless import per endpoint count
    namespaces: int = 10

    def namespace(self, i: int) -> str:
        return f"bench-{i % self.namespaces}"

    def namespace_names(self) -> list[str]:
        return [f"bench-{k}" for k in range(min(self.namespaces, max(self.imports, 1)))] + [HEADLESS_NS]


# --------------------------------------------------------------------------- addresses


def vip4(i: int) -> str:
    return str(ipaddress.IPv4Address(_VIP4 + i))


def vip6(i: int) -> str | None:
    return f"fd00:96::{i:x}" if i % 2 == 0 else None


def endpoint_ip(i: int, k: int, per: int) -> str:
    return str(ipaddress.IPv4Address(_EP4 + i * per + k))


def headless_ip(n: int, k: int) -> str:
    # Each headless size gets its own /20 (room for 4096 endpoints).
    return str(ipaddress.IPv4Address(_HL4 + (n % 4096) * 4096 + k))


def dashed(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "-")


# --------------------------------------------------------------------------- names


def svc_name(spec: Spec, i: int) -> str:
    return f"svc-{i}.{spec.namespace(i)}.svc.{ZONE}"


def headless_name(n: int) -> str:
    return f"hl-{n}.{HEADLESS_NS}.svc.{ZONE}"


# --------------------------------------------------------------------------- objects


def namespace_obj(name: str) -> dict:
    return namespace(name)


def import_obj(spec: Spec, i: int, ips: list[str] | None = None) -> dict:
    if ips is None:
        ips = [vip4(i)] + ([vip6(i)] if vip6(i) else [])
    families = ["IPv4"] + (["IPv6"] if len(ips) > 1 else [])
    return service_import(spec.namespace(i), f"svc-{i}", ips, families=families)


def slice_obj(spec: Spec, i: int) -> dict:
    return endpoint_slice(spec.namespace(i), f"svc-{i}-{CLUSTER}", f"svc-{i}", CLUSTER,
                          [(endpoint_ip(i, k, spec.endpoints), True) for k in range(spec.endpoints)],
                          ports=[{"name": "http", "protocol": "TCP", "port": 8080}])


def headless_import_obj(n: int) -> dict:
    return service_import(HEADLESS_NS, f"hl-{n}", headless=True, families=["IPv4"])


def headless_slice_objs(n: int, extra: list[str] = ()) -> list[dict]:
    """Slices of `hl-<n>`: endpoints pod-0..pod-(n-1), plus `extra` addresses (propagation tests)."""
    eps = [(f"pod-{k}", headless_ip(n, k)) for k in range(n)]
    eps += [(f"extra-{k}", ip) for k, ip in enumerate(extra)]
    return [endpoint_slice(HEADLESS_NS, f"hl-{n}-{CLUSTER}-{s // SLICE_MAX}", f"hl-{n}", CLUSTER,
                           [endpoint([ip], host) for host, ip in eps[s : s + SLICE_MAX]])
            for s in range(0, max(len(eps), 1), SLICE_MAX)]


def objects(spec: Spec, start: int = 0) -> Iterator[dict]:
    """Every object of `spec` (imports from index `start` on; namespaces and headless always)."""
    if start == 0:
        for ns in spec.namespace_names():
            yield namespace_obj(ns)
        for n in spec.headless:
            yield headless_import_obj(n)
            yield from headless_slice_objs(n)
    for i in range(start, spec.imports):
        yield import_obj(spec, i)
        yield slice_obj(spec, i)


def write_manifests(spec: Spec, path: Path) -> Path:
    """All objects as one JSON `List` (the manifests source reads JSON much faster than YAML)."""
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects(spec))}))
    return path


# --------------------------------------------------------------------------- Knot


def records(spec: Spec) -> Iterator[tuple[str, str, str]]:
    """(owner, type, data) of every record mcsdns and CoreDNS serve for `spec` (absolute names).

    The Knot zone (`write_zone`) and the answer checker (benchmarks/checker.py) are both made from
    this, so they cannot disagree. SRV weights are as CoreDNS computes them (100 / records).
    (The differential in tests/compat checks that mcsdns answers exactly as CoreDNS; the answer
    checker then checks every server, CoreDNS included, against this.)
    """
    for i in range(spec.imports):
        owner = svc_name(spec, i)
        yield owner, "A", vip4(i)
        if vip6(i):
            yield owner, "AAAA", vip6(i)
        # CoreDNS makes one SRV per VIP (the same target) and weighs them 100 / count, then drops
        # the duplicate: a dual-stack service's one SRV has weight 50.
        weight = 100 // (2 if vip6(i) else 1)
        yield owner, "SRV", f"0 {weight} 80 {owner}."
        yield f"_http._tcp.{owner}", "SRV", f"0 {weight} 80 {owner}."
        for k in range(spec.endpoints):
            ip = endpoint_ip(i, k, spec.endpoints)
            yield f"{dashed(ip)}.{CLUSTER}.{owner}", "A", ip
    for n in spec.headless:
        owner = headless_name(n)
        weight = max(1, 100 // max(n, 1))
        for k in range(n):
            ip = headless_ip(n, k)
            target = f"pod-{k}.{CLUSTER}.{owner}"
            yield owner, "A", ip
            yield target, "A", ip
            yield owner, "SRV", f"0 {weight} 80 {target}."
            yield f"_http._tcp.{owner}", "SRV", f"0 {weight} 80 {target}."


def write_zone(spec: Spec, path: Path) -> Path:
    """The records of `records(spec)` as a static zone file for Knot (same TTLs; Knot adds the SRV
    targets' addresses as additional records by itself)."""
    ttl = TTL
    lines = [
        f"$ORIGIN {ZONE}.",
        f"$TTL {ttl}",
        f"@ {ttl} IN SOA ns.dns.{ZONE}. hostmaster.{ZONE}. 1 7200 1800 86400 {ttl}",
        f"@ IN NS ns.dns.{ZONE}.",
        "ns.dns IN A 127.0.0.1",
        "dns-version IN TXT \"1.1.0\"",
    ]
    lines += [f"{owner}. IN {rdtype} {data}" for owner, rdtype, data in records(spec)]
    path.write_text("\n".join(lines) + "\n")
    return path
