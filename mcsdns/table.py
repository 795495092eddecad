"""The record table: compiled wire answers keyed by the question's bytes.

The key is the lower-cased question as it sits in the packet (name, type,
class), so the hot path is `answers.get(packet[12:qend].lower())`. Each
service's keys are recompiled together when the store reports a change to
it, and swapped in as a group; the event loop is the only writer and reader,
so a query never sees half a service.

The table is also the `ZoneView` the zone logic reads for names it did not
compile, so compiled and per-query answers come from the same objects.

Nothing is compiled before the store's initial sync: the first lists of a
kube source arrive kind by kind (ServiceImports, then EndpointSlices would
compile every service twice), so their changes are collected and every
service is compiled once when the store reports the sync. Until then queries
take the zone logic, which answers the same from the same objects. After the
sync every change is compiled as it arrives.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from . import compile as zone
from .compile import Service
from .store import Changes, ServiceKey, Store
from .wire import AA, Body, Renderer, encode_labels, soa_record

if TYPE_CHECKING:
    from .dnssd import DnsSd

log = logging.getLogger(__name__)

QTYPE_IN = {t: struct.pack(">HH", t, 1) for t in zone.COMPILED_TYPES}
# Per service, how many answers computed on first query (per-endpoint names, odd
# spellings) are kept; bounds memory against clients walking random names.
LAZY_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class TableConfig:
    zones: tuple[str, ...]  # lower case, no trailing dot
    ttl: int
    namespaces: frozenset[str] | None  # exposed namespaces; None = all
    ns_addresses: tuple[str, ...]


class Table:
    def __init__(self, config: TableConfig, store: Store) -> None:
        self.config = config
        self.store = store
        self.ttl = config.ttl
        self.zones = tuple(encode_labels(z.split(".")) + b"\x00" for z in config.zones)
        self.answers: dict[bytes, Body] = {}
        self.owned: dict[ServiceKey, list[bytes]] = {}
        self.serial = int(time.time())
        self.generation = 0
        self._soa: dict[int, bytes] = {}
        self._negative: dict[tuple[int, int], Body] = {}
        self.on_programmed: Callable[[ServiceKey, str | None, bool], None] | None = None
        self.dnssd: "DnsSd | None" = None  # --dns-sd: compiled along with the services it lists
        # Until the initial sync nothing is compiled (see the module docstring); this keeps the
        # trigger times of the changes held back, for the programming-latency metric. None after.
        self._deferred: dict[ServiceKey, str] | None = None if store.synced_all else {}
        self._compile_apex()

    # ----------------------------------------------------------------- ZoneView

    def namespace_exposed(self, namespace: str) -> bool:
        allowed = self.config.namespaces
        return namespace in self.store.namespaces and (allowed is None or namespace in allowed)

    def service(self, namespace: str, name: str) -> Service | None:
        imp = self.store.imports.get((namespace, name))
        if imp is None:
            return None
        return Service(imp, self.store.service_slices((namespace, name)))

    @property
    def synced(self) -> bool:
        return self.store.synced_all

    # ----------------------------------------------------------------- SOA

    def soa(self, zone_at: int) -> bytes:
        """The zone SOA as authority, its owner pointing at the zone inside the question."""
        rec = self._soa.get(zone_at)
        if rec is None:
            rec = self._soa[zone_at] = soa_record(zone_at, min(self.ttl, 300), self.ttl, self.serial & 0xFFFFFFFF)
        return rec

    def negative(self, rcode: int, zone_at: int) -> Body:
        """NODATA/NXDOMAIN/SERVFAIL bodies: shared, since only the zone position varies."""
        body = self._negative.get((rcode, zone_at))
        if body is None:
            body = self._negative[(rcode, zone_at)] = Body(AA | rcode, 0, 0, 0, b"", (), (), True, zone_at)
        return body

    def render(self, lname: bytes, zone_len: int, ans: zone.Answer) -> Body:
        if ans.soa and not ans.answer and not ans.additional:
            return self.negative(ans.rcode, 12 + len(lname) - zone_len)
        return Renderer(lname, zone_len).render(ans, min(self.ttl, 300), self.ttl, self.serial & 0xFFFFFFFF)

    # ----------------------------------------------------------------- compiling

    def on_change(self, changes: Changes) -> None:
        """Store listener: recompile what changed and bump the serial (after the initial sync)."""
        if self._deferred is not None:
            for key, trigger in changes.triggers.items():
                if trigger is not None:
                    self._deferred.setdefault(key, trigger)
            if self.store.synced_all:
                triggers, self._deferred = self._deferred, None
                self._compile_everything(triggers)
            return
        services = set(changes.services)
        for ns in changes.namespaces:
            services.update(k for k in self.store.imports if k[0] == ns)
            services.update(k for k in self.owned if k[0] == ns)
        for key in services:
            self.compile(key)
            if self.on_programmed is not None:
                imp = self.store.imports.get(key)
                self.on_programmed(key, changes.triggers.get(key), bool(imp and imp.headless))
        if self.dnssd is not None:
            self.dnssd.update(services, changes.namespaces)
        self.bump()

    def _compile_everything(self, triggers: dict[ServiceKey, str]) -> None:
        """The initial sync: compile every service once (nothing was compiled before)."""
        started = time.monotonic()
        for key in list(self.store.imports):
            self.compile(key)
        if self.on_programmed is not None:
            for key, trigger in triggers.items():
                imp = self.store.imports.get(key)
                self.on_programmed(key, trigger, bool(imp and imp.headless))
        if self.dnssd is not None:
            self.dnssd.full()
        self.bump()
        log.info("synced: compiled %d services in %.2fs", len(self.store.imports), time.monotonic() - started)

    def bump(self) -> None:
        self.generation += 1
        self.serial = max(self.serial + 1, int(time.time()))
        self._soa.clear()
        # The apex SOA answer carries the serial in its body.
        self._compile_apex()

    def compile(self, key: ServiceKey) -> None:
        """Swap in one service's compiled answers (or remove them)."""
        old = self.owned.pop(key, [])
        for k in old:
            self.answers.pop(k, None)
        svc = self.service(*key)
        if svc is None or not self.namespace_exposed(key[0]):
            return
        keys: list[bytes] = []
        # Per-endpoint names (10 per service and more, rarely asked for a ClusterSetIP service)
        # are compiled on their first query (Resolver -> remember): that keeps the table, and
        # so memory and compile time per change, proportional to services, not endpoints.
        # compile_service lists the service's entries once and groups them by name, so this
        # costs O(entries + answers), not O(names x entries).
        answers = zone.compile_service(svc, self, self.ttl, self.config.ns_addresses, endpoint_names=False)
        last: tuple[str, ...] | None = None
        rel = b""
        for labels, qtype, ans in answers:
            if ans.nxdomain:
                continue  # negative answers depend on sync state: decided per query
            if labels is not last:
                last, rel = labels, encode_labels(labels)
            for zwire in self.zones:
                lname = rel + zwire
                k = lname + QTYPE_IN[qtype]
                self.answers[k] = self.render(lname, len(zwire), ans)
                keys.append(k)
        self.owned[key] = keys

    def remember(self, key: ServiceKey, k: bytes, body: Body) -> None:
        """Keep an answer computed on first query (per-endpoint names), bounded per service."""
        keys = self.owned.get(key)
        if keys is not None and len(keys) < LAZY_LIMIT:
            self.answers[k] = body
            keys.append(k)

    def _compile_apex(self) -> None:
        for zwire in self.zones:
            k = zwire + struct.pack(">HH", zone.SOA, 1)
            self.answers[k] = self.render(zwire, len(zwire), zone.Answer(zone.NOERROR, apex_soa=True))

    # ----------------------------------------------------------------- zones

    def zone_of(self, lname: bytes) -> bytes | None:
        """The longest served zone containing `lname` (zones are few: a scan is fine)."""
        best = None
        for zwire in self.zones:
            if lname.endswith(zwire) and (best is None or len(zwire) > len(best)):
                start = len(lname) - len(zwire)
                if start == 0 or _label_boundary(lname, start):
                    best = zwire
        return best


def _label_boundary(lname: bytes, at: int) -> bool:
    i = 0
    while i < at:
        i += lname[i] + 1
    return i == at
