"""A transfer request read: its header, question and TSIG record, and the replies that carry no records.

`Transfers` reads every message it answers here first; what cannot be read as a query of one
question is `Unreadable` (the resolver's rules apply), and a readable one that is refused gets
`rcode_reply`: the header and question with the rcode, no records.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import dns.exception
import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype

from ..zone import vocab
from ..zone.wire import HEADER, QR, RD

TSIG = 250
TSIG_FIXED = b"\x00\xfa\x00\xff\x00\x00\x00\x00"  # a TSIG record's type, class (ANY) and TTL (0)


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
    if TSIG_FIXED not in data:  # no record of type TSIG, class ANY, TTL 0 anywhere: a find in C, no parse
        return False
    try:
        return read_request(data).tsig_start > 0
    except Unreadable:
        return False


def arcount(message: bytes) -> int:
    return (message[10] << 8) | message[11]



def rcode_reply(data: bytes, rcode: int, req: Request | None = None) -> bytes:
    """Header (and the question when readable) with `rcode`: no records."""
    qid, flags = struct.unpack_from(">HH", data)
    flags = QR | (flags & (RD | 0x7800)) | (rcode & 0xF)
    if req is None:
        return HEADER.pack(qid, flags, 0, 0, 0, 0)
    return HEADER.pack(qid, flags, 1, 0, 0, 0) + data[12 : req.qend]


def ixfr_serial(req: Request) -> int | None:
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
