"""Zone transfers (contract decision 8): AXFR (RFC 5936), IXFR (RFC 1995) and TSIG (RFC 8945).

Off unless `--transfer-to` names who may transfer: then `Transfers` answers every
AXFR and IXFR question for a served zone, and every query signed with TSIG (a
secondary signs its SOA refresh queries too, and rejects an unsigned reply).
Everything else stays the resolver's.

What a transfer holds is `zonefile.zone_records`: the records `mcsdns zone`
prints, built from the same compiled service answers the query path serves
(`compiler.compile_service`, per-endpoint names with their cluster id), so a
secondary answers what mcsdns answers. A transfer of the whole zone packs from a
snapshot of the store taken when it starts (`_Snapshot`: references, tens of ms at
50,000 imports), so every record it sends is of the serial its SOA names even if the
table changes while it is written, and it sends each message as soon as it is packed
(`_Stream`): the first leaves after a few hundred records, not after the zone. The
messages of one serial are packed once and shared by every transfer of it: twenty
secondaries asking at once cost one packing. Packing yields to the event loop as it goes,
so queries are answered meanwhile. Per request only the ID, the flags, the question (as
the client spelled it) and the TSIG record differ.

The decisions, in the order they are taken (`Transfers.decide`):

1. the client's address is not in `--transfer-to`: REFUSED (unsigned);
2. `--tsig-key-file` is set and the request is unsigned: REFUSED. A request
   signed with another key or algorithm: NOTAUTH with TSIG error BADKEY, a MAC
   that does not verify: NOTAUTH with BADSIG (both unsigned, RFC 8945 5.2);
   a MAC that verifies but a time outside its fudge: NOTAUTH with BADTIME,
   signed, our time in the other data (5.2.3). Without a key configured, a
   signed request is BADKEY;
3. class not IN: REFUSED (as the query path refuses other classes); the name is
   not the apex of a served zone (forward, or reverse with --reverse-cidr): NOTAUTH; not synced yet: SERVFAIL (a
   transfer before the initial list would hand out a partial zone);
4. AXFR over UDP: NOTIMP (RFC 5936 4.2 defines none; Knot answers the same);
   IXFR whose authority section is not one SOA of the zone: FORMERR;
5. IXFR over UDP, or from a client at our serial: our SOA alone (RFC 1995 2, 4);
   from a serial the journal holds (journal.py): the changes since, condensed into
   one difference (RFC 1995 4); any other (newer than ours, purged from the journal,
   never ours, or of a reverse zone, which keeps no journal): the whole zone in AXFR form, as
   RFC 1995 4 allows, counted by reason;
6. AXFR over TCP: the SOA, every record, the SOA again, in messages of at most
   16 KiB (PACK_LIMIT), the question in the first only, each signed when the request was
   (RFC 8945 5.3.1: every message, the digest chained).

UDP has no client address in the resolver, so over UDP step 1 is skipped: the
answers there are our SOA or an error, which any SOA query shows anyway.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TSIG
import dns.tsig

from ..zone import reverse, vocab
from ..zone.compiler import NS_NAME, Service
from ..zone.table import Table, collector_paused
from ..zone.vocab import Absolute, Record
from ..zone.wire import (AA, HEADER, QR, RD, RR_FIXED, SOA_EXPIRE, SOA_REFRESH, SOA_RETRY, SOA_TIMERS, SRV_FIXED, U16,
                   encode_labels, pointer)
from ..zone.wire import _address_record as address_record  # A/AAAA as the query path writes them
from .zonefile import Owned, apex_owned, owned_records

if TYPE_CHECKING:
    from ..serve.tcp import Stream  # the connection a transfer writes to (write + drain)
    from .journal import Journal

log = logging.getLogger(__name__)

TSIG = 250
_TSIG_FIXED = b"\x00\xfa\x00\xff\x00\x00\x00\x00"  # a TSIG record's type, class (ANY) and TTL (0)
NOTAUTH = 9
BADSIG, BADKEY, BADTIME = 16, 17, 18
FUDGE = 300  # seconds of clock difference a signed request may have (RFC 8945 10: 300 recommended)
_RECORD_MAX = 600  # the longest record we write: SRV with a 255-byte target and owner, plus fixed fields
# A message takes no record once it is this long: every name then sits below offset 16384, where a
# compression pointer (14 bits) can reach it.
# Signed (a TSIG record is < 400 bytes) that is well inside RFC 5936's 64 KiB; a 50k-import zone
# is then a few hundred messages.
PACK_LIMIT = 16384 - _RECORD_MAX
PACK_SLICE = 500  # records of an IXFR packed between two yields to the event loop (a few ms)
_AXFR_IN = struct.pack(">HH", vocab.AXFR, vocab.CLASS_IN)
MAX_TRANSFERS = 16  # AXFR/IXFR answered at once; more are REFUSED and retried by the secondary


@dataclass(slots=True)
class Request:
    """What `decide` read from a request: its header and question, and its TSIG record if any."""

    data: bytes  # as received
    qid: int
    flags: int
    qend: int  # where the question ends
    lname: bytes  # the question name, wire form, lower case
    qtype: int
    qclass: int
    tsig_start: int = 0  # where the TSIG record starts (0: unsigned)
    key_name: dns.name.Name | None = None
    tsig: Any = None  # its rdata


class Unreadable(Exception):
    """Not a message we can reply to as a transfer (the resolver's rules apply)."""


def read_request(data: bytes) -> Request:
    """Header, question and (if last in the additional section) the TSIG record of `data`."""
    if len(data) < 12:
        raise Unreadable("no header")
    qid, flags, qd, an, ns, ar = HEADER.unpack_from(data)
    if flags & 0x8000 or flags & 0x7800 or qd != 1:
        raise Unreadable("not a query of one question")
    try:
        name, used = dns.name.from_wire(data, 12)
        at = 12 + used
        qtype, qclass = struct.unpack_from(">HH", data, at)
        qend = at + 4
        req = Request(data, qid, flags, qend, name.to_wire().lower(), qtype, qclass)
        i = qend
        for index in range(an + ns + ar):
            start = i
            owner, used = dns.name.from_wire(data, i)
            i += used
            rtype, rclass, _ttl, rdlen = struct.unpack_from(">HHIH", data, i)
            i += 10
            if i + rdlen > len(data):
                raise Unreadable("record runs past the end")
            if rtype == TSIG:
                if index != an + ns + ar - 1 or rclass != dns.rdataclass.ANY:
                    raise Unreadable("TSIG not the last record")
                req.tsig_start, req.key_name = start, owner
                req.tsig = dns.rdata.from_wire(dns.rdataclass.ANY, TSIG, data, i, rdlen)
            i += rdlen
    except (dns.exception.DNSException, struct.error, IndexError, ValueError) as exc:
        raise Unreadable(str(exc)) from None
    return req


def signed(data: bytes) -> bool:
    """True when `data` ends in a TSIG record. Cheap for the queries that are not signed (every TCP query
    and every UDP query no fast lane takes, when transfers are on): one byte search."""
    if len(data) < 12 or not data[11] and not data[10]:
        return False
    if _TSIG_FIXED not in data:  # no record of type TSIG, class ANY, TTL 0 anywhere: a find in C, no parse
        return False
    try:
        return read_request(data).tsig_start > 0
    except Unreadable:
        return False


class _Snapshot:
    """A zone's contents at one serial, taken from the store in one step, for a transfer to pack from.

    What is copied is what the records depend on: the ServiceImports and the slices of each service
    (references: the store's objects are frozen; the store's own dicts are copied, about 60 ms at
    50,000 imports, with the collector paused), the exposed namespaces, the local cluster, the
    apex records (the SOA with the serial) and, with --dns-sd, the browsing names' records (their
    tuples, which a change replaces rather than edits: `DnsSd.snapshot`). They are the same in every served zone but for the zone's
    own labels, which the packer adds. Later changes of the table do not reach it, so every
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


class _ReverseSnapshot:
    """A reverse zone (`--reverse-cidr`) at one serial: its records taken whole when the transfer
    starts (the PTR index changes in place, so a lazy walk could mix serials). A reverse zone holds
    one PTR per indexed address in it: a list of tuples, built in one go."""

    def __init__(self, table: Table, lname: bytes) -> None:
        self.generation = table.generation
        self.soa = soa_record(table)
        zone = tuple(label.decode() for label in _wire_labels(lname))
        self.rest = reverse.zone_records(zone, table.ptr, table.forward_zones, table.ttl, table.config.ns_addresses)

    def records(self) -> Iterator[Owned]:
        yield self.soa
        yield from self.rest
        yield self.soa


def _wire_labels(lname: bytes) -> list[bytes]:
    """The labels of a wire-form name (no compression: a zone apex as the table keeps it)."""
    labels, i = [], 0
    while lname[i]:
        labels.append(lname[i + 1 : i + 1 + lname[i]])
        i += 1 + lname[i]
    return labels


class _Stream:
    """One zone's AXFR messages at one serial (ID 0, the question `zone AXFR IN` in the first), packed
    as the transfers reading them ask for them.

    The first message is packed when the first transfer asks for it, not after the whole zone: a
    secondary starts reading at once, and a secondary that stops reading stops the packing. Each
    message is packed once and kept, so every transfer of that serial (twenty secondaries at once,
    or one after another) shares one packing; one that asks for a message not packed yet packs it,
    and yields to the event loop after each, so queries are answered meanwhile. Memory: the
    snapshot (references), the messages packed so far (the zone's wire size at most, about 13 MB at
    10,000 imports), and the packer's one message. Only the newest serial's stream is kept for the
    next transfer; an older one goes when its last transfer ends.
    """

    def __init__(self, snapshot: _Snapshot | _ReverseSnapshot, zone: str) -> None:
        self.generation = snapshot.generation
        self.messages: list[bytes] = []
        self.done = False
        self._records = snapshot.records()
        self._packer = _Packer(zone, self.messages)
        self._failed = False

    async def message(self, index: int) -> bytes | None:
        """Message `index` of the transfer, packed if need be; None past the last."""
        while index >= len(self.messages):
            if self.done:
                return None
            self._pack_one()
            await asyncio.sleep(0)  # queries between two messages (a reader on loopback may never wait to drain)
        return self.messages[index]

    @collector_paused
    def _pack_one(self) -> None:
        """Pack records until one more message is complete (or the zone's last is): a few hundred
        records, a few ms, in one go. The collector is paused as for a compile (table.py): packing
        allocates objects by the thousand and frees them by reference counting, and a full collection
        over the table's objects, triggered by those allocations alone, would cost more than the packing."""
        if self._failed:
            raise ConnectionError("the zone's packing failed")  # never a zone cut short
        count = len(self.messages)
        try:
            for owner, rec in self._records:
                self._packer.add(owner, rec)
                if len(self.messages) > count:
                    return
            self._packer.close()
            self.done = True
        except Exception:
            self._failed = True
            raise


class _Packer:
    """Records into messages (appended to `messages`) that each stop taking records past PACK_LIMIT,
    the question `zone AXFR IN` in the first (its type is the request's once dressed).

    Written by hand from the compiled records (owner labels and `Record`, as `zonefile.owned_records`
    gives them), as wire.py writes answers: about four times faster than building dnslib records.
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
            out += address_record(rtype, rec.ttl, data)  # type: ignore[arg-type]
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
    """The zone's SOA at the table's serial, as `_Packer.add` takes it (as zonefile.apex_records has it:
    TTL the zone's up to 300, minimum the zone's)."""
    return (), Record(None, vocab.SOA, min(table.ttl, 300), (table.soa_serial, table.ttl))


def soa_message(table: Table, zone: str) -> bytes:
    """The zone's SOA alone in a message (ID 0, question `zone AXFR IN`)."""
    packer = _Packer(zone, [])
    packer.add(*soa_record(table))
    return packer.close()


class Transfers:
    """The transfer policy and its messages; see the module docstring for the decisions."""

    def __init__(self, table: Table, allowed: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
                 key: dns.tsig.Key | None = None, on_result: Callable[[str, str], None] | None = None) -> None:
        self.table = table
        self.allowed = allowed
        self.key = key
        self.on_result = on_result  # metrics: (type, result) of every transfer request
        self.zones = {z: name for z, name in zip(table.zones, table.config.zones)}  # apex wire form -> name
        # --reverse-cidr: the reverse zones, transferred whole (no IXFR journal: an IXFR behind our
        # serial gets the whole zone, as RFC 1995 4 allows); not NOTIFY'd (`zones` are).
        self.reverse_zones = {z: ".".join(label.decode() for label in _wire_labels(z)) for z in table.reverse_zones}
        self._streams: dict[bytes, _Stream] = {}  # the newest serial's AXFR messages, by zone
        self.active = 0
        self.clock: Callable[[], float] = time.time
        self.journal: Journal | None = None  # IXFR's history; None: every IXFR not current falls back
        self.on_fallback: Callable[[str], None] | None = None  # metrics: why an IXFR got the whole zone

    # ----------------------------------------------------------------- which queries are ours

    def handles(self, data: bytes) -> bool:
        """True for an AXFR/IXFR question in a served zone, and for any signed query (see the module docstring)."""
        if len(data) < 17 or data[2] & 0x80 or data[4:6] != b"\x00\x01":
            return False
        i = 12
        n = len(data)
        while i < n and 0 < data[i] < 64:
            i += data[i] + 1
        if i + 5 <= n and data[i] == 0:
            qtype = (data[i + 1] << 8) | data[i + 2]
            if qtype in (vocab.AXFR, vocab.IXFR):
                return self.table.zone_of(data[12 : i + 1].lower()) is not None
        return signed(data)

    def allows(self, client: Any) -> bool:
        """The peer address (a socket address tuple) is in --transfer-to."""
        try:
            address = ipaddress.ip_address(client[0].split("%")[0])
        except (TypeError, ValueError, IndexError):
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in net for net in self.allowed)

    # ----------------------------------------------------------------- serving

    async def serve_tcp(self, data: bytes, client: Any, writer: "Stream", timeout: float,
                        answer: Callable[[bytes], bytes | None]) -> None:
        """Write the reply (one message or a transfer's many) to `writer`, each drained within `timeout`.

        `answer`: the resolver for a signed query that is not a transfer (its reply is signed here).
        """
        if self.active >= MAX_TRANSFERS:
            self._count(data, "busy")
            writer.write(_framed(_error(data, vocab.REFUSED)))
            return
        self.active += 1
        try:
            for message in self.decide(data, client, True, answer):
                if message is None:
                    return
                if isinstance(message, _Whole):
                    self._result(message.kind, message.result)
                    stream = self._stream(message.req.lname)
                    index = 0  # each message signed as it goes: its MAC chains to the one before
                    while (whole := await stream.message(index)) is not None:
                        writer.write(_framed(self._dress(whole, message.req, message.ctx)))
                        await asyncio.wait_for(writer.drain(), timeout)
                        await asyncio.sleep(0)  # drain waits only once the socket is full, which a
                        index += 1              # fast reader never lets happen: queries between messages
                    continue
                if isinstance(message, _Incremental):
                    for part in await message.pack():
                        writer.write(_framed(self._dress(part, message.req, message.ctx)))
                        await asyncio.wait_for(writer.drain(), timeout)
                    continue
                writer.write(_framed(message))
                await asyncio.wait_for(writer.drain(), timeout)
        except (ConnectionError, asyncio.TimeoutError):
            raise  # the transport's to handle: the connection is dropped
        except Exception:  # a bug must not take the listener down: logged, the connection closed
            log.exception("transfer failed")
            raise ConnectionError("transfer failed") from None
        finally:
            self.active -= 1

    def over_udp(self, data: bytes, answer: Callable[[bytes], bytes | None]) -> bytes | None:
        """The one reply to `data` over UDP (the resolver calls this for what `handles`)."""
        replies = list(self.decide(data, None, False, answer))
        return replies[0] if replies else None

    def decide(self, data: bytes, client: Any, tcp: bool, answer: Callable[[bytes], bytes | None]):
        """The reply messages to `data`, in order (a generator: a transfer's are signed as they go out)."""
        try:
            req = read_request(data)
        except Unreadable:
            yield _error(data, vocab.FORMERR) if len(data) >= 12 else None
            return
        kind = {vocab.AXFR: "axfr", vocab.IXFR: "ixfr"}.get(req.qtype, "query")
        if tcp and kind != "query" and not self.allows(client):
            self._result(kind, "refused")
            yield _error(data, vocab.REFUSED, req)
            return
        ctx = Signer(self.key, req) if req.tsig_start else None
        if ctx is not None:
            error = ctx.verify(self.clock())
            if error:
                self._result(kind, {BADKEY: "badkey", BADSIG: "badsig", BADTIME: "badtime"}[error])
                yield ctx.error_reply(error, self.clock())
                return
        elif self.key is not None and kind != "query":
            self._result(kind, "unsigned")
            yield _error(data, vocab.REFUSED, req)
            return
        if kind == "query":  # a signed query that is no transfer: the resolver's reply, signed
            reply = answer(data[:10] + U16.pack(_arcount(data) - 1) + data[12 : req.tsig_start])
            if type(reply) is not bytes:  # forwarded (the upstream has not our key) or dropped
                reply = _error(data, vocab.REFUSED, req)
            yield ctx.sign(reply) if ctx is not None else reply
            return
        yield from self._transfer(req, kind, tcp, ctx)

    def _transfer(self, req: Request, kind: str, tcp: bool, ctx: "Signer | None"):
        def fail(rcode: int, result: str):
            self._result(kind, result)
            reply = _error(req.data, rcode, req)
            return ctx.sign(reply) if ctx is not None else reply

        if req.qclass != vocab.CLASS_IN:
            yield fail(vocab.REFUSED, "class")
            return
        zone = self.zones.get(req.lname) or self.reverse_zones.get(req.lname)
        if zone is None:
            yield fail(NOTAUTH, "notauth")
            return
        if not self.table.synced:
            yield fail(vocab.SERVFAIL, "not_synced")
            return
        if kind == "axfr" and not tcp:
            yield fail(vocab.NOTIMP, "udp")
            return
        if kind == "ixfr":
            client_serial = _ixfr_serial(req)
            if client_serial is None:
                yield fail(vocab.FORMERR, "formerr")
                return
            serial = self.table.soa_serial
            if not tcp or client_serial == serial:
                self._result(kind, "current" if client_serial == serial else "udp_soa")
                yield self._dress(self.soa_message(req.lname), req, ctx)
                return
            if req.lname in self.reverse_zones:
                diff: Any = "reverse_zone"  # no journal of a reverse zone's changes
            else:
                diff = self.journal.since(client_serial, serial) if self.journal is not None else "unknown"
            if isinstance(diff, str):  # no history from that serial: the whole zone (RFC 1995 4)
                if self.on_fallback is not None:
                    self.on_fallback(diff)
            else:
                self._result(kind, "ixfr")
                yield self._incremental(req, ctx, zone, client_serial, *diff)
                return
        # The whole zone: packed (or its packing awaited) by serve_tcp, then dressed like this.
        yield _Whole(req, ctx, kind, "axfr" if kind == "axfr" else "fallback_axfr")

    def _incremental(self, req: Request, ctx: "Signer | None", zone: str, client_serial: int, deleted: list[Owned],
                     added: list[Owned]) -> "_Incremental":
        """The IXFR reply (RFC 1995 4): our SOA, then one condensed difference (the SOA at the client's
        serial, the records deleted, our SOA, the records added), then our SOA again."""
        soa = soa_record(self.table)
        rec = soa[1]
        old = (), rec._replace(data=(client_serial, rec.data[1]))  # type: ignore[index]
        return _Incremental(req, ctx, zone, [soa, old, *deleted, soa, *added, soa])

    def soa_message(self, lname: bytes) -> bytes:
        """The zone's current SOA as a one-answer message (ID 0, question `zone AXFR IN`): NOTIFY's base."""
        return soa_message(self.table, self.zones.get(lname) or self.reverse_zones[lname])

    def _stream(self, lname: bytes) -> _Stream:
        """The zone's messages at the table's current serial: the stream of a transfer still under way or
        done at this serial, else a new one from a snapshot taken now."""
        stream = self._streams.get(lname)
        if stream is None or stream.generation != self.table.generation:
            if lname in self.reverse_zones:
                snapshot: _Snapshot | _ReverseSnapshot = _ReverseSnapshot(self.table, lname)
                zone = self.reverse_zones[lname]
            else:
                snapshot, zone = _Snapshot(self.table), self.zones[lname]
            stream = self._streams[lname] = _Stream(snapshot, zone)
        return stream

    def _dress(self, message: bytes, req: Request, ctx: "Signer | None") -> bytes:
        """`message` with the request's ID, RD bit and question (its spelling and type) put in."""
        out = bytearray(message)
        U16.pack_into(out, 0, req.qid)
        U16.pack_into(out, 2, QR | AA | (req.flags & RD))
        if out[5]:  # the first message carries the question, the same length as the request's
            out[12 : req.qend] = req.data[12 : req.qend]
        return ctx.sign(bytes(out)) if ctx is not None else bytes(out)

    def _result(self, kind: str, result: str) -> None:
        if self.on_result is not None:
            self.on_result(kind, result)
        if result not in ("axfr", "fallback_axfr", "current", "udp_soa"):
            log.debug("%s request: %s", kind, result)

    def _count(self, data: bytes, result: str) -> None:
        try:
            qtype = read_request(data).qtype
        except Unreadable:
            return
        self._result({vocab.AXFR: "axfr", vocab.IXFR: "ixfr"}.get(qtype, "query"), result)


@dataclass(slots=True)
class _Whole:
    """`decide`'s word for "the whole zone goes here": serve_tcp packs it (awaiting) and writes it."""

    req: Request
    ctx: "Signer | None"
    kind: str
    result: str


@dataclass(slots=True)
class _Incremental:
    """`decide`'s IXFR reply from the journal: its records, taken when decided (a later change does not
    reach them); serve_tcp packs them, yielding to the event loop as the whole zone's packing does."""

    req: Request
    ctx: "Signer | None"
    zone: str
    records: list[Owned]

    async def pack(self) -> list[bytes]:
        packer = _Packer(self.zone, [])
        for n, (owner, rec) in enumerate(self.records):
            packer.add(owner, rec)
            if n % PACK_SLICE == PACK_SLICE - 1:
                await asyncio.sleep(0)
        packer.close()
        return packer.messages


class Signer:
    """TSIG for one request: its verification, then the signatures of the replies, chained (RFC 8945 5.3.1)."""

    def __init__(self, key: dns.tsig.Key | None, req: Request) -> None:
        self.key = key
        self.req = req
        self.ctx: Any = None
        self.request_mac: bytes = req.tsig.mac
        self.first = True

    def verify(self, now: float) -> int:
        """0 if the request's signature is good, else the TSIG error (BADKEY, BADSIG, BADTIME), in RFC 8945 5.2's order."""
        req, key = self.req, self.key
        if key is None or req.key_name != key.name or req.tsig.algorithm != key.algorithm:
            return BADKEY
        try:
            # MAC first (5.2.2), with the time check of dnspython passed by construction: ours follows (5.2.3).
            dns.tsig.validate(req.data, key, req.key_name, req.tsig, req.tsig.time_signed, None, req.tsig_start)
        except (dns.tsig.BadSignature, dns.exception.FormError, dns.tsig.PeerError):
            return BADSIG
        if abs(req.tsig.time_signed - int(now)) > req.tsig.fudge:
            return BADTIME
        return 0

    def sign(self, reply: bytes) -> bytes:
        """`reply` with its TSIG record appended; every further call chains to the previous MAC."""
        key = self.key
        assert key is not None
        rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, key.algorithm, 0, FUDGE, b"", self.req.qid, 0, b"")
        now = int(time.time())
        if self.first:
            tsig, self.ctx = dns.tsig.sign(reply, key, rdata, now, self.request_mac, None, True)
            self.first = False
        else:
            tsig, self.ctx = dns.tsig.sign(reply, key, rdata, now, None, self.ctx, True)
        return _append_tsig(reply, key.name, tsig)

    def error_reply(self, error: int, now: float) -> bytes:
        """NOTAUTH with the TSIG error: BADKEY/BADSIG unsigned (an empty MAC), BADTIME signed with our time."""
        req = self.req
        reply = _error(req.data, NOTAUTH, req)
        if error == BADTIME and self.key is not None:
            other = struct.pack(">HI", (int(now) >> 32) & 0xFFFF, int(now) & 0xFFFFFFFF)
            rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, req.tsig.algorithm, 0, req.tsig.fudge, b"",
                                              req.qid, BADTIME, other)
            # The signed time is the request's, so the client can verify it (RFC 8945 5.2.3).
            tsig, _ = dns.tsig.sign(reply, self.key, rdata, req.tsig.time_signed, self.request_mac, None, False)
            return _append_tsig(reply, self.key.name, tsig)
        rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, req.tsig.algorithm, req.tsig.time_signed,
                                          req.tsig.fudge, b"", req.qid, error, b"")
        return _append_tsig(reply, req.key_name, rdata)


def sign_request(message: bytes, key: dns.tsig.Key) -> tuple[bytes, bytes]:
    """`message` (a request we send: NOTIFY) signed with `key` at our time; and its MAC, to verify the reply."""
    rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, TSIG, key.algorithm, 0, FUDGE, b"",
                                      (message[0] << 8) | message[1], 0, b"")
    tsig, _ = dns.tsig.sign(message, key, rdata, int(time.time()), None, None, False)
    return _append_tsig(message, key.name, tsig), tsig.mac


def _append_tsig(message: bytes, owner: dns.name.Name, rdata: Any) -> bytes:
    body = rdata.to_wire()
    record = owner.to_wire() + struct.pack(">HHIH", TSIG, dns.rdataclass.ANY, 0, len(body)) + body
    return message[:10] + U16.pack(_arcount(message) + 1) + message[12:] + record


def _arcount(message: bytes) -> int:
    return (message[10] << 8) | message[11]


def _framed(message: bytes) -> bytes:
    return U16.pack(len(message)) + message


def _error(data: bytes, rcode: int, req: Request | None = None) -> bytes:
    """Header (and the question when readable) with `rcode`: no records."""
    qid, flags = struct.unpack_from(">HH", data)
    flags = QR | (flags & (RD | 0x7800)) | (rcode & 0xF)
    if req is None:
        return HEADER.pack(qid, flags, 0, 0, 0, 0)
    return HEADER.pack(qid, flags, 1, 0, 0, 0) + data[12 : req.qend]


def _ixfr_serial(req: Request) -> int | None:
    """The serial of the one SOA of the zone in an IXFR's authority section (RFC 1995 3), else None."""
    data = req.data
    _, _, _, an, ns, _ = HEADER.unpack_from(data)
    if an or ns != 1:
        return None
    try:
        owner, used = dns.name.from_wire(data, req.qend)
        i = req.qend + used
        rtype, rclass, _ttl, rdlen = struct.unpack_from(">HHIH", data, i)
        if rtype != vocab.SOA or rclass != vocab.CLASS_IN or owner.to_wire().lower() != req.lname:
            return None
        soa = dns.rdata.from_wire(dns.rdataclass.IN, dns.rdatatype.SOA, data, i + 10, rdlen)
    except (dns.exception.DNSException, struct.error, ValueError):
        return None
    return soa.serial
