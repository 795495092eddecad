"""DNS-SD browsing (RFC 6763) of the imported services: opt-in with `--dns-sd` (decision 13).

With the flag, the table also holds, per zone Z:

    b._dns-sd._udp.Z                     PTR  <ns>.svc.Z                 each namespace with imports (section 11)
    _services._dns-sd._udp.<ns>.svc.Z    PTR  _<port>._<proto>.<ns>.svc.Z  each named port there (section 9)
    _<port>._<proto>.<ns>.svc.Z          PTR  <svc>._<port>._<proto>.<ns>.svc.Z  each service with it (section 4)
    <svc>._<port>._<proto>.<ns>.svc.Z    SRV  0 0 <port> <svc>.<ns>.svc.Z  and an empty TXT (section 6.1);
                                         the SRV with <svc>.<ns>.svc.Z's A/AAAA in Additional (section 12.2)

A service offers `_<port>._<proto>` when its own `_<port>._<proto>.<svc>.<ns>.svc.Z`
has entries (compiler.service_entries, the zone logic's own grouping): the
import's ports and IPs for ClusterSetIP, the ready endpoints' ports for Headless.
Every such name exists: other types get NODATA (the resolver asks `exists`).
None of these names can collide with CoreDNS's: a service name is a DNS label
without `_`, so without the flag they stay NXDOMAIN, exactly as CoreDNS answers.

The answer functions are pure (no I/O); `DnsSd` keeps their compiled wire bytes
in the table, rebuilt when the store reports a change, never per query. A change
to one service recompiles that service's instances, the PTR lists of the kinds it
offered or offers, and its namespace's list of kinds: not the whole namespace.

These names are records of the zone like the services' own, so a zone transfer
(`--transfer-to`) and `mcsdns zone --dns-sd` hold them too (`snapshot`), and the
IXFR journal gets the records each change deleted and added (`drain`): a secondary
answers the browsing names as mcsdns does, and follows them by IXFR.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Hashable, Iterable

from ..store import ServiceKey
from . import compiler, vocab
from .compiler import Service
from .vocab import PTR, Answer, Owned, Record
from .wire import encode_labels

if TYPE_CHECKING:
    from .table import Table

BROWSE = ("b", "_dns-sd", "_udp")
SERVICES = ("_services", "_dns-sd", "_udp")
# Every name gets these types compiled (the answer, or NODATA); other types: the resolver's `exists`.
TYPES = (vocab.A, vocab.AAAA, vocab.SRV, vocab.TXT, PTR)

Compiled = tuple[tuple[str, ...], int, Answer]  # labels left of the zone, qtype, answer
Kind = tuple[str, str]  # (port name, protocol), lower-cased, without the underscores


def offered(svc: Service) -> dict[Kind, tuple[int, ...]]:
    """The kinds a service offers and their port numbers: each `_<port>._<proto>` of its own with entries."""
    _, by_port = compiler.service_entries(svc)
    out = {}
    for (name, protocol), (entries, _exists) in by_port.items():
        if not name or not protocol or len(name) >= 63 or len(protocol) >= 63:
            continue  # no such DNS name (compiler.service_names makes none either)
        ports = tuple(sorted({e.port for e in entries if e.port != -1}))
        if ports:
            out[(name, protocol)] = ports
    return out


def kind_labels(namespace: str, kind: Kind) -> tuple[str, ...]:
    return (f"_{kind[0]}", f"_{kind[1]}", namespace, "svc")


def instance_answers(namespace: str, service: str, kind: Kind, ports: tuple[int, ...], ttl: int,
                     glue: tuple[Record, ...] = ()) -> list[Compiled]:
    """`<svc>._<port>._<proto>.<ns>.svc`: SRV to the service name with each port (and `glue`, the
    target's addresses, in Additional), an empty TXT."""
    srv = tuple(Record(None, vocab.SRV, ttl, (0, 0, port, (service, namespace, "svc"))) for port in ports)
    return _named((service,) + kind_labels(namespace, kind), vocab.SRV, srv, (vocab.TXT, (Record(None, vocab.TXT, ttl, ""),)),
                  additional=glue)


def instance_glue(svc: Service, ttl: int, ports: int) -> tuple[Record, ...]:
    """The A and AAAA records of an instance's SRV target, the service name: what a browser connects to
    next, so RFC 6763 12.2 asks for them in Additional (as CoreDNS's SRV answers carry their glue).
    The service name's own addresses (ClusterSetIP: spec.ips; Headless: every ready endpoint), at
    most as many as a reply can carry beside the `ports` SRV records."""
    entries = compiler.service_entries(svc)[0][0]
    target = (svc.imp.name, svc.imp.namespace, "svc")
    glue = tuple(Record(target, r.rtype, r.ttl, r.data) for v6 in (False, True) for r in compiler.address_records(entries, v6, ttl))
    return glue[: compiler.REPLY_RECORDS_MAX - ports]


def kind_answers(namespace: str, kind: Kind, services: Iterable[str], ttl: int) -> list[Compiled]:
    """`_<port>._<proto>.<ns>.svc`: one PTR per instance."""
    labels = kind_labels(namespace, kind)
    return _named(labels, PTR, tuple(Record(None, PTR, ttl, (svc,) + labels) for svc in sorted(services)))


def services_answers(namespace: str, kinds: Iterable[Kind], ttl: int) -> list[Compiled]:
    """`_services._dns-sd._udp.<ns>.svc`: one PTR per kind offered in the namespace."""
    return _named(SERVICES + (namespace, "svc"),
                  PTR, tuple(Record(None, PTR, ttl, kind_labels(namespace, k)) for k in sorted(kinds)))  # fmt: skip


def browse_answers(namespaces: Iterable[str], ttl: int) -> list[Compiled]:
    """`b._dns-sd._udp.Z`: one PTR per namespace with imports (the browsing domains)."""
    return _named(BROWSE, PTR, tuple(Record(None, PTR, ttl, (ns, "svc")) for ns in sorted(namespaces)))


def _named(labels: tuple[str, ...], qtype: int, records: tuple[Record, ...],
           extra: tuple[int, tuple[Record, ...]] | None = None, additional: tuple[Record, ...] = ()) -> list[Compiled]:  # fmt: skip
    """(labels, type, answer) for each of TYPES: `records` (with `additional`) for `qtype`, and `extra`;
    NODATA for the rest."""
    out = []
    for t in TYPES:
        recs = records if t == qtype else extra[1] if extra is not None and t == extra[0] else ()
        more = additional if t == qtype else ()
        out.append((labels, t, Answer(vocab.NOERROR, recs, more) if recs else compiler.NODATA))
    return out


class DnsSd:
    """The DNS-SD part of a table: compiled when the store changes."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.by_ns: dict[str, set[str]] = {}  # namespace -> names of its imports
        self.offers: dict[ServiceKey, dict[Kind, tuple[int, ...]]] = {}  # what each served service offers
        self.glue: dict[ServiceKey, tuple[Record, ...]] = {}  # its instances' Additional: its addresses
        self.kinds: dict[str, dict[Kind, set[str]]] = {}  # namespace -> kind -> services offering it
        self.owned: dict[Hashable, list[bytes]] = {}  # what a compiled part put in the table
        self.names: set[bytes] = set()  # lower-cased wire names that exist
        self._browsed: tuple[str, ...] | None = None
        # Each part's records (its positive answers, owner labels left of the zone), replaced whole on a
        # change (never changed in place, so a snapshot may hold the tuples), and, while an IXFR journal
        # is kept, the records each part had before its first change since the journal last drained.
        self.records: dict[Hashable, tuple[Owned, ...]] = {}
        self._before: dict[Hashable, tuple[Owned, ...]] = {}

    def full(self) -> None:
        """Compile everything (the initial sync)."""
        self.update(list(self.table.store.imports), ())

    def update(self, services: Iterable[ServiceKey], namespaces: Iterable[str]) -> None:
        """Recompile what the changed services (and namespaces, whose exposure may have changed) touch."""
        imports = self.table.store.imports
        changed = set(services)
        for ns in namespaces:
            changed.update((ns, name) for name in self.by_ns.get(ns, ()))
        touched: dict[str, set[Kind]] = {}
        for key in changed:
            ns, name = key
            if key in imports:
                self.by_ns.setdefault(ns, set()).add(name)
            elif ns in self.by_ns:
                self.by_ns[ns].discard(name)
                if not self.by_ns[ns]:
                    del self.by_ns[ns]
            touched.setdefault(ns, set()).update(self._offer(key))
        for ns, kinds in touched.items():
            offering = self.kinds.get(ns, {})
            for kind in kinds:
                members = offering.get(kind)
                self._swap(("kind", ns, kind), kind_answers(ns, kind, members, self.table.ttl) if members else [])
            self._swap(("services", ns), services_answers(ns, offering, self.table.ttl) if offering else [])
        browsed = tuple(sorted(ns for ns in self.by_ns if self.table.namespace_exposed(ns)))
        if browsed != self._browsed:
            self._browsed = browsed
            self._swap(("browse",), browse_answers(browsed, self.table.ttl))

    def _offer(self, key: ServiceKey) -> set[Kind]:
        """Recompile one service's instances; the kinds whose instance lists change."""
        ns, name = key
        svc = self.table.service(ns, name)
        new = offered(svc) if svc is not None and self.table.namespace_exposed(ns) else {}
        old = self.offers.pop(key, {})
        glue = instance_glue(svc, self.table.ttl, max(len(p) for p in new.values())) if new and svc is not None else ()
        old_glue = self.glue.pop(key, ())
        if new:
            self.offers[key] = new
            self.glue[key] = glue
        offering = self.kinds.setdefault(ns, {})
        for kind in old.keys() - new.keys():
            offering[kind].discard(name)
            if not offering[kind]:
                del offering[kind]
        for kind in new.keys() - old.keys():
            offering.setdefault(kind, set()).add(name)
        if not offering:
            del self.kinds[ns]
        if new != old or glue != old_glue:  # the ports, or the addresses the instances' Additional holds
            self._swap(("instances", key),
                       [c for kind, ports in new.items() for c in instance_answers(ns, name, kind, ports, self.table.ttl, glue)])  # fmt: skip
        return old.keys() ^ new.keys()

    def exists(self, lname: bytes) -> bool:
        return lname in self.names

    def snapshot(self) -> list[tuple[Owned, ...]]:
        """Every DNS-SD record of the zone, as the parts' record tuples (a copy of the references: later
        changes replace tuples, so the snapshot keeps this serial's records), in no order. For a zone
        transfer: a copy of one reference per part, not of the records."""
        return list(self.records.values())

    def drain(self) -> tuple[list[Owned], list[Owned]]:
        """The records deleted and added since the last drain (the IXFR journal's entry for a change)."""
        deleted: list[Owned] = []
        added: list[Owned] = []
        for owner, old in self._before.items():
            new = self.records.get(owner, ())
            if old != new:
                gone, came = vocab.difference(old, new)
                deleted += gone
                added += came
        self._before = {}
        return deleted, added

    def explain(self, labels: tuple[str, ...]) -> str | None:
        """The /explain reason for a DNS-SD name (labels lower-cased, left of the zone), else None."""
        rel = encode_labels(labels) if all(0 < len(label) < 64 for label in labels) else None
        if rel is None or not any(rel + zwire in self.names for zwire in self.table.zones):
            return None
        if labels == BROWSE:
            return "DNS-SD browsing (--dns-sd): the browse domain list, one PTR per namespace with ServiceImports"
        ns = labels[-2]
        if labels[:3] == SERVICES:
            return f"DNS-SD browsing (--dns-sd): the service types of namespace {ns}, one PTR per named port of its imports"
        if len(labels) == 4:
            return f"DNS-SD browsing (--dns-sd): the instances of {labels[0]}.{labels[1]} in {ns}, one PTR per import with that port"
        return (f"DNS-SD browsing (--dns-sd): instance of ServiceImport {ns}/{labels[0]} (SRV to its service name "
                "and port, empty TXT)")  # fmt: skip

    def _swap(self, owner: Hashable, compiled: list[Compiled]) -> None:
        table = self.table
        records = tuple((labels, rec) for labels, _qtype, ans in compiled if ans.rcode == vocab.NOERROR
                        for rec in ans.answer)  # fmt: skip
        old = self.records.pop(owner, ())
        if records:
            self.records[owner] = records
        if table.journal is not None and owner not in self._before:
            self._before[owner] = old
        for key in self.owned.pop(owner, ()):
            table.answers.pop(key, None)
            self.names.discard(key[:-4])
        keys: list[bytes] = []
        for labels, qtype, ans in compiled:
            rel = encode_labels(labels)
            for zwire in table.zones:
                lname = rel + zwire
                if len(lname) > 255:
                    continue  # four long labels: no such DNS name
                key = lname + struct.pack(">HH", qtype, 1)
                table.answers[key] = table.render(lname, len(zwire), ans)
                keys.append(key)
                self.names.add(lname)
        if keys:
            self.owned[owner] = keys
