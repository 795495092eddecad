"""One query in, one reply out: the rcode policy and the hot path.

`Resolver.handle` is the only place that decides what a packet gets:
dropped, FORMERR/NOTIMP/BADVERS/REFUSED, a compiled answer, an answer
computed by the zone logic, SERVFAIL-before-sync, or a hand-off to the
forwarder. It does no I/O; the transports call it with bytes and send what
it returns.
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


@dataclass(slots=True)
class Forward:
    """The query belongs upstream; the transport hands it to the forwarder."""

    query: Query


class Resolver:
    def __init__(self, table: Table, forwarding: bool = False) -> None:
        self.table = table
        self.forwarding = forwarding

    def handle(self, data: bytes, tcp: bool = False) -> bytes | Forward | None:
        """The reply to `data`, None to drop it, or Forward. Never raises on bad input."""
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
        if q.edns_version:
            return error_reply(data, BADVERS, q)
        limit = MAX_TCP if tcp else (q.udp_size if q.edns else MAX_UDP)
        body = self.table.answers.get(data[12 : q.qend].lower())
        if body is not None:
            return self.reply(q, body, limit)
        return self._uncompiled(q, limit)

    def reply(self, q: Query, body: Body, limit: int) -> bytes:
        authority = self.table.soa(body.zone_at) if body.soa else b""
        zone_case = None
        if body.zone_slots:
            spelled = q.raw[body.zone_at : q.qend - 4]
            if spelled != q.lname[body.zone_at - 12 :]:
                zone_case = spelled
        return assemble(q, body, authority, limit, zone_case)

    def _uncompiled(self, q: Query, limit: int) -> bytes | Forward:
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
        if not ans.nxdomain and ans.rcode == zone.NOERROR:
            req = parse(labels)
            if req.kind is Kind.SERVICE:
                table.remember((req.namespace, req.service), q.raw[12 : q.qend].lower(), body)
        return self.reply(q, body, limit)
