"""The IXFR journal (RFC 1995): what each change of the table did to the zone, kept for a while.

A secondary that holds serial S and asks IXFR gets, instead of the whole zone, the records
deleted and added since S. The journal records one entry per serial change (`Table.bump`):
the serial before and after, and the records that went and came (owner labels and record,
in no zone yet: an IXFR makes them names of the zone it asks for). It is
built from the services the change touched (the same set `Table.on_change` recompiles), so
a change costs O(records of the changed services), not O(zone): the journal keeps, for
every service in an exposed namespace, the `Service` it last saw (the store's objects are
frozen, so that is a reference, not a copy), and diffs that service's records before and
after (`zonefile.owned_records`, the records an AXFR holds for it, as plain tuples: only the
difference becomes wire records). With `--dns-sd` the browsing names' records a change touched
come from the DNS-SD part itself (`DnsSd.drain`), which keeps each list it replaced.

Bounded by bytes (the records' wire size, `--ixfr-journal-bytes`) and by age
(`--ixfr-journal-age`): the oldest entries go first. A change bigger than the whole bound
empties the journal. `since` answers an IXFR: the entries from the client's serial to ours,
condensed into one deletion and one addition (RFC 1995 allows it), or why it cannot:
`future` (newer than ours, RFC 1982), `purged` (a serial of this process's since its sync,
no longer kept) or `unknown` (any other: before this process's start, another replica's).
The transfer then falls back to the whole zone.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from dnslib import RR, DNSBuffer

from ..store import ServiceKey
from ..zone.compiler import Service
from ..zone.serial import SERIAL_MASK
from ..zone.table import Table
from ..zone.vocab import difference
from .zonefile import Owned, as_rr, owned_records

def serial_lt(a: int, b: int) -> bool:
    """a < b in RFC 1982 serial arithmetic (32 bits)."""
    return a != b and ((b - a) & SERIAL_MASK) < 0x80000000


RECENT_RECORDS = 100_000  # records of the last changed services kept, so the next change of each is diffed at once


@dataclass(slots=True)
class Entry:
    """One serial change: the records deleted and added (the same in every served zone but for the
    zone's own labels), and their wire size in the first zone."""

    before: int
    after: int
    at: float
    deleted: list[Owned] = field(default_factory=list)
    added: list[Owned] = field(default_factory=list)
    size: int = 0


class _Exposed:
    """The table as the view of a remembered service: its namespace counts as exposed (it was, when
    the journal remembered it), so its old records are what the zone held then."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def namespace_exposed(self, namespace: str) -> bool:
        return True

    def service(self, namespace: str, name: str) -> Service | None:
        return self.table.service(namespace, name)


def _wire_size(rr: RR) -> int:
    buffer = DNSBuffer()
    rr.pack(buffer)
    return len(buffer.data)


class Journal:
    """The diffs of the last changes; see the module docstring."""

    def __init__(self, table: Table, max_bytes: int, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        self._first_origin = tuple(table.config.zones[0].lower().rstrip(".").split("."))
        self._view = _Exposed(table)
        self.services: dict[ServiceKey, Service] = {}  # what the zone holds, per service (exposed ones only)
        self.entries: deque[Entry] = deque()
        self.bytes = 0
        self.first: int | None = None  # the serial at the sync: none of ours is older (None: not synced)
        self._recent: dict[ServiceKey, tuple[Service, set[Owned]]] = {}  # oldest first
        self._recent_records = 0

    # ----------------------------------------------------------------- recording (Table.bump)

    def reset(self, serial: int) -> None:
        """The initial sync: remember every exposed service, nothing to diff from yet."""
        table = self.table
        self.services = {key: svc for key in table.store.imports if (svc := self._current(key)) is not None}
        self.entries.clear()
        self.bytes = 0
        self.first = serial & SERIAL_MASK
        if table.dnssd is not None:
            table.dnssd.drain()  # compiled whole at the sync: nothing to diff from either

    def record(self, services, before: int, after: int) -> None:
        """The table went from serial `before` to `after` by recompiling `services`."""
        if self.first is None:
            return
        entry = Entry(before & SERIAL_MASK, after & SERIAL_MASK, self.clock())
        for key in services:
            old, new = self.services.get(key), self._current(key)
            if new is None:
                self.services.pop(key, None)
            else:
                self.services[key] = new
            if old is None and new is None:
                continue
            deleted, added = difference(self._records(key, old), self._records(key, new))
            entry.deleted += deleted
            entry.added += added
        if self.table.dnssd is not None:
            deleted, added = self.table.dnssd.drain()
            entry.deleted += deleted
            entry.added += added
        entry.size = sum(_wire_size(as_rr(*r, self._first_origin)) for r in (*entry.deleted, *entry.added))
        if entry.size > self.max_bytes:  # bigger than the whole journal: every older serial falls back
            self.entries.clear()
            self.bytes = 0
        else:
            self.entries.append(entry)
            self.bytes += entry.size
        self.trim()

    def renumber(self, before: int, after: int) -> None:
        """The table's serial was set from `before` to `after` without a change of its own (a --workers
        worker takes its supervisor's serial after applying the same change)."""
        before, after = before & SERIAL_MASK, after & SERIAL_MASK
        if self.entries and self.entries[-1].after == before:
            self.entries[-1].after = after
        elif self.first == before and not self.entries:
            self.first = after

    def trim(self) -> None:
        """Drop the entries past the age bound, then the oldest while over the byte bound."""
        oldest = self.clock() - self.max_age
        while self.entries and (self.entries[0].at < oldest or self.bytes > self.max_bytes):
            self.bytes -= self.entries.popleft().size

    def _current(self, key: ServiceKey) -> Service | None:
        table = self.table
        if key not in table.store.imports or not table.namespace_exposed(key[0]):
            return None
        return table.service(*key)

    def _records(self, key: ServiceKey, svc: Service | None) -> set[Owned]:
        """The records of `svc`; those of the services changed last are kept (`_recent`), so a service that
        keeps changing (an endpoint coming and going) costs one compile a change, not two."""
        if svc is None:
            return set()
        recent = self._recent.get(key)
        if recent is not None and recent[0] is svc:
            return recent[1]
        records = set(owned_records(svc, self._view, self.table.ttl, self.table.config.ns_addresses))
        self._recent.pop(key, None)
        self._recent[key] = (svc, records)
        self._recent_records += len(records) - (len(recent[1]) if recent is not None else 0)
        while self._recent_records > RECENT_RECORDS and len(self._recent) > 1:
            self._recent_records -= len(self._recent.pop(next(iter(self._recent)))[1])
        return records

    # ----------------------------------------------------------------- answering (transfer.Transfers)

    def since(self, serial: int, current: int) -> tuple[list[Owned], list[Owned]] | str:
        """The records deleted and added from `serial` to `current`, condensed (in no zone yet: the
        transfer writes them into the zone asked for); or the reason there are none: "future",
        "purged" or "unknown"."""
        self.trim()
        entries = self.entries
        start = next((i for i, e in enumerate(entries) if e.before == serial), None)
        if start is None or entries[-1].after != current:
            if serial_lt(current, serial):
                return "future"
            if self.first is not None and not serial_lt(serial, self.first) and serial_lt(serial, current):
                return "purged"
            return "unknown"
        deleted: dict[Owned, None] = {}  # (dicts: ordered sets)
        added: dict[Owned, None] = {}
        for i in range(start, len(entries)):
            entry = entries[i]
            if i > start and entries[i - 1].after != entry.before:
                return "unknown"  # a gap (cannot happen while every bump records): never a wrong diff
            for r in entry.deleted:
                if r in added:
                    del added[r]
                else:
                    deleted[r] = None
            for r in entry.added:
                if r in deleted:
                    del deleted[r]
                else:
                    added[r] = None
        return list(deleted), list(added)
