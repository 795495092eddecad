"""DNS-SD browsing (RFC 6763) of the imported services: opt-in with `--dns-sd` (decision 13).

With the flag, the table also holds, per zone Z:

    b._dns-sd._udp.Z                     PTR  <ns>.svc.Z                 each namespace with imports (section 11)
    _services._dns-sd._udp.<ns>.svc.Z    PTR  _<port>._<proto>.<ns>.svc.Z  each named port there (section 9)
    _<port>._<proto>.<ns>.svc.Z          PTR  <svc>._<port>._<proto>.<ns>.svc.Z  each service with it (section 4)
    <svc>._<port>._<proto>.<ns>.svc.Z    SRV  0 0 <port> <svc>.<ns>.svc.Z  and an empty TXT (section 6.1)

A service offers `_<port>._<proto>` when its own `_<port>._<proto>.<svc>.<ns>.svc.Z`
has entries (compile.service_entries, the zone logic's own grouping): the
import's ports and IPs for ClusterSetIP, the ready endpoints' ports for Headless.
Every such name exists: other types get NODATA (the resolver asks `exists`).
None of these names can collide with CoreDNS's: a service name is a DNS label
without `_`, so without the flag they stay NXDOMAIN, exactly as CoreDNS answers.

`dnssd_answers` is pure (no I/O); `DnsSd` keeps their compiled wire bytes in the
table, rebuilt per namespace when the store reports a change there, never per
query.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Iterable

from . import compile as zone
from .compile import Answer, Record, Service
from .wire import encode_labels

if TYPE_CHECKING:
    from .table import Table

PTR = 12
BROWSE = ("b", "_dns-sd", "_udp")
SERVICES = ("_services", "_dns-sd", "_udp")
# Every name gets these types compiled (the answer, or NODATA); other types: the resolver's `exists`.
TYPES = (zone.A, zone.AAAA, zone.SRV, zone.TXT, PTR)

Compiled = tuple[tuple[str, ...], int, Answer]  # labels left of the zone, qtype, answer


def offered(svc: Service) -> dict[tuple[str, str], tuple[int, ...]]:
    """(port name, protocol), lower-cased -> the port numbers, for each `_<port>._<proto>` with entries."""
    _, by_port = zone.service_entries(svc)
    out = {}
    for (name, protocol), (entries, _exists) in by_port.items():
        if not name or not protocol or len(name) >= 63 or len(protocol) >= 63:
            continue  # no such DNS name (compile.service_names makes none either)
        ports = tuple(sorted({e.port for e in entries if e.port != -1}))
        if ports:
            out[(name, protocol)] = ports
    return out


def namespace_answers(namespace: str, services: Iterable[Service], ttl: int) -> list[Compiled]:
    """Every DNS-SD name of one namespace and what each type gets."""
    base = (namespace, "svc")
    instances: dict[tuple[str, str], list[tuple[str, tuple[int, ...]]]] = {}
    for svc in services:
        for key, ports in offered(svc).items():
            instances.setdefault(key, []).append((svc.imp.name, ports))
    out: list[Compiled] = []
    kinds = [(f"_{name}", f"_{protocol}") for name, protocol in sorted(instances)]
    out += _named(SERVICES + base, PTR, tuple(Record(None, PTR, ttl, kind + base) for kind in kinds))
    for (name, protocol), members in sorted(instances.items()):
        kind = (f"_{name}", f"_{protocol}") + base
        members.sort()
        out += _named(kind, PTR, tuple(Record(None, PTR, ttl, (svc,) + kind) for svc, _ in members))
        for svc, ports in members:
            srv = tuple(Record(None, zone.SRV, ttl, (0, 0, port, (svc,) + base)) for port in ports)
            out += _named((svc,) + kind, zone.SRV, srv, (zone.TXT, (Record(None, zone.TXT, ttl, ""),)))
    return out


def browse_answers(namespaces: Iterable[str], ttl: int) -> list[Compiled]:
    """`b._dns-sd._udp.Z`: one PTR per namespace with imports (the browsing domains)."""
    return _named(BROWSE, PTR, tuple(Record(None, PTR, ttl, (ns, "svc")) for ns in sorted(namespaces)))


def _named(labels: tuple[str, ...], qtype: int, records: tuple[Record, ...],
           extra: tuple[int, tuple[Record, ...]] | None = None) -> list[Compiled]:  # fmt: skip
    """(labels, type, answer) for each of TYPES: `records` for `qtype` (and `extra`), NODATA for the rest."""
    out = []
    for t in TYPES:
        recs = records if t == qtype else extra[1] if extra is not None and t == extra[0] else ()
        out.append((labels, t, Answer(zone.NOERROR, recs) if recs else zone.NODATA))
    return out


class DnsSd:
    """The DNS-SD part of a table: compiled when the store changes, per namespace."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.by_ns: dict[str, set[str]] = {}  # namespace -> names of its imports
        self.owned: dict[str, list[bytes]] = {}  # namespace ("" = the browse name) -> table keys
        self.names: set[bytes] = set()  # lower-cased wire names that exist
        self.listed: dict[str, frozenset[tuple[str, ...]]] = {}  # namespace -> its names (labels), for /explain
        self._browsed: tuple[str, ...] | None = None

    def full(self) -> None:
        """Compile everything (the initial sync)."""
        self.by_ns = {}
        for ns, name in self.table.store.imports:
            self.by_ns.setdefault(ns, set()).add(name)
        for ns in list(self.by_ns):
            self._compile_namespace(ns)
        self._compile_browse()

    def update(self, services: Iterable[tuple[str, str]], namespaces: Iterable[str]) -> None:
        """Recompile the namespaces whose services (or existence) changed."""
        imports = self.table.store.imports
        touched = set(namespaces)
        for ns, name in services:
            touched.add(ns)
            if (ns, name) in imports:
                self.by_ns.setdefault(ns, set()).add(name)
            elif ns in self.by_ns:
                self.by_ns[ns].discard(name)
                if not self.by_ns[ns]:
                    del self.by_ns[ns]
        for ns in touched:
            self._compile_namespace(ns)
        self._compile_browse()

    def exists(self, lname: bytes) -> bool:
        return lname in self.names

    def explain(self, labels: tuple[str, ...]) -> str | None:
        """The /explain reason for a DNS-SD name (labels lower-cased, left of the zone), else None."""
        if labels == BROWSE:
            return "DNS-SD browsing (--dns-sd): the browse domain list, one PTR per namespace with ServiceImports"
        if len(labels) >= 2 and labels[-1] == "svc" and labels in self.listed.get(labels[-2], ()):
            ns = labels[-2]
            if labels[:3] == SERVICES:
                return f"DNS-SD browsing (--dns-sd): the service types of namespace {ns}, one PTR per named port of its imports"
            if len(labels) == 4:
                return f"DNS-SD browsing (--dns-sd): the instances of {labels[0]}.{labels[1]} in {ns}, one PTR per import with that port"
            return (f"DNS-SD browsing (--dns-sd): instance of ServiceImport {ns}/{labels[0]} (SRV to its service name "
                    "and port, empty TXT)")  # fmt: skip
        return None

    # ----------------------------------------------------------------- compiling

    def _exposed(self) -> list[str]:
        return [ns for ns in self.by_ns if self.table.namespace_exposed(ns)]

    def _compile_browse(self) -> None:
        browsed = tuple(sorted(self._exposed()))
        if browsed != self._browsed:
            self._browsed = browsed
            self._swap("", browse_answers(browsed, self.table.ttl))

    def _compile_namespace(self, ns: str) -> None:
        if ns not in self.by_ns or not self.table.namespace_exposed(ns):
            self._swap(ns, [])
            return
        services = [s for s in (self.table.service(ns, name) for name in sorted(self.by_ns[ns])) if s is not None]
        self._swap(ns, namespace_answers(ns, services, self.table.ttl))

    def _swap(self, owner: str, compiled: list[Compiled]) -> None:
        table = self.table
        for key in self.owned.pop(owner, ()):
            table.answers.pop(key, None)
            self.names.discard(key[:-4])
        keys: list[bytes] = []
        listed: set[tuple[str, ...]] = set()
        for labels, qtype, ans in compiled:
            listed.add(labels)
            rel = encode_labels(labels)
            for zwire in table.zones:
                lname = rel + zwire
                if len(lname) > 255:
                    continue  # four long labels: no such DNS name
                key = lname + struct.pack(">HH", qtype, 1)
                table.answers[key] = table.render(lname, len(zwire), ans)
                keys.append(key)
                self.names.add(lname)
        self.owned[owner] = keys
        if owner:
            self.listed[owner] = frozenset(listed)
            if not listed:
                del self.listed[owner]

