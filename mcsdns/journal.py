"""The IXFR journal (RFC 1995): what each change of the table did to the zone, kept for a while.

A secondary that holds serial S and asks IXFR gets, instead of the whole zone, the records
deleted and added since S. The journal records one entry per serial change (`Table.bump`):
the serial before and after, and, per served zone, the records that went and came. It is
built from the services the change touched (the same set `Table.on_change` recompiles), so
a change costs O(records of the changed services), not O(zone): the journal keeps, for
every service in an exposed namespace, the `Service` it last saw (the store's objects are
frozen, so that is a reference, not a copy), and diffs that service's records before and
after (`zonefile.service_records`, the records an AXFR holds for it).

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

from .compile import Service
from .store import ServiceKey
from .table import Table
from .zonefile import service_records

SERIAL_MASK = 0xFFFFFFFF


def serial_lt(a: int, b: int) -> bool:
    """a < b in RFC 1982 serial arithmetic (32 bits)."""
    return a != b and ((b - a) & SERIAL_MASK) < 0x80000000


@dataclass(slots=True)
class Entry:
    """One serial change: per zone name, the records deleted and added, keyed by their wire form."""

    before: int
    after: int
    at: float
    deleted: dict[str, dict[bytes, RR]] = field(default_factory=dict)
    added: dict[str, dict[bytes, RR]] = field(default_factory=dict)
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


def _keyed(records) -> dict[bytes, RR]:
    out = {}
    for rr in records:
        buffer = DNSBuffer()
        rr.pack(buffer)
        out[bytes(buffer.data)] = rr
    return out


class Journal:
    """The diffs of the last changes; see the module docstring."""

    def __init__(self, table: Table, max_bytes: int, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.clock = clock
        self.zones = tuple(table.config.zones)
        self._origins = {z: tuple(z.lower().rstrip(".").split(".")) for z in self.zones}
        self._view = _Exposed(table)
        self.services: dict[ServiceKey, Service] = {}  # what the zone holds, per service (exposed ones only)
        self.entries: deque[Entry] = deque()
        self.bytes = 0
        self.first: int | None = None  # the serial at the sync: none of ours is older (None: not synced)

    # ----------------------------------------------------------------- recording (Table.bump)

    def reset(self, serial: int) -> None:
        """The initial sync: remember every exposed service, nothing to diff from yet."""
        table = self.table
        self.services = {key: svc for key in table.store.imports if (svc := self._current(key)) is not None}
        self.entries.clear()
        self.bytes = 0
        self.first = serial & SERIAL_MASK

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
            for zone in self.zones:
                was, now = self._records(old, zone), self._records(new, zone)
                for k, rr in was.items():
                    if k not in now:
                        entry.deleted.setdefault(zone, {})[k] = rr
                        entry.size += len(k)
                for k, rr in now.items():
                    if k not in was:
                        entry.added.setdefault(zone, {})[k] = rr
                        entry.size += len(k)
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

    def _records(self, svc: Service | None, zone: str) -> dict[bytes, RR]:
        if svc is None:
            return {}
        return _keyed(service_records(svc, self._view, self._origins[zone], self.table.ttl,
                                      self.table.config.ns_addresses))

    # ----------------------------------------------------------------- answering (transfer.Transfers)

    def since(self, zone: str, serial: int, current: int) -> tuple[list[RR], list[RR]] | str:
        """The records of `zone` deleted and added from `serial` to `current`, condensed; or the
        reason there are none: "future", "purged" or "unknown"."""
        self.trim()
        entries = self.entries
        start = next((i for i, e in enumerate(entries) if e.before == serial), None)
        if start is None or entries[-1].after != current:
            if serial_lt(current, serial):
                return "future"
            if self.first is not None and not serial_lt(serial, self.first) and serial_lt(serial, current):
                return "purged"
            return "unknown"
        deleted: dict[bytes, RR] = {}
        added: dict[bytes, RR] = {}
        for i in range(start, len(entries)):
            entry = entries[i]
            if i > start and entries[i - 1].after != entry.before:
                return "unknown"  # a gap (cannot happen while every bump records): never a wrong diff
            for k, rr in entry.deleted.get(zone, {}).items():
                if added.pop(k, None) is None:
                    deleted[k] = rr
            for k, rr in entry.added.get(zone, {}).items():
                if deleted.pop(k, None) is None:
                    added[k] = rr
        return list(deleted.values()), list(added.values())
