"""One query in, one reply out: the rcode policy and the hot path.

`Resolver.handle` is the only place that decides what a packet gets:
dropped, FORMERR/NOTIMP/BADVERS/REFUSED, a compiled answer, an answer
computed by the zone logic, SERVFAIL-before-sync, or a hand-off to the
forwarder. It does no I/O; the transports call it with bytes and send what
it returns.

Two bounded caches sit in front of that, both emptied whenever the table's
generation changes (any change to the data bumps it, and the SOA serial with
it) and both bypassed while the sources are not synced (when NXDOMAIN must
become SERVFAIL):

* the packet cache maps a UDP query's bytes after the ID to its reply's
  bytes after the ID. A reply is a pure function of those bytes and the
  table, so a repeated query costs one dict lookup and a concatenation;
  dnsperf and real stub resolvers repeat the same few packet shapes.
* the negative cache maps a question (the lookup key) to the NXDOMAIN/NODATA
  body the zone logic computed for it, so a new packet for a name that does
  not exist (search-path expansions are most of a cluster's traffic) skips
  the zone logic too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from . import compile as zone
from .names import Kind, parse
from .table import Table
from .wire import (
    BADVERS,
    FORMERR,
    MAX_TCP,
    MAX_UDP,
    NOTIMP,
    REFUSED,
    Body,
    Malformed,
    Query,
    assemble,
    error_reply,
    parse_query,
    split_labels,
)

AXFR, IXFR = 252, 251
CLASS_IN = 1
PACKET_CACHE_ENTRIES = 32768  # distinct UDP query packets whose replies are kept
PACKET_CACHE_BYTES = 24 << 20  # and their memory, estimated (full: emptied, then refilled)
_ENTRY_OVERHEAD = 400  # per cached packet beyond its bytes: dict slot, tuple, Query and object headers
NEGATIVE_CACHE_ENTRIES = 32768  # questions with a cached NXDOMAIN/NODATA body (the bodies are shared)
_CACHEABLE_RCODES = (0, 3, 5)  # NOERROR, NXDOMAIN, REFUSED: never FORMERR (garbage) or SERVFAIL


@dataclass(slots=True)
class Forward:
    """The query belongs upstream; the transport hands it to the forwarder."""

    query: Query


class Resolver:
    def __init__(self, table: Table, forwarding: bool = False) -> None:
        self.table = table
        self.forwarding = forwarding
        # The query the last `handle` call parsed (None if it could not): the transport passes it
        # to the metrics observer right after, so qtype, DO bit and zone are never parsed twice.
        self.last_query: Query | None = None
        self._generation = table.generation
        self._packets: dict[bytes, tuple[bytes, Query]] = {}  # query[2:] -> (reply[2:], parsed query)
        self._packet_bytes = 0
        self._negative: dict[bytes, Body] = {}  # lookup key -> NXDOMAIN/NODATA body

    def handle(self, data: bytes, tcp: bool = False) -> bytes | Forward | None:
        """The reply to `data`, None to drop it, or Forward. Never raises on bad input."""
        table = self.table
        if table.generation != self._generation:
            self.flush()
        if tcp:
            return self._handle(data, True)
        hit = self._packets.get(data[2:])
        if hit is not None and table.synced:
            self.last_query = hit[1]
            return data[:2] + hit[0]
        reply = self._handle(data, False)
        q = self.last_query
        if type(reply) is bytes and q is not None and reply[3] & 0x0F in _CACHEABLE_RCODES and not q.edns_version and table.synced:
            size = 2 * len(data) + len(reply) + _ENTRY_OVERHEAD  # key + the Query's copy of the packet + reply
            self._packet_bytes += size
            if len(self._packets) >= PACKET_CACHE_ENTRIES or self._packet_bytes > PACKET_CACHE_BYTES:
                self._packets.clear()
                self._packet_bytes = size
            self._packets[data[2:]] = (reply[2:], q)
        return reply

    def flush(self) -> None:
        """Forget every cached reply (the table changed)."""
        self._generation = self.table.generation
        self._packets.clear()
        self._packet_bytes = 0
        self._negative.clear()

    def _handle(self, data: bytes, tcp: bool) -> bytes | Forward | None:
        self.last_query = None
        if len(data) < 12:
            return None  # no header: nothing to reply to
        if data[2] & 0x80:
            return None  # a response, not a query
        if data[2] & 0x78:
            return error_reply(data, NOTIMP)  # only opcode QUERY is implemented
        try:
            q = parse_query(data)
        except (Malformed, struct.error):
            return error_reply(data, FORMERR)
        self.last_query = q
        if q.edns_version:
            return error_reply(data, BADVERS, q)
        limit = MAX_TCP if tcp else (q.udp_size if q.edns else MAX_UDP)
        key = data[12 : q.qend].lower()
        body = self.table.answers.get(key)
        if body is not None:
            return self.reply(q, body, limit)
        body = self._negative.get(key)
        if body is not None and self.table.synced:
            return self.reply(q, body, limit)
        return self._uncompiled(q, limit, key)

    def reply(self, q: Query, body: Body, limit: int) -> bytes:
        authority = self.table.soa(body.zone_at) if body.soa else b""
        zone_case = None
        if body.zone_slots:
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
        labels = split_labels(q.lname[: len(q.lname) - len(zwire)])
        ans = zone.answer(labels, q.qtype, table, table.ttl, table.config.ns_addresses)
        if ans.nxdomain and not table.synced:
            ans = zone.NOT_SYNCED
        body = table.render(q.lname, len(zwire), ans)
        if ans.soa and not ans.answer and not ans.additional and ans.rcode != zone.SERVFAIL and table.synced:
            if len(self._negative) >= NEGATIVE_CACHE_ENTRIES:
                self._negative.clear()
            self._negative[key] = body  # NXDOMAIN or NODATA: the same body until the table changes
        elif not ans.nxdomain and ans.rcode == zone.NOERROR:
            req = parse(labels)
            if req.kind is Kind.SERVICE:
                table.remember((req.namespace, req.service), key, body)
        return self.reply(q, body, limit)
