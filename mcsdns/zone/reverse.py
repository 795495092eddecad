"""Reverse zones (`--reverse-cidr`): PTR records for clusterset addresses, as pure logic.

KEP-1645's DNS specification says a PTR record "must exist" for a ClusterSetIP and for a ready
headless endpoint address; CoreDNS's multicluster option serves none (its reverse lookups only
know cluster-local Services). With `--reverse-cidr CIDR` the server is authoritative for the
reverse zones covering CIDR and answers:

* PTR `<svc>.<ns>.svc.<zone>` for every ClusterSetIP, and `<host>.<cluster>.<svc>.<ns>.svc.<zone>`
  for every ready endpoint address of a headless service (slices without a cluster id make no
  per-endpoint name, decision 4, so no PTR either); an address with several names answers all;
* NXDOMAIN with the reverse zone's SOA for every other address of the CIDR, NODATA for the
  names above an address that exists (`2.1.10.in-addr.arpa`) and for other types;
* SOA and NS at the zone apex, in the shape the forward zone uses (`ns.dns.<zone>`, CoreDNS's).

A CIDR that does not end on an octet (IPv4) or nibble (IPv6) boundary is split into the zones
that do: a /20 becomes 16 /24 zones (`0.16.172.in-addr.arpa` ... `15.16.172.in-addr.arpa`), so
every name in those zones is an address of the CIDR and every address outside the CIDRs stays
with the upstream, forwarded as without the flag.

This module only computes: zone names, the PTR index, and the answer for one question. The
table (table.py) compiles the PTR answers when services change; resolve.py calls `answer` for
the rest.
"""

from __future__ import annotations

import bisect
import ipaddress
from typing import Iterable

from .compiler import NAME_ERROR, NODATA, NS_NAME, Service
from .vocab import AAAA, NOERROR, NS, PTR, SOA, A, Absolute, Answer, Record

MAX_ZONES = 256  # reverse zones in all (one CIDR makes at most 128: a /17 or a /25)
V4_SUFFIX = ("in-addr", "arpa")
V6_SUFFIX = ("ip6", "arpa")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Labels = tuple[str, ...]


class ReverseError(ValueError):
    """A CIDR that cannot be served as reverse zones; the message says why."""


# --------------------------------------------------------------------------- zones


def parse_cidr(text: str) -> Network:
    """`10.96.0.0/12` -> the network; ReverseError if it is none or has host bits set."""
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise ReverseError(f"{text!r} is not a CIDR ({exc})") from None


def zone_networks(cidrs: Iterable[str]) -> list[Network]:
    """The networks on octet/nibble boundaries that cover `cidrs`, without ones inside another."""
    out: list[Network] = []
    for text in cidrs:
        net = parse_cidr(text)
        step = 8 if net.version == 4 else 4
        boundary = -(-net.prefixlen // step) * step
        out.extend(net.subnets(new_prefix=boundary))
    kept = [n for n in out if not any(o != n and o.version == n.version and n.subnet_of(o) for o in out)]  # type: ignore[arg-type]
    unique = list(dict.fromkeys(kept))
    if len(unique) > MAX_ZONES:
        raise ReverseError(f"{len(unique)} reverse zones in all (more than {MAX_ZONES})")
    return unique


def zone_labels(net: Network) -> Labels:
    """The reverse zone of a network on an octet/nibble boundary: 10.96.0.0/16 -> 96.10.in-addr.arpa."""
    if net.version == 4:
        octets = net.network_address.packed[: net.prefixlen // 8]
        return tuple(str(b) for b in reversed(octets)) + V4_SUFFIX
    nibbles = net.network_address.packed.hex()[: net.prefixlen // 4]
    return tuple(reversed(nibbles)) + V6_SUFFIX


def reverse_zones(cidrs: Iterable[str]) -> tuple[str, ...]:
    """The reverse zone names (lower case, no trailing dot) for `--reverse-cidr` values."""
    return tuple(".".join(zone_labels(n)) for n in zone_networks(cidrs))


def address_key(ip: str) -> bytes | None:
    """The packed address a PTR name stands for (IPv4-mapped IPv6 is IPv4, as A records render it)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.packed
    return addr.packed


def pointer_labels(key: bytes) -> Labels:
    """The reverse name (absolute labels, no root) of a packed address."""
    if len(key) == 4:
        return tuple(str(b) for b in reversed(key)) + V4_SUFFIX
    return tuple(reversed(key.hex())) + V6_SUFFIX


def parse_pointer(labels: Labels) -> tuple[int, bytes, int] | None:
    """A name under in-addr.arpa/ip6.arpa -> (version, digits as bytes, how many), or None if invalid.

    The digits are octets (IPv4) or nibbles (IPv6), most significant first; 4 or 32 of them
    name one address, fewer name the range above it. Case-insensitive (the caller lower-cases).
    """
    if labels[-2:] == V4_SUFFIX:
        digits = labels[:-2]
        if len(digits) > 4 or not all(d.isdigit() and d.isascii() and str(int(d)) == d and int(d) < 256 for d in digits):
            return None
        return 4, bytes(int(d) for d in reversed(digits)), len(digits)
    if labels[-2:] == V6_SUFFIX:
        digits = labels[:-2]
        if len(digits) > 32 or not all(len(d) == 1 and d in "0123456789abcdef" for d in digits):
            return None
        return 6, bytes(int(d, 16) for d in reversed(digits)), len(digits)
    return None


# --------------------------------------------------------------------------- the index


def service_pointers(svc: Service) -> dict[bytes, list[Labels]]:
    """Packed address -> the names (relative to the forward zone) one service gives it."""
    imp = svc.imp
    base = (imp.name, imp.namespace, "svc")
    out: dict[bytes, list[Labels]] = {}
    if not imp.headless:
        for ip in imp.ips:
            key = address_key(ip)
            if key is not None:
                out.setdefault(key, []).append(base)
        return out
    for sl in svc.slices:
        if sl.cluster is None:
            continue  # no per-endpoint name without a cluster id (decision 4)
        cluster = tuple(sl.cluster.split("."))
        for addr in sl.addresses:
            key = address_key(addr.ip)
            if key is not None:
                name = (addr.hostname, *cluster) + base
                names = out.setdefault(key, [])
                if name not in names:
                    names.append(name)
    return out


class PtrIndex:
    """Which names each address of the reverse zones has, service by service.

    `set_service` replaces one service's contribution and returns the addresses whose PTR
    answer changed, so the table recompiles those and nothing else. The packed addresses are
    also kept sorted per family, so "is there an address below this name" is one bisect.
    """

    def __init__(self, networks: list[Network]) -> None:
        self.networks = networks
        self.names: dict[bytes, dict[tuple[str, str], list[Labels]]] = {}
        self.of_service: dict[tuple[str, str], tuple[bytes, ...]] = {}
        self._sorted: dict[int, list[bytes]] = {4: [], 16: []}  # by address length: IPv4, IPv6

    def covers(self, key: bytes) -> bool:
        addr = ipaddress.ip_address(key)
        return any(addr.version == n.version and addr in n for n in self.networks)

    def set_service(self, service: tuple[str, str], pointers: dict[bytes, list[Labels]]) -> set[bytes]:
        affected: set[bytes] = set()
        for key in self.of_service.pop(service, ()):
            by_service = self.names.get(key)
            if by_service is not None and by_service.pop(service, None) is not None:
                affected.add(key)
                if not by_service:
                    del self.names[key]
                    keys = self._sorted[len(key)]
                    keys.pop(bisect.bisect_left(keys, key))
        kept = []
        for key, names in pointers.items():
            if not self.covers(key):
                continue
            by_service = self.names.get(key)
            if by_service is None:
                by_service = self.names[key] = {}
                bisect.insort(self._sorted[len(key)], key)
            by_service[service] = names
            kept.append(key)
            affected.add(key)
        if kept:
            self.of_service[service] = tuple(kept)
        return affected

    def addresses(self) -> list[bytes]:
        """Every indexed address (packed), IPv4 first, each family in order."""
        return self._sorted[4] + self._sorted[16]

    def targets(self, key: bytes) -> list[Labels]:
        """Every name of the address (relative to the forward zone), by service, without repeats."""
        out: list[Labels] = []
        for service in sorted(self.names.get(key, {})):
            for name in self.names[key][service]:
                if name not in out:
                    out.append(name)
        return out

    def below(self, version: int, digits: bytes, count: int) -> bool:
        """Whether an indexed address starts with `digits` (octets or nibbles, `count` of them)."""
        if version == 4:
            low = digits + b"\x00" * (4 - count)
            high = digits + b"\xff" * (4 - count)
            keys = self._sorted[4]
        else:
            text = digits.hex()[1::2]  # one hex digit per nibble
            low = bytes.fromhex((text + "0" * (32 - count)))
            high = bytes.fromhex((text + "f" * (32 - count)))
            keys = self._sorted[16]
        i = bisect.bisect_left(keys, low)
        return i < len(keys) and keys[i] <= high


def ptr_answer(targets: list[Labels], forward_zones: tuple[Labels, ...], ttl: int) -> Answer:
    """The PTR answer of an address: each of its names in each forward zone."""
    return Answer(NOERROR, tuple(Record(None, PTR, ttl, Absolute(name + zone)) for zone in forward_zones for name in targets))


def zone_records(zone: Labels, index: PtrIndex, forward_zones: tuple[Labels, ...], ttl: int,
                 ns_addresses: tuple[str, ...]) -> list[tuple[Labels, Record]]:
    """Every record of the reverse `zone` but its SOA, as (owner labels left of the zone, record), the
    addresses in order: the apex NS, the addresses of `ns.dns` below it (as `answer` gives them), and
    each address's PTR records. What a zone transfer of it sends, taken at once (a snapshot)."""
    out: list[tuple[Labels, Record]] = [((), Record(None, NS, ttl, NS_NAME))]
    out += [(NS_NAME, Record(None, AAAA if ":" in ip else A, ttl, ip)) for ip in ns_addresses]
    n = len(zone)
    for key in index.addresses():
        labels = pointer_labels(key)
        if labels[-n:] == zone:
            out += [(labels[:-n], rec) for rec in ptr_answer(index.targets(key), forward_zones, ttl).answer]
    return out


# --------------------------------------------------------------------------- the answer


def answer(labels: Labels, zone: Labels, qtype: int, index: PtrIndex, forward_zones: tuple[Labels, ...],
           ttl: int, ns_addresses: tuple[str, ...]) -> Answer:
    """The answer to `labels` (lower-cased, left of the reverse `zone`) for `qtype`, before sync policy."""
    if not labels and qtype == SOA:
        return Answer(NOERROR, apex_soa=True)
    if not labels and qtype == NS:
        return Answer(
            NOERROR,
            (Record(None, NS, ttl, NS_NAME),),
            tuple(Record(NS_NAME, AAAA if ":" in ip else A, ttl, ip) for ip in ns_addresses),
        )
    if labels == NS_NAME:  # the apex NS target lives in the zone, as in the forward zone
        if qtype in (A, AAAA):
            records = tuple(Record(None, qtype, ttl, ip) for ip in ns_addresses if (":" in ip) == (qtype == AAAA))
            return Answer(NOERROR, records) if records else NODATA
        return NODATA
    # The apex always exists (NODATA at worst): a /25 is 128 zones of one address each.
    missing = NODATA if not labels else NAME_ERROR
    parsed = parse_pointer(labels + zone)
    if parsed is None:
        return missing
    version, digits, count = parsed
    if count == (4 if version == 4 else 32):
        targets = index.targets(digits if version == 4 else bytes.fromhex(digits.hex()[1::2]))
        if not targets:
            return missing
        return ptr_answer(targets, forward_zones, ttl) if qtype == PTR else NODATA
    return NODATA if index.below(version, digits, count) else missing
