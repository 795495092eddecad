"""One query in, one reply out: the rcode policy and the hot path.

`Resolver.resolve` is the only place that decides what a packet gets:
dropped, FORMERR/NOTIMP/BADVERS/REFUSED, a compiled answer, an answer
computed by the zone logic, SERVFAIL-before-sync, or a hand-off to the
forwarder. It does no I/O and keeps nothing about the packet once it
returns: the transports call it with bytes, send the reply it returns and
pass the parsed query it returns with it to the observers (metrics, query
log), so nothing is parsed twice. The replies the transport and the forwarder must write without
it (the resolver raised, no forwarder, --max-concurrent reached, no upstream
answered) are decided here too: `Resolver.panicked`, `not_forwarding`,
`forward_overloaded`, `forward_failed`.

Two bounded caches sit in front of that, both filled only once the sources
are synced (before, NXDOMAIN must become SERVFAIL). A hit needs no check of
that: a store that synced never stops being synced (`Store.synced_all`).
The first query of a new table generation (any change to the data makes one,
and a new SOA serial with it) drops what the change made wrong
(`catch_up`): the cached answers of the services it changed, and every
cached reply that is not one service's answer (negative replies hold the SOA
and so the serial; which names exist changes with any service). Answers of
the services it left alone stay cached: under API churn most queries are
not for the churned services.

* the packet cache maps a UDP query's bytes after the ID to its reply's
  bytes after the ID. A reply is a pure function of those bytes and the
  table, so a repeated query costs one dict lookup and a concatenation;
  dnsperf and real stub resolvers repeat the same few packet shapes.
* the negative cache maps a question (the lookup key) to the NXDOMAIN/NODATA
  body the zone logic computed for it, so a new packet for a name that does
  not exist (search-path expansions are most of a cluster's traffic) skips
  the zone logic too.

`--loadbalance round_robin` (project decision 11, CoreDNS's `loadbalance`
plugin) swaps in `loadbalance.RoundRobinResolver`, a subclass, so the default
path has not one extra branch: see there.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass
from random import getrandbits as _coin  # `resolve`: which of two notes a third replaces
from typing import Any

from ..zone import compiler, reverse, vocab
from ..zone.names import Kind, parse
from ..zone.table import Table
from ..zone.vocab import AXFR, BADVERS, CLASS_IN, FORMERR, IXFR, NOTIMP, REFUSED, SERVFAIL
from ..zone.wire import (
    AA,
    CD,
    HEADER,
    MAX_TCP,
    MAX_UDP,
    Body,
    Malformed,
    QR,
    RD,
    REUSED,
    Query,
    assemble,
    error_reply,
    parse_query,
    split_labels,
)

PACKET_CACHE_ENTRIES = 32768  # distinct UDP query packets whose replies are kept
PACKET_CACHE_BYTES = 24 << 20  # and their memory, estimated (full: emptied, then refilled)
_ENTRY_OVERHEAD = 400  # per cached packet beyond its bytes: dict slots, tuple, Query and object headers
SIGHTED_SLOTS = 1 << 16  # hashes of names that cannot exist, seen once (two slots per index: see `resolve`)
ABSENT_SHAPES = 4096  # `_absent_child`'s replies by shape (a flood of random names: one per question length, type, RD/CD, OPT)
NEGATIVE_CACHE_ENTRIES = 32768  # questions with a cached NXDOMAIN/NODATA body (the bodies are shared)
_CACHEABLE_RCODES = (0, 3, 5)  # NOERROR, NXDOMAIN, REFUSED: never FORMERR (garbage) or SERVFAIL
# Header bytes 4-11 of a query with one question and no other records. For such a packet,
# `data[12:].lower()` equal to a compiled key proves the question valid: lower() changes only
# bytes 0x41-0x5A, never a label length (<= 63) or the root, and no compiled type or class
# (A, AAAA, SRV, SOA, ... and IN) has such a byte (tests/test_resolve_lanes.py checks that).
_PLAIN = b"\x00\x01\x00\x00\x00\x00\x00\x00"
# The same with one additional record. When the packet's last 11 bytes start with `_OPT_HEAD` and end
# in `\0\0` (an OPT record without options, as `dnsperf -e` and stub resolvers send), `_handle`
# reads them without a parse, and the case-folded cache keeps them exact (`Resolver.resolve`).
_ONE_OPT = b"\x00\x01\x00\x00\x00\x00\x00\x01"
_OPT_HEAD = b"\x00\x00\x29"  # the root (owner) and type OPT
_OPT_DO = b"\x00\x00\x80\x00\x00\x00"  # a reply OPT's TTL (extended rcode 0, version 0, DO or not) and length 0
_OPT_NO_DO = b"\x00\x00\x00\x00\x00\x00"


def _absent_heads() -> tuple[bytes, ...]:
    """Header bytes 2-11 of `Resolver._absent_child`'s replies, at (RD) | (CD: 0x10) | (2: NODATA, the
    SOA question; else NXDOMAIN) | (4: with an OPT record): the flags the query's RD and CD decide,
    one question, no answer, the SOA, and the OPT if any."""
    heads = [b""] * 32
    for at in range(32):
        rcode = vocab.NOERROR if at & 2 else vocab.NXDOMAIN
        flags = QR | AA | (RD if at & 1 else 0) | (CD if at & 0x10 else 0) | rcode
        heads[at] = HEADER.pack(0, flags, 1, 0, 1, 1 if at & 4 else 0)[2:]
    return tuple(heads)


_ABSENT_HEADS = _absent_heads()


class LocalReply(bytes):
    """A reply written by this server in the forward path (SERVFAIL, REFUSED), not by an upstream.

    Still plain bytes to send; observers tell it apart by type, so metrics label
    it plugin "" like CoreDNS's server-written errors, and upstream replies "forward".
    """

    __slots__ = ()


def not_forwarding(q: Query) -> LocalReply:
    """A query handed to the forward path with no forwarder: REFUSED, as names outside the zones get."""
    return LocalReply(error_reply(q.raw, REFUSED, q))


def forward_overloaded(q: Query) -> LocalReply:
    """The forwarder is at --max-concurrent: REFUSED (CoreDNS forward's max_concurrent)."""
    return LocalReply(error_reply(q.raw, REFUSED, q))


def forward_failed(q: Query) -> LocalReply:
    """No upstream answered in time, or forwarding raised: SERVFAIL."""
    return LocalReply(error_reply(q.raw, SERVFAIL, q))


@dataclass(slots=True)
class Forward:
    """The query belongs upstream; the transport hands it to the forwarder."""

    query: Query


class Resolver:
    def __init__(self, table: Table, forwarding: bool = False) -> None:
        self.table = table
        self.forwarding = forwarding
        self.transfers: Any = None  # --transfer-to: transfer.Transfers, for AXFR/IXFR and signed queries over UDP
        self._generation = table.generation
        # As of this generation: `children` and `owned` tell every absent name (`Table.settled`: synced, and
        # the services the sync left for later compiled; both steps make a new generation).
        self._synced = table.settled
        # The caches keep what a hit returns in two dicts under one key: the reply's bytes (or pieces) apart
        # from the parsed query, so the first holds no object the cyclic collector scans (see `_store`).
        self._packets: dict[bytes, bytes] = {}  # query[2:] -> reply[2:]; see loadbalance.RoundRobinResolver too
        self._packet_queries: dict[bytes, Query] = {}  # query[2:] -> the parsed query
        # The folded bytes of a query spelled with capitals -> (reply[2:12], the reply after the question or its
        # pieces around each spelling of the zone, (start, end) of the query's zone spelling or None); see `resolve`.
        self._folded: dict[bytes, tuple] = {}
        self._folded_queries: dict[bytes, Query] = {}  # the same key -> the parsed query
        self._packet_bytes = 0
        # Who each entry of the two packet caches is dropped with (`catch_up`): (folded, key, estimated size)
        # by the `children` name of the service it answers (`Table.owner`), or in `_unowned` (every other).
        self._owned: dict[bytes, list[tuple[bool, bytes, int]]] = {}
        self._unowned: list[tuple[bool, bytes, int]] = []
        self._negative: dict[bytes, Body] = {}  # lookup key -> NXDOMAIN/NODATA body
        self._absent: dict[tuple, tuple[bytes, bytes, Query]] = {}  # see _absent_child
        # Scratch of one `resolve` call (reset at its start, read before it returns):
        # Where reply() copied the query's zone spelling, and the body's zone_slots and ends:
        self._spelled: tuple[int, int, tuple[int, ...], tuple[int, ...]] | None = None
        self._keep = True  # False: this reply is cheap to make again: cached only on second sight
        # The hashes of such replies' packet-cache keys seen once, at hash & (SIGHTED_SLOTS - 2) or the slot
        # after it (see `resolve`): machine integers, so the table holds no object per name and empties with one allocation.
        self._sighted = array("q", bytes(8 * SIGHTED_SLOTS))

    def handle(self, data: bytes, tcp: bool = False) -> bytes | Forward | None:
        """`resolve`'s reply alone, for callers that observe nothing (the /explain endpoint, tests)."""
        return self.resolve(data, tcp)[0]

    def resolve(self, data: bytes, tcp: bool = False) -> tuple[bytes | Forward | None, Query | None]:
        """(the reply to `data`, None to drop it, or Forward; the parsed query, None if unreadable).

        Never raises on bad input. The query is the one the reply was made for (a cache hit's is the
        stored one: same question, flags and EDNS; only the ID, which observers do not read, may differ;
        a missing name's is shared by its shape, see `_absent_child`: observers read the name from the packet).
        A tuple of objects that exist anyway, so the cached lanes allocate nothing else per query.

        A query of one question and nothing else, or with an OPT record without options after it
        (what stub resolvers and `dnsperf -e` send), that spells its name with capitals is cached
        apart (`_folded`) under its bytes with the question's lower-cased, so every letter
        case of a name shares one entry: it keeps the reply without its question, and a hit puts the
        packet's own question (its case) back in. Folding cannot merge two such queries with
        different replies: lower() changes only bytes 0x41-0x5A, which in the header (bytes 2-3;
        byte 2 is < 8 here) touch only the AD and Z bits, never RD or CD (the flags a reply copies),
        in the question only the letters of labels (a label length is <= 63, and the types and
        classes with such a byte are all answered alike), and the OPT record is kept exact (its
        size, DO bit and version decide the reply). A reply that spells the zone (SRV targets,
        `zone_slots`) is kept cut at those places, and a hit joins the pieces with the zone as
        the packet spells it. Every other packet is cached exactly.
        """
        table = self.table
        if table.generation != self._generation:
            self.catch_up()
        if tcp:
            return self._handle(data, True)
        exact = data[2:]
        hit = self._packets.get(exact)
        if hit is not None:  # (filled only while synced, and a store never stops being synced: no check)
            return data[:2] + hit, self._packet_queries[exact]
        # The `_folded` key, and where the question ends (None: the packet's end); inline, as a call
        # would cost a tenth of a folded hit:
        counts = data[4:12]
        if counts == _PLAIN and data[2] < 8:
            folded = lowered = exact.lower()
            end = None
        elif counts == _ONE_OPT and data[2] < 8 and data[-11:-8] == _OPT_HEAD:
            lowered = data[2:-11].lower()
            folded, end = lowered + data[-11:], -11
        else:
            folded = end = lowered = None
        if folded is not None and folded != exact:
            hit = self._folded.get(folded)
            if hit is not None:
                zone = hit[2]
                if zone is None:
                    return data[:2] + hit[0] + data[12:end] + hit[1], self._folded_queries[folded]
                return data[:2] + hit[0] + data[12:end] + data[zone[0] : zone[1]].join(hit[1]), self._folded_queries[folded]
        else:
            folded = None
        self._spelled = None
        self._keep = True
        # A QUERY of one question (`_handle`'s checks hold), alone or then an OPT record without options,
        # version 0, goes straight to the lanes with its question lower-cased above.
        if lowered is None:
            outcome = self._handle(data, False)
        elif end is None:
            outcome = self._lanes(data, len(data), lowered[10:], False)
        elif data[-2:] == b"\x00\x00" and not data[-5]:
            outcome = self._lanes(data, len(data) - 11, lowered[10:], False)
        else:
            outcome = self._handle(data, False)
        reply, q = outcome
        if type(reply) is not bytes or q is None:
            return outcome
        if not self._keep:
            # A name that cannot exist (NXDOMAIN or NODATA, synced, EDNS version 0: cacheable): cached
            # on its second sight only (the first is noted in `_sighted`), so a flood of unique names
            # fills no cache, while names asked again (an NXDOMAIN mix, search-path expansions) become
            # cache hits. The sightings are a fixed table of the keys' hashes (computed by the
            # cache lookups above, and salted per process, so nobody can aim collisions): bounded,
            # nothing to empty (emptying a large set at once stalls the event loop), nothing kept
            # per name. A note goes into one of two slots (a pair at an even index), an empty one
            # first, else one of the two at random: were a note always to replace the last one in a
            # single slot, two names on that slot asked in turn (a query file played in a loop,
            # search-path expansions between other queries) would wipe each other's note for good
            # and never be cached. A name asked twice in a row is cached at its second sight, and
            # names sharing a pair in turn reach theirs within a few turns, in any order. A hash equal to another's
            # (a 64-bit coincidence) caches a reply on its first sight: the same reply, only earlier.
            seen = hash(exact if folded is None else folded)
            sighted = self._sighted
            slot = seen & (SIGHTED_SLOTS - 2)
            if sighted[slot] != seen:
                if sighted[slot + 1] != seen:
                    if sighted[slot] and (not sighted[slot + 1] or _coin(1)):
                        slot += 1
                    sighted[slot] = seen
                    return outcome
                slot += 1
            sighted[slot] = 0
        elif reply[3] & 0x0F not in _CACHEABLE_RCODES or q.edns_version or not table.synced:
            return outcome
        if folded is None:
            self._store(False, exact, len(data), reply, reply[2:], q)
        elif q.qend == len(data) + (end or 0):  # (bytes between the question and the end: not cached)
            tail = self._cut(reply, q)
            if tail is not None:
                span = self._spelled
                self._store(True, folded, len(data), reply, (reply[2:12], tail, None if span is None else span[:2]), q)
        return outcome

    def _cut(self, reply: bytes, q: Query) -> bytes | tuple[bytes, ...] | None:
        """The reply after its question, for `_folded`: whole, or where it spells the zone as the
        query does (`reply` noted it in `_spelled`), cut into the pieces around each spelling
        (None: not as expected, not cached)."""
        tail = reply[q.qend :]
        span = self._spelled
        if span is None:
            return tail
        start, end, slots, ends = span
        width = end - start
        spelled = q.raw[start:end]
        records = ((reply[6] << 8) | reply[7]) + ((reply[10] << 8) | reply[11]) - (1 if q.edns else 0)
        last = ends[records - 1] if 0 < records <= len(ends) else 0  # where the records the reply kept end
        pieces = []
        at = 0
        for slot in slots:
            if slot >= last:
                break
            if tail[slot : slot + width] != spelled:
                return None
            pieces.append(tail[at:slot])
            at = slot + width
        pieces.append(tail[at:])
        return tuple(pieces)

    def panicked(self, data: bytes) -> bytes | None:
        """The reply when `resolve` raised on `data` (a bug): SERVFAIL if it has a header, else nothing."""
        return error_reply(data, SERVFAIL) if len(data) >= 12 else None

    def _store(self, folded: bool, key: bytes, size: int, reply: bytes, entry: object, q: Query) -> None:
        """Keep `entry` (see `resolve`) and `q` in the folded or the exact cache under `key`; the packet
        was `size` bytes long.

        An entry is bytes, or a tuple of bytes and ints, which the cyclic garbage collector stops
        tracking at its first pass, and the query (a slots object: always tracked) sits in a dict of
        its own. A full packet cache is then 32,768 objects for every collection to scan, not twice
        as many, and fills with half the tracked allocations that trigger collections: with the
        table frozen as `App.start` does, full collections (which stop the event loop) come half as
        often and end sooner, for one more dict lookup per hit (its key's hash is cached).
        """
        size = 2 * size + len(reply) + _ENTRY_OVERHEAD  # key + the Query's copy of the packet + reply
        self._packet_bytes += size
        if len(self._packets) + len(self._folded) >= PACKET_CACHE_ENTRIES or self._packet_bytes > PACKET_CACHE_BYTES:
            self._clear_packets()
            self._packet_bytes = size
        q.tally = REUSED  # every hit returns this object with the same reply: observers may precompute
        # One service's answer: NOERROR with answers and no authority (so no SOA, no serial), for a name at
        # or below a compiled service (`Table.owner`: what nothing but that service's objects decides).
        owner = None
        if reply[3] & 0x0F == 0 and (reply[6] or reply[7]) and not (reply[8] or reply[9]):
            owner = self.table.owner(q.lname)
        if owner is None:
            self._unowned.append((folded, key, size))
        else:
            entries = self._owned.get(owner)
            if entries is None:
                self._owned[owner] = [(folded, key, size)]
            else:
                entries.append((folded, key, size))
        if folded:
            self._folded[key] = entry  # type: ignore[assignment]
            self._folded_queries[key] = q
        else:
            self._packets[key] = entry  # type: ignore[assignment]
            self._packet_queries[key] = q

    def _clear_packets(self) -> None:
        self._packets.clear()
        self._packet_queries.clear()
        self._folded.clear()
        self._folded_queries.clear()
        self._owned.clear()
        self._unowned = []

    def _drop(self, entries: list[tuple[bool, bytes, int]]) -> None:
        """Forget these packet-cache entries (`_owned`, `_unowned`)."""
        packets, queries, folded_packets, folded_queries = self._packets, self._packet_queries, self._folded, self._folded_queries
        for folded, key, size in entries:
            if folded:
                if folded_packets.pop(key, None) is not None:
                    del folded_queries[key]
                    self._packet_bytes -= size
            elif packets.pop(key, None) is not None:
                del queries[key]
                self._packet_bytes -= size

    def catch_up(self) -> None:
        """The table moved to a new generation: drop the cached replies its changes made wrong (the
        module docstring), or every one when the table's log (`Table.changed`) does not say which."""
        table = self.table
        changed = table.changed
        behind = table.generation - self._generation
        if not 0 < behind <= len(changed) or changed[-behind][0] != self._generation + 1:
            self.flush()
            return
        services: set[bytes] = set()
        for at in range(len(changed) - behind, len(changed)):
            names = changed[at][1]
            if names is None:
                self.flush()
                return
            services.update(names)
        self._generation = table.generation
        self._synced = table.settled
        self._negative.clear()
        self._absent.clear()
        self._drop(self._unowned)
        self._unowned = []
        owned = self._owned
        for name in services:
            entries = owned.pop(name, None)
            if entries is not None:
                self._drop(entries)

    def flush(self) -> None:
        """Forget every cached reply."""
        self._generation = self.table.generation
        self._synced = self.table.settled
        self._clear_packets()
        self._sighted = array("q", bytes(8 * SIGHTED_SLOTS))
        self._packet_bytes = 0
        self._negative.clear()
        self._absent.clear()

    def _handle(self, data: bytes, tcp: bool) -> tuple[bytes | Forward | None, Query | None]:
        """`resolve` past the packet cache."""
        if len(data) < 12:
            return None, None  # no header: nothing to reply to
        if data[2] & 0x80:
            return None, None  # a response, not a query
        if data[2] & 0x78:
            return error_reply(data, NOTIMP), None  # only opcode QUERY is implemented
        counts = data[4:12]
        if counts == _PLAIN:
            return self._lanes(data, len(data), data[12:].lower(), tcp)
        if counts == _ONE_OPT and data[-11:-8] == _OPT_HEAD and data[-2:] == b"\x00\x00" and not data[-5]:
            end = len(data) - 11  # an OPT record without options, version 0, after the question
            return self._lanes(data, end, data[12:end].lower(), tcp)
        return self._parsed(data, tcp)

    def _lanes(self, data: bytes, end: int, key: bytes, tcp: bool) -> tuple[bytes | Forward | None, Query | None]:
        """`_handle` for a QUERY of one question and nothing else, or then an OPT record without
        options, version 0 (`end`: where the question ends); `key`: the question lower-cased.

        If that is a compiled key, it is a valid question (see `_PLAIN`), so the parse is skipped.
        This is what keeps a name asked in a new letter case (a new packet) close to a cached
        reply's cost.
        """
        table = self.table
        body = table.answers.get(key)
        if body is not None:
            if end != len(data):
                return self._edns_lane(data, end, key, body, tcp)
            q = Query(data, (data[0] << 8) | data[1], (data[2] << 8) | data[3], end, key[:-4],
                      (key[-4] << 8) | key[-3], (key[-2] << 8) | key[-1])
            return self.reply(q, body, MAX_TCP if tcp else MAX_UDP), q
        # A name that cannot exist, told from the raw question (`Table.children`): one label below
        # a compiled service, or `<service>.<namespace>.svc.<zone>` of a service that is not
        # compiled (no such import, or its namespace is not exposed). `_uncompiled` answers both
        # NXDOMAIN for every type but SOA (NODATA, D5) after `Table.absent`; a valid question,
        # for the same reason as above, and `children` holds only zones `zone_of` maps them to.
        first = key[0] if key else 0
        if 0 < first < 64 and len(key) <= 259 and key[-2:] == b"\x00\x01" and self._synced:
            children = table.children
            zone = children.get(key[first + 1 : -4])
            if zone is None:
                at = first + 1
                second = key[at] if at < len(key) else 0
                if 0 < second < 64:
                    zone = table.svc_suffixes.get(key[at + second + 1 : -4])
                    if zone is not None and key[:-4] in children:
                        zone = None  # a compiled service, asked a type not compiled: the zone logic
            if zone is not None:
                qtype = (data[end - 4] << 8) | data[end - 3]  # as sent: lower() would turn type 65 (HTTPS) into 97
                if qtype != AXFR and qtype != IXFR and (table.dnssd is None or not table.dnssd.exists(key[:-4])):
                    return self._absent_child(data, end, key, zone, qtype)
        return self._parsed(data, tcp)

    def _parsed(self, data: bytes, tcp: bool) -> tuple[bytes | Forward | None, Query | None]:
        """`_handle` for what no lane answers: the full parse, then the compiled answers, the negative
        cache, or the zone logic."""
        if self.transfers is not None and not tcp and self.transfers.handles(data):
            # Zone transfers (transfer.py): no parsed query goes back, so no cache keeps the reply.
            return self.transfers.over_udp(data, lambda unsigned: self._handle(unsigned, False)[0]), None
        try:
            q = parse_query(data)
        except (Malformed, struct.error):
            return error_reply(data, FORMERR), None
        if q.edns_version:
            return error_reply(data, BADVERS, q), q
        limit = MAX_TCP if tcp else (q.udp_size if q.edns else MAX_UDP)
        key = data[12 : q.qend].lower()
        body = self.table.answers.get(key)
        if body is not None:
            return self.reply(q, body, limit), q
        body = self._negative.get(key)
        if body is not None:
            return self.reply(q, body, limit), q
        return self._uncompiled(q, limit, key), q

    def _edns_lane(self, data: bytes, end: int, key: bytes, body: Body, tcp: bool) -> tuple[bytes, Query]:
        """The reply to a query with an OPT record (`_ONE_OPT`) from a compiled body, without a parse
        (see `_handle`); `end`: where the question ends. The query is what `parse_query` makes of it."""
        payload = (data[-8] << 8) | data[-7]
        q = Query(data, (data[0] << 8) | data[1], (data[2] << 8) | data[3], end, key[:-4], (key[-4] << 8) | key[-3],
                  (key[-2] << 8) | key[-1], True, payload if payload > MAX_UDP else MAX_UDP, payload, data[-4] >= 0x80)
        return self.reply(q, body, MAX_TCP if tcp else q.udp_size), q

    def _absent_child(self, data: bytes, end: int, key: bytes, zone: bytes, qtype: int) -> tuple[bytes, Query]:
        """NXDOMAIN (NODATA for SOA) for a name `_lanes` found absent from the raw question:
        the header, the question as sent, the zone's SOA pointing into it, the OPT echoed.
        Never truncated (at most 12 + 259 + 54 + 11 bytes); cached on second sight, as in `_uncompiled`.

        Nothing is built per query: every name of one shape (`_absent`'s key: where the question
        ends, the zone, RD and CD, and the bytes from the type on, OPT record included)
        gets the same reply around its own ID and question, and the same query object, made by
        the first (`_absent_shape`). Observers read the name from the packet (querylog), or only
        its zone (metrics), which the shape fixes; the object's sizes, type and EDNS are every
        such packet's, so it is marked REUSED and the metrics count it from their precomputed
        slots. A random-subdomain flood's names are a few shapes in all: the service is not in the
        key, only where the question ends and the zone.
        """
        self._keep = False
        shape = (end, zone, (data[2] & 1) | (data[3] & 0x10), data[end - 4 :])  # (the zone's hash is cached)
        made = self._absent.get(shape)
        if made is None:
            made = self._absent_shape(data, end, key, len(zone), qtype, shape)
        return b"".join((data[:2], made[0], data[12:end], made[1])), made[2]

    def _absent_shape(self, data: bytes, end: int, key: bytes, zone_len: int, qtype: int,
                      shape: tuple) -> tuple[bytes, bytes, Query]:
        """`_absent_child`'s entry for `data`'s shape: (header bytes 2-11, what follows the question,
        the query object). Bounded: an adversary varying the OPT record's size makes a new shape per
        packet, and then pays what building each reply cost before."""
        q = Query(data, (data[0] << 8) | data[1], (data[2] << 8) | data[3], end, key[:-4], qtype, CLASS_IN)
        q.tally = REUSED
        soa = self.table.soa(8 + len(key) - zone_len)
        at = (data[2] & 1) | (data[3] & 0x10) | (2 if qtype == vocab.SOA else 0)  # RD, CD, NODATA
        if end == len(data):
            made = (_ABSENT_HEADS[at], soa, q)
        else:
            payload = (data[-8] << 8) | data[-7]
            q.edns, q.udp_size, q.payload, q.do = True, payload if payload > MAX_UDP else MAX_UDP, payload, data[-4] >= 0x80
            made = (_ABSENT_HEADS[at | 4], soa + data[-11:-6] + (_OPT_DO if q.do else _OPT_NO_DO), q)
        if len(self._absent) >= ABSENT_SHAPES:
            self._absent.clear()
        self._absent[shape] = made
        return made

    def _remember_negative(self, key: bytes, body: Body) -> None:
        """NXDOMAIN or NODATA for `key`: the same body until the table changes (bounded)."""
        if len(self._negative) >= NEGATIVE_CACHE_ENTRIES:
            self._negative.clear()
        self._negative[key] = body

    def reply(self, q: Query, body: Body, limit: int) -> bytes:
        authority = self.table.soa(body.zone_at) if body.soa else b""
        zone_case = None
        if body.zone_slots:
            # The reply spells the zone as the query does (`_cut` reads where).
            self._spelled = (body.zone_at, q.qend - 4, body.zone_slots, body.ends)
            spelled = q.raw[body.zone_at : q.qend - 4]
            if spelled != q.lname[body.zone_at - 12 :]:
                zone_case = spelled
        return assemble(q, body, authority, limit, zone_case)

    def _uncompiled(self, q: Query, limit: int, key: bytes) -> bytes | Forward:
        table = self.table
        zwire = table.zone_of(q.lname)
        if zwire is None:
            return Forward(q) if self.forwarding else error_reply(q.raw, REFUSED, q)
        if q.qclass != CLASS_IN or q.qtype in (AXFR, IXFR):
            return error_reply(q.raw, REFUSED, q)
        reversed_ = zwire in table.reverse_zones  # --reverse-cidr
        if table.behind and not reversed_:
            # Right after the sync: the service this name is of may not be compiled yet (Table.catch_up).
            # Compiled now, it answers from the table, and `absent` below reads its `owned` entry.
            table.catch_up(q.lname, len(zwire))
            body = table.answers.get(key)
            if body is not None:
                return self.reply(q, body, limit)
        if q.qtype != vocab.SOA and not reversed_ and table.synced and table.absent(q.lname, len(zwire)):
            # A name that cannot exist, told from its shape (random-subdomain floods): the shared
            # NXDOMAIN body, without the zone logic. Not in the negative cache, and in the packet
            # cache only when asked again (`resolve`): storing a reply costs more than this lane,
            # and unique names would only push out the replies that are costly to make.
            self._keep = False
            return self.reply(q, table.negative(vocab.NXDOMAIN, 12 + len(q.lname) - len(zwire)), limit)
        labels = split_labels(q.lname[: len(q.lname) - len(zwire)])
        if reversed_:
            ans = reverse.answer(labels, split_labels(zwire), q.qtype, table.ptr, table.forward_zones, table.ttl,
                                 table.config.ns_addresses)
        else:
            ans = compiler.answer(labels, q.qtype, table, table.ttl, table.config.ns_addresses)
            if ans.nxdomain and table.dnssd is not None and table.dnssd.exists(q.lname):
                ans = compiler.NODATA  # --dns-sd: a browsing name asked for a type it has no records of
        if ans.nxdomain and not table.synced:
            ans = compiler.NOT_SYNCED
        body = table.render(q.lname, len(zwire), ans)
        if ans.soa and not ans.answer and not ans.additional and ans.rcode != vocab.SERVFAIL and table.synced:
            self._remember_negative(key, body)
        elif not ans.nxdomain and ans.rcode == vocab.NOERROR:
            req = parse(labels)
            if req.kind is Kind.SERVICE:
                table.remember((req.namespace, req.service), key, body)
        return self.reply(q, body, limit)
