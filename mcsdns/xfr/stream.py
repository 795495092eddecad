"""The whole zone as AXFR messages: a snapshot of the store, the packer, and the stream transfers read.

A transfer of the whole zone packs from a snapshot of the store taken when it starts
(`Snapshot`: references, not copies of the objects), so every record it sends is of the
serial its SOA names even if the table changes while it is written, and it sends each
message as soon as it is packed (`AxfrStream`): the first leaves after a few hundred
records, not after the zone. The messages of one serial are packed once and shared by
every transfer of it: twenty secondaries asking at once cost one packing. Packing goes in
steps of at most half a millisecond, the event loop running between them, so queries are
answered meanwhile.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Iterator

from ..zone import reverse, vocab
from ..zone.compiler import NS_NAME, Service
from ..zone.schedule import collector_paused
from ..zone.table import Table
from ..zone.vocab import Absolute, Record
from ..zone.wire import (HEADER, RR_FIXED, SOA_EXPIRE, SOA_REFRESH, SOA_RETRY, SOA_TIMERS, SRV_FIXED, address_record,
                         encode_labels, pointer)
from .zonefile import Owned, apex_owned, owned_records

_RECORD_MAX = 600  # the longest record we write: SRV with a 255-byte target and owner, plus fixed fields
# A message takes no record once it is this long: every name then sits below offset 16384, where a
# compression pointer (14 bits) can reach it.
# Signed (a TSIG record is < 400 bytes) that is well inside RFC 5936's 64 KiB; a 50k-import zone
# is then a few hundred messages.
PACK_LIMIT = 16384 - _RECORD_MAX
PACK_SLICE = 500  # records of an IXFR packed between two yields to the event loop (a few ms)
# Seconds of packing in one step of a whole-zone transfer (`AxfrStream.step`): each step runs in one
# turn of the event loop (transfer.py's `Turns`), and a query that arrives meanwhile waits for it.
PACK_STEP = 0.0005
_AXFR_IN = struct.pack(">HH", vocab.AXFR, vocab.CLASS_IN)


class Snapshot:
    """A zone's contents at one serial, taken from the store in one step, for a transfer to pack from.

    What is copied is what the records depend on: the ServiceImports and the slices of each service
    (references: the store's objects are frozen; the store's own dicts are copied, with the
    collector paused), the exposed namespaces, the local cluster, the apex records (the SOA with
    the serial) and, with --dns-sd, the browsing names' records (their tuples, which a change
    replaces rather than edits: `DnsSd.snapshot`). They are the same in every served zone but for
    the zone's own labels, which the packer adds. Later changes of the table do not reach it, so every
    record a transfer sends is of the serial its SOA names. As a `ZoneView` it answers for itself.
    """

    @collector_paused
    def __init__(self, table: Table) -> None:
        store = table.store
        self.table = table
        self.generation = table.generation
        self.imports = dict(store.imports)
        self.slices = {key: tuple(by_name.values()) for key, by_name in store.by_service.items()}
        self.namespaces = frozenset(ns for ns in store.namespaces if table.namespace_exposed(ns))
        self.local = table.local
        self.soa = soa_record(table)
        self.apex = list(apex_owned(table, table.config.ns_addresses))
        self.browsing = table.dnssd.snapshot() if table.dnssd is not None else []  # --dns-sd

    def namespace_exposed(self, namespace: str) -> bool:
        return namespace in self.namespaces

    def service(self, namespace: str, name: str) -> Service | None:
        imp = self.imports.get((namespace, name))
        if imp is None:
            return None
        return self.table.service_of(imp, self.slices.get((namespace, name), ()), self.local)

    def records(self) -> Iterator[Owned]:
        """The SOA, every record, the SOA again (RFC 5936 2.2), lazily: the services in name order."""
        yield self.soa
        yield from self.apex
        table, ns_addresses = self.table, self.table.config.ns_addresses
        for namespace, name in sorted(self.imports):
            if namespace in self.namespaces:
                yield from owned_records(self.service(namespace, name), self, table.ttl, ns_addresses)
        for part in self.browsing:
            yield from part
        yield self.soa


class ReverseSnapshot:
    """A reverse zone (`--reverse-cidr`) at one serial: its records taken whole when the transfer
    starts (the PTR index changes in place, so a lazy walk could mix serials). A reverse zone holds
    one PTR per indexed address in it: a list of tuples, built in one go."""

    def __init__(self, table: Table, lname: bytes) -> None:
        self.generation = table.generation
        self.soa = soa_record(table)
        zone = tuple(label.decode() for label in wire_labels(lname))
        self.rest = reverse.zone_records(zone, table.ptr, table.forward_zones, table.ttl, table.config.ns_addresses)

    def records(self) -> Iterator[Owned]:
        yield self.soa
        yield from self.rest
        yield self.soa


def wire_labels(lname: bytes) -> list[bytes]:
    """The labels of a wire-form name (no compression: a zone apex as the table keeps it)."""
    labels, i = [], 0
    while lname[i]:
        labels.append(lname[i + 1 : i + 1 + lname[i]])
        i += 1 + lname[i]
    return labels


class AxfrStream:
    """One zone's AXFR messages at one serial (ID 0, the question `zone AXFR IN` in the first), packed
    as the transfers reading them ask for them.

    The first message is packed when the first transfer asks for it, not after the whole zone: a
    secondary starts reading at once, and a secondary that stops reading stops the packing. Each
    message is packed once and kept, so every transfer of that serial (twenty secondaries at once,
    or one after another) shares one packing; one that asks for a message not packed yet packs it,
    in steps of at most PACK_STEP with the event loop running between them, so queries are answered
    meanwhile. Memory: the
    snapshot (references), the messages packed so far (the zone's wire size at most), and the
    packer's one message. Only the newest serial's stream is kept for the next transfer; an older
    one goes when its last transfer ends.
    """

    def __init__(self, snapshot: Snapshot | ReverseSnapshot, zone: str) -> None:
        self.generation = snapshot.generation
        self.messages: list[bytes] = []
        self.done = False
        self._records = snapshot.records()
        self._packer = Packer(zone, self.messages)
        self._failed = False

    def step(self, index: int) -> bytes | None | bool:
        """Message `index` of the transfer if it is packed; else pack for at most PACK_STEP seconds and
        return False (the caller yields to the event loop and asks again); None past the last."""
        if index < len(self.messages):
            return self.messages[index]
        if self.done:
            return None
        self._pack_some()
        return self.messages[index] if index < len(self.messages) else False

    @collector_paused
    def _pack_some(self) -> None:
        """Pack records until one more message is complete (or the zone's last is), or PACK_STEP has
        passed: a few dozen records at most, so the event loop runs between two such steps. The collector
        is paused as for a compile (schedule.py): packing allocates objects by the thousand and frees them
        by reference counting, and a full collection over the table's objects, triggered by those
        allocations alone, would cost more than the packing."""
        if self._failed:
            raise ConnectionError("the zone's packing failed")  # never a zone cut short
        count = len(self.messages)
        deadline = time.perf_counter() + PACK_STEP
        try:
            for n, (owner, rec) in enumerate(self._records):
                self._packer.add(owner, rec)
                if len(self.messages) > count or (n & 15 == 15 and time.perf_counter() > deadline):
                    return
            self._packer.close()
            self.done = True
        except Exception:
            self._failed = True
            raise


class Packer:
    """Records into messages (appended to `messages`) that each stop taking records past PACK_LIMIT,
    the question `zone AXFR IN` in the first (its type is the request's once dressed).

    Written by hand from the compiled records (owner labels and `Record`, as `zonefile.owned_records`
    gives them), as wire.py writes answers: dnslib's records would cost a multiple of the packing.
    Names are compressed against the names before them in the message (as BIND and Knot do), but
    SRV targets, which must be written whole (RFC 2782).
    """

    def __init__(self, zone: str, messages: list[bytes]) -> None:
        self.apex = encode_labels(tuple(zone.lower().rstrip(".").split("."))) + b"\x00"
        self.messages = messages
        self._new()

    def _new(self) -> None:
        self.out = bytearray(12)
        self.count = 0
        self.names: dict[tuple[str, ...], int] = {}  # owner suffixes (labels below the apex) written -> offset
        if not self.messages:
            self.names[()] = 12
            self.out += self.apex + _AXFR_IN

    def add(self, owner: tuple[str, ...], rec: Record) -> None:
        """One record: `owner` the labels left of the zone (a label with dots is several, as zonefile splits
        it); a SOA record's data is (serial, minimum) (`soa_record`)."""
        if self.count and len(self.out) > PACK_LIMIT:
            self.close()
            self._new()
        out = self.out
        out += self._name(_flat(owner), len(out))
        rtype, data = rec.rtype, rec.data
        at = len(out) + RR_FIXED.size  # where the data starts
        if rtype == vocab.A or rtype == vocab.AAAA:
            out += address_record(rtype, rec.ttl, data)  # type: ignore[arg-type]  # as the query path writes them
        else:
            if rtype == vocab.SRV:
                priority, weight, port, target = data  # type: ignore[misc]
                rdata = SRV_FIXED.pack(priority, weight, port) + self._whole(target)
            elif rtype == vocab.TXT:
                text = data.encode()  # type: ignore[attr-defined]
                rdata = b"".join(bytes([len(text[i : i + 255])]) + text[i : i + 255]
                                 for i in range(0, max(len(text), 1), 255))
            elif type(data) is Absolute:  # a reverse zone's PTR: a forward-zone name, written whole
                rdata = encode_labels(data.labels) + b"\x00"
            elif rtype == vocab.NS or rtype == vocab.PTR:  # a PTR of DNS-SD browsing (--dns-sd)
                rdata = self._name(_flat(data), at)  # type: ignore[arg-type]
            elif rtype == vocab.SOA:
                serial, minimum = data  # type: ignore[misc]
                mname = self._name(NS_NAME, at)
                rdata = (mname + self._name(("hostmaster",), at + len(mname))
                         + SOA_TIMERS.pack(serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, minimum))
            else:
                raise ValueError(f"no transfer form for record type {rtype}")
            out += RR_FIXED.pack(rtype, vocab.CLASS_IN, rec.ttl, len(rdata)) + rdata
        self.count += 1

    def close(self) -> bytes:
        """The message so far, header filled in, appended to `messages`."""
        HEADER.pack_into(self.out, 0, 0, 0, 0 if self.messages else 1, self.count, 0, 0)
        message = bytes(self.out)
        self.messages.append(message)
        return message

    def _name(self, labels: tuple[str, ...], at: int) -> bytes:
        """The name `labels` (left of the zone) to be written at offset `at`, compressed against the names
        before it in the message; the suffixes it spells out are remembered for the names after it."""
        names = self.names
        parts = []
        for i in range(len(labels) + 1):
            found = names.get(labels[i:])
            if found is not None:
                parts.append(pointer(found))
                break
            names[labels[i:]] = at  # below 16384: a record starts only below PACK_LIMIT
            if i == len(labels):
                parts.append(self.apex)  # the apex, first written here (a message without the question)
            else:
                label = encode_labels(labels[i : i + 1])
                parts.append(label)
                at += len(label)
        return b"".join(parts)

    def _whole(self, labels: tuple[str, ...]) -> bytes:
        return encode_labels(_flat(labels)) + self.apex


def _flat(labels: tuple[str, ...]) -> tuple[str, ...]:
    """Labels with a dot (a cluster id that is a DNS subdomain) split, as the server splits them."""
    if any("." in label for label in labels):
        return tuple(part for label in labels for part in label.split("."))
    return labels


def soa_record(table: Table) -> Owned:
    """The zone's SOA at the table's serial, as `Packer.add` takes it (as zonefile.apex_records has it:
    TTL the zone's up to 300, minimum the zone's)."""
    return (), Record(None, vocab.SOA, min(table.ttl, 300), (table.soa_serial, table.ttl))


def soa_message(table: Table, zone: str) -> bytes:
    """The zone's SOA alone in a message (ID 0, question `zone AXFR IN`)."""
    packer = Packer(zone, [])
    packer.add(*soa_record(table))
    return packer.close()


async def pack_all(zone: str, records: list[Owned]) -> list[bytes]:
    """`records` packed into messages (an IXFR's), yielding to the event loop every PACK_SLICE records."""
    packer = Packer(zone, [])
    for n, (owner, rec) in enumerate(records):
        packer.add(owner, rec)
        if n % PACK_SLICE == PACK_SLICE - 1:
            await asyncio.sleep(0)
    packer.close()
    return packer.messages
