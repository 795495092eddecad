"""DNS wire format: reading questions and writing replies, by hand and fast.

The server never builds a message object per query. A reply is the query's
header (ID, RD/CD copied), the query's own question bytes (so the name's case
is echoed exactly), and a body compiled ahead of time whose names point back
into that question. Because the lookup key is the lower-cased question name,
the question's layout -- and so every pointer -- is known when the body is
compiled; a query costs a parse, a dict lookup and a few byte copies.

Failure policy (as dnspython's nanonameserver and miekg/dns): no usable
header -> drop; a header but a malformed question -> FORMERR.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .vocab import AAAA, CLASS_IN, NS, OPT, PTR, SOA, SRV, TXT, A, Absolute, Answer, Record
from .vocab import wire_length as _wire_len

HEADER = struct.Struct(">HHHHHH")
U16 = struct.Struct(">H")
RR_FIXED = struct.Struct(">HHIH")  # type, class, ttl, rdlength
SRV_FIXED = struct.Struct(">HHH")
SOA_TIMERS = struct.Struct(">IIIII")
SOA_REFRESH, SOA_RETRY, SOA_EXPIRE = 7200, 1800, 86400  # CoreDNS's SOA timers (plugin/backend_lookup.go)

QR, AA, TC, RD, CD = 0x8000, 0x0400, 0x0200, 0x0100, 0x0010
OPCODE_MASK = 0x7800
MAX_UDP = 512  # without EDNS (RFC 1035)
MAX_TCP = 65535


class Malformed(Exception):
    """The question or EDNS record cannot be read: answer FORMERR."""


REUSED = ("reused",)  # Query.tally of a query object the caches return again
ONCE = ("once",)  # Query.tally of a query object made for one packet


@dataclass(slots=True)
class Query:
    """What the server needs from a query; `raw` is kept for forwarding."""

    raw: bytes
    id: int
    flags: int
    qend: int  # offset just past the question (name + type + class)
    lname: bytes  # question name in wire form, lower-cased: the lookup key
    qtype: int
    qclass: int
    edns: bool = False
    udp_size: int = MAX_UDP
    payload: int = MAX_UDP  # the advertised size as sent, echoed in the reply's OPT (as CoreDNS does)
    do: bool = False
    edns_version: int = 0
    # Observers' scratch: a tuple or list, whose first item is all a cache hit's count tests. ONCE: this
    # object was made for one packet. The resolver sets REUSED when it keeps the object to return with
    # every cache hit of the same reply, or with every missing name of one shape (same rcode and
    # sizes), and the metrics then keep there the counter slots they computed once (`Metrics.observe`).
    tally: Any = field(default=ONCE, compare=False, repr=False)


def parse_query(data: bytes) -> Query:
    """Read header, question and EDNS; Malformed where a reply is still possible.

    Callers check `len(data) >= 12` first: shorter input has no ID to reply to.
    """
    qid, flags, qd, an, ns, ar = HEADER.unpack_from(data)
    if qd != 1:
        raise Malformed(f"{qd} questions")
    n = len(data)
    i = 12
    while True:
        if i >= n:
            raise Malformed("question name runs past the end")
        length = data[i]
        if length == 0:
            break
        if length > 63:
            raise Malformed("compressed or extended label in question")
        i += length + 1
    name_end = i + 1
    if name_end - 12 > 255:
        raise Malformed("question name longer than 255 bytes")
    qend = name_end + 4
    if qend > n:
        raise Malformed("question truncated")
    qtype, qclass = struct.unpack_from(">HH", data, name_end)
    q = Query(data, qid, flags, qend, data[12:name_end].lower(), qtype, qclass)
    if an or ns or ar:
        _read_edns(q, data, qend, an + ns, ar)
    return q


def _skip_name(data: bytes, i: int) -> int:
    """Offset just past the name at `i`, checking it whole: pointers go strictly backwards (so no loop)
    and stay inside the message, labels are ordinary, the name is at most 255 bytes."""
    n = len(data)
    end = 0
    size = 0
    while True:
        if i >= n:
            raise Malformed("record name runs past the end")
        length = data[i]
        if length == 0:
            return end or i + 1
        if length & 0xC0 == 0xC0:
            if i + 2 > n:
                raise Malformed("truncated pointer")
            target = ((length & 0x3F) << 8) | data[i + 1]
            if target >= i:
                raise Malformed("compression pointer that does not point backwards")
            end = end or i + 2
            i = target
            continue
        if length > 63:
            raise Malformed("extended label type")
        size += length + 1
        if size > 254:
            raise Malformed("record name longer than 255 bytes")
        i += length + 1


def _read_edns(q: Query, data: bytes, i: int, skip: int, ar: int) -> None:
    n = len(data)
    seen_opt = False
    for index in range(skip + ar):
        start = i
        i = _skip_name(data, i)
        if i + 10 > n:
            raise Malformed("record truncated")
        rtype, rclass, ttl, rdlen = RR_FIXED.unpack_from(data, i)
        i += 10 + rdlen
        if i > n:
            raise Malformed("record data runs past the end")
        if rtype == OPT:
            # RFC 6891 6.1.1: one OPT at most, in the additional section, owned by the root.
            if seen_opt or index < skip or data[start] != 0:
                raise Malformed("bad, misplaced or repeated OPT record")
            check_options(data, i - rdlen, i)
            seen_opt = True
            q.edns = True
            q.udp_size = max(MAX_UDP, rclass)
            q.payload = rclass
            q.edns_version = (ttl >> 16) & 0xFF
            q.do = bool(ttl & 0x8000)


def check_options(data: bytes, i: int, end: int) -> None:
    """Each EDNS option is code, length, data, and the last one ends exactly at the record's end."""
    while i < end:
        if i + 4 > end:
            raise Malformed("truncated EDNS option")
        i += 4 + U16.unpack_from(data, i + 2)[0]
    if i != end:
        raise Malformed("EDNS option runs past its record")


# --------------------------------------------------------------------------- names


def encode_labels(labels: tuple[str, ...] | list[str]) -> bytes:
    out = bytearray()
    for label in labels:
        raw = label.encode()
        if not 0 < len(raw) <= 63:
            raise ValueError(f"label {label!r} is not 1..63 bytes")
        out.append(len(raw))
        out += raw
    return bytes(out)


_SVC_SUFFIXES: dict[str, bytes] = {}  # `<namespace>.svc` in wire form, by namespace (bounded below)


def service_labels(name: str, namespace: str) -> bytes:
    """`<name>.<namespace>.svc` in wire form: `encode_labels((name, namespace, "svc"))`, ValueError
    alike. A sync builds it for every service (twice: its SRV target and its `children` entry), from
    a few namespaces: their part is kept, up to a few thousand namespaces."""
    suffix = _SVC_SUFFIXES.get(namespace)
    if suffix is None:
        suffix = encode_labels((namespace, "svc"))
        if len(_SVC_SUFFIXES) >= 4096:
            _SVC_SUFFIXES.clear()
        _SVC_SUFFIXES[namespace] = suffix
    raw = name.encode()
    if not 0 < len(raw) <= 63:
        raise ValueError(f"label {name!r} is not 1..63 bytes")
    return bytes((len(raw),)) + raw + suffix


def pointer(offset: int) -> bytes:
    return U16.pack(0xC000 | offset)


def label_offsets(lname: bytes) -> list[int]:
    """Offset (from the name's start) of each label of a wire name, root excluded."""
    offsets = []
    i = 0
    while i < len(lname) and lname[i]:
        offsets.append(i)
        i += lname[i] + 1
    return offsets


def split_labels(lname: bytes) -> tuple[str, ...]:
    out = []
    i = 0
    while i < len(lname) and lname[i]:
        out.append(lname[i + 1 : i + 1 + lname[i]].decode("latin-1"))
        i += lname[i] + 1
    return tuple(out)


# --------------------------------------------------------------------------- rendering


class Body(NamedTuple):
    """A compiled reply for one question layout: everything after the question.

    `ends` are the end offsets of each record inside `body`, used to truncate
    without re-encoding; `zone_slots` are where (inside `body`) the zone name is spelled out
    (SRV targets are never compressed, RFC 2782), to be re-cased for queries
    that spell the zone in mixed case. A named tuple, as vocab.Record says why.
    """

    flags: int  # AA and rcode bits
    an: int
    ns: int
    ar: int
    body: bytes
    ends: tuple[int, ...]
    zone_slots: tuple[int, ...] = ()
    soa: bool = False  # append the zone SOA (authority) at query time: it carries the serial
    zone_at: int = 12  # where the zone starts in the question, for that SOA
    split: int = 0  # --local-cluster: the first `split` answer records are the local group (0: one group)


QUESTION_POINTER = b"\xc0\x0c"  # a pointer to the question name, the owner of most records


def address_record(rtype: int, ttl: int, text: str) -> bytes:
    """Type, class, TTL, length and address of an A/AAAA record (an IPv4-mapped IPv6 A as its IPv4)."""
    if rtype == A:
        try:
            rdata = socket.inet_pton(socket.AF_INET, text)  # not ipaddress: this runs for every address of a sync
        except OSError:
            ip = ipaddress.ip_address(text)
            rdata = (ip.ipv4_mapped or ip).packed if ip.version == 6 else ip.packed
    else:
        try:
            rdata = socket.inet_pton(socket.AF_INET6, text)
        except OSError:
            rdata = ipaddress.IPv6Address(text).packed
    return RR_FIXED.pack(rtype, CLASS_IN, ttl, len(rdata)) + rdata


class NameCache:
    """What rendering derives from a name or an address, kept across the answers of one service.

    A service of 1000 endpoints x 100 ports renders the same 1000 targets and addresses in every
    one of its 300 answers; deriving their bytes once is most of what makes compiling it cheap.
    Everything in it is a function of its key alone, so it may outlive a compile: the table keeps a
    headless service's for its next compile (a readiness flip renders the same targets again).
    """

    __slots__ = ("addresses", "_lowered", "_targets", "_lengths", "_prefixes", "_srv")

    def __init__(self) -> None:
        self.addresses: dict[tuple[int, int, str], bytes] = {}  # (type, ttl, address) -> the record after its owner
        self._lowered: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._targets: dict[tuple[str, ...], tuple[bytes, tuple[str, ...]]] = {}
        self._lengths: dict[tuple[str, ...], int] = {}
        self._prefixes: dict[tuple[str, ...], tuple[tuple[tuple[str, ...], bytes], ...]] = {}
        self._srv: dict[tuple[bytes, int], dict[tuple[str, ...], tuple[bytes, bytes, tuple[str, ...], int]]] = {}

    def size(self) -> int:
        """How many names and addresses it holds (the table bounds a kept one by this)."""
        return len(self.addresses) + len(self._lowered)

    def lowered(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        found = self._lowered.get(labels)
        if found is None:
            found = self._lowered[labels] = tuple(label.lower() for label in labels)
        return found

    def target(self, labels: tuple[str, ...]) -> tuple[bytes, tuple[str, ...]]:
        """An SRV target's labels as written in the record, and lower-cased (what glue owners match)."""
        found = self._targets.get(labels)
        if found is None:
            found = self._targets[labels] = (encode_labels(labels), self.lowered(labels))
        return found

    def wire_len(self, labels: tuple[str, ...]) -> int:
        found = self._lengths.get(labels)
        if found is None:
            found = self._lengths[labels] = _wire_len(labels)
        return found

    def prefixes(self, labels: tuple[str, ...]) -> tuple[tuple[tuple[str, ...], bytes], ...]:
        """For each way to cut `labels`, longest suffix first: (the suffix lower-cased, the labels
        before it encoded). A name compressed against a question is the first cut whose suffix the
        question holds (Renderer.name); the glue owners no SRV target points to take it per answer."""
        found = self._prefixes.get(labels)
        if found is None:
            lowered = self.lowered(labels)
            found = self._prefixes[labels] = tuple(
                (lowered[i:], encode_labels(labels[:i])) for i in range(len(labels) + 1)
            )
        return found

    def srv_targets(self, zone: bytes, ttl: int) -> dict[tuple[str, ...], tuple[bytes, bytes, tuple[str, ...], int]]:
        """For SRV records in `zone` (wire form) with `ttl`: target labels ->
        (type, class, TTL and length; the target spelled out with the zone; the target lower-cased;
        the length of its labels before the zone). Filled by Renderer.render."""
        found = self._srv.get((zone, ttl))
        if found is None:
            found = self._srv[(zone, ttl)] = {}
        return found


class Renderer:
    """Encodes `Answer`s for one question layout (name length and zone position).

    Owner names point into the question (`qname_at` 12); names below the zone
    are written as their own labels plus a pointer to the zone's position in
    the question, which is what echoes the query's case.
    """

    def __init__(self, lname: bytes, zone_len: int, names: "NameCache | None" = None) -> None:
        self.names = names if names is not None else NameCache()
        self.qlen = len(lname) + 4
        self.zone_at = 12 + len(lname) - zone_len  # offset of the zone inside the question
        self.zone_lname = lname[len(lname) - zone_len :]
        self.lname = lname
        self._suffixes: dict[tuple[str, ...], int] | None = None  # see `suffixes`
        # SRV targets already written by `render` (lower-cased labels -> message offset).
        self.targets: dict[tuple[str, ...], int] = {}

    @property
    def suffixes(self) -> dict[tuple[str, ...], int]:
        """Suffixes of the question name that owners may point to: relative labels -> offset.

        Derived on first use: most answers (addresses, SRV answers and the glue their targets
        point to) name nothing but the question, and a whole-table compile renders 60,000 of them."""
        if self._suffixes is None:
            lname = self.lname
            rel = split_labels(lname[: self.zone_at - 12] + b"\x00")
            offsets = label_offsets(lname)
            self._suffixes = {rel[i:]: 12 + offsets[i] for i in range(len(rel))}
            self._suffixes[()] = self.zone_at
        return self._suffixes

    def name(self, labels: tuple[str, ...]) -> bytes:
        """A name below the zone, compressed against the question."""
        suffixes = self.suffixes
        for suffix, prefix in self.names.prefixes(labels):
            at = suffixes.get(suffix)
            if at is not None:
                return prefix + pointer(at)
        raise AssertionError("the zone suffix is always present")

    def rdata(self, rtype: int, data: object) -> bytes:
        """The data of a TXT, PTR or NS record (A/AAAA and SRV are written by `render` itself)."""
        if rtype == TXT:
            text = data.encode()  # type: ignore[attr-defined]
            return bytes([len(text)]) + text
        if rtype == PTR:
            if isinstance(data, Absolute):  # a reverse zone's PTR names a forward-zone name: spelled out whole
                return encode_labels(data.labels) + b"\x00"
            return self.name(data)  # type: ignore[arg-type]  # DNS-SD browsing: below the zone, like NS
        if rtype == NS:
            return self.name(data)  # type: ignore[arg-type]
        raise ValueError(f"cannot render type {rtype}")

    def render(self, ans: Answer, soa_ttl: int = 0, soa_min: int = 0, serial: int = 0, *, short: bool = False) -> Body:
        """The body of `ans`; `short`: the caller knows every name in it fits in 255 bytes (no check).

        One loop writes every record: a service of 1000 endpoints x 100 ports renders 140,000 of
        them, so the bytes derived from a target or an address come from the service's NameCache
        and the loop calls nothing per A/AAAA or SRV record but dict and struct methods.
        """
        if not short:
            ans = self.writable(ans)
        self.targets = targets = {}
        out = bytearray()
        ends: list[int] = []
        slots: list[int] = []
        if ans.apex_soa:
            out += self.soa(soa_ttl, soa_min, serial)
            ends.append(len(out))
        # An SRV answer stops one record past what the largest reply (65535 bytes) can hold after
        # header and question: truncation keeps the records that fit and sets TC exactly as with
        # all of them, since there is always one more than fits. (1000 endpoints x 100 ports: a
        # `_port._proto` name's 2000 records are 84 KB.) Address sets stay whole for --loadbalance.
        room = MAX_TCP - 12 - self.qlen if ans.answer and ans.answer[0].rtype == SRV else sys.maxsize
        names = self.names
        lowered_of, addresses = names.lowered, names.addresses
        zone = self.zone_lname
        at_body = 12 + self.qlen  # message offset of the body
        srv_ttl, srv_parts = -1, {}  # the NameCache's SRV parts for the TTL of the last SRV record
        end, slot, first_at, srv_fixed = ends.append, slots.append, targets.setdefault, SRV_FIXED.pack
        count = 0
        for rec in ans.answer + ans.additional:
            rtype, owner, ttl, data = rec.rtype, rec.owner, rec.ttl, rec.data
            if owner is None:
                out += QUESTION_POINTER
            else:
                # SRV targets already written (`targets`): glue owners point there, as miekg/dns
                # compresses them, so the same records fit a size limit as in CoreDNS.
                at = targets.get(lowered_of(owner))
                out += pointer(at) if at is not None else self.name(owner)
            if rtype == A or rtype == AAAA:  # most records of a large answer: the same bytes in every answer
                key = (rtype, ttl, data)
                fixed = addresses.get(key)
                if fixed is None:
                    fixed = addresses[key] = address_record(rtype, ttl, data)
                out += fixed
            elif rtype == SRV:
                prio, weight, port, target = data  # type: ignore[misc]
                if ttl != srv_ttl:
                    srv_ttl, srv_parts = ttl, names.srv_targets(zone, ttl)
                parts = srv_parts.get(target)
                if parts is None:
                    spelled, lowered = names.target(target)
                    parts = srv_parts[target] = (RR_FIXED.pack(SRV, CLASS_IN, ttl, 6 + len(spelled) + len(zone)),
                                                 spelled + zone, lowered, len(spelled))
                fixed, rdata, lowered, spelled_len = parts
                start = len(out) + 10 + 6  # where the target starts in the body
                if at_body + start < 0x4000:
                    first_at(lowered, at_body + start)
                slot(start + spelled_len)  # the zone after the target's own labels
                out += fixed
                out += srv_fixed(prio, weight, port)
                out += rdata
            else:
                rdata = self.rdata(rtype, data)
                out += RR_FIXED.pack(rtype, CLASS_IN, ttl, len(rdata))
                out += rdata
            end(len(out))
            count += 1
            if len(out) > room:
                break
        answers = min(count, len(ans.answer))
        an = answers + (1 if ans.apex_soa else 0)
        return Body(AA | ans.rcode, an, 0, count - answers, bytes(out), tuple(ends), tuple(slots), ans.soa, self.zone_at,
                    ans.local if 0 < ans.local < an else 0)

    def soa(self, ttl: int, minimum: int, serial: int) -> bytes:
        return soa_record(self.zone_at, ttl, minimum, serial)

    def writable(self, ans: Answer) -> Answer:
        """`ans` without records whose owner or SRV target would be longer than 255 bytes.

        Such a name cannot exist in DNS (every resolver rejects the whole reply),
        yet four valid 63-byte labels (host, cluster, service, namespace) make
        one. An answer left with no records becomes NODATA.
        """
        room = 255 - len(self.zone_lname)
        wire_len = self.names.wire_len

        def fits(rec: Record) -> bool:
            if rec.owner is not None and wire_len(rec.owner) > room:
                return False
            if isinstance(rec.data, Absolute):
                return _wire_len(rec.data.labels) <= 254  # its own length, whatever the question's zone
            if rec.rtype == PTR:
                return _wire_len(rec.data) <= room  # a DNS-SD target below the zone
            return rec.rtype != SRV or wire_len(rec.data[3]) <= room

        for rec in ans.answer + ans.additional:
            # Addresses answered for the question name (most records) always fit: no call for them.
            if (rec.owner is not None or (rec.rtype != A and rec.rtype != AAAA)) and not fits(rec):
                break
        else:
            return ans
        answer = tuple(rec for rec in ans.answer if fits(rec))
        if not answer and not ans.apex_soa:
            return Answer(ans.rcode, soa=True)
        return Answer(ans.rcode, answer, tuple(rec for rec in ans.additional if fits(rec)), ans.soa, ans.apex_soa)


def address_run(body: Body) -> tuple[int, int, int] | None:
    """Where `body`'s answer section holds its A/AAAA set, for --loadbalance: (start, end, size).

    Returns the offsets (inside `body.body`) of two or more A/AAAA answer records that sit side by
    side and are all `size` bytes long, else None. Rotating that run by whole records keeps
    `body.ends` (so truncation still cuts between records) and every other record, including SRV
    targets' `zone_slots`, in place. Every address answer this server compiles has that shape: one
    family, owners pointing at the question. Anything else (a lone record, SRV, NS, SOA) is None.
    """
    data, ends = body.body, body.ends
    start = end = size = 0
    count = 0
    at = 0
    for i in range(body.an):
        rec_end = ends[i]
        j = at
        while 0 < data[j] < 0xC0:  # owner labels, then a pointer or the root
            j += data[j] + 1
        j += 2 if data[j] else 1
        rtype = (data[j] << 8) | data[j + 1]
        if rtype == A or rtype == AAAA:
            if not count:
                start, size = at, rec_end - at
            elif at != end or rec_end - at != size:
                return None  # not one run of equal records (never compiled): leave the order alone
            end = rec_end
            count += 1
        at = rec_end
    return (start, end, size) if count > 1 else None


def soa_record(zone_at: int, ttl: int, minimum: int, serial: int) -> bytes:
    """`Z <ttl> IN SOA ns.dns.Z. hostmaster.Z. serial 7200 1800 86400 minimum` (contract 3.2)."""
    zone = pointer(zone_at)
    rdata = b"\x02ns\x03dns" + zone + b"\x0ahostmaster" + zone + SOA_TIMERS.pack(serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, minimum)
    return zone + RR_FIXED.pack(SOA, CLASS_IN, ttl, len(rdata)) + rdata


# --------------------------------------------------------------------------- replies


def opt_record(q: Query) -> bytes:
    """The reply's OPT: version 0, the client's UDP size, DO copied, no options (CoreDNS SizeAndDo)."""
    return b"\x00" + RR_FIXED.pack(OPT, q.payload, 0x8000 if q.do else 0, 0)




def assemble(q: Query, body: Body, authority: bytes, limit: int, zone_case: bytes | None = None) -> bytes:
    """Header + question + compiled body (+ SOA authority) (+ OPT), truncated to `limit`.

    A body holds either records (positive answers) or nothing but the SOA
    authority (NODATA, NXDOMAIN), never both, so sections stay in wire order.
    """
    data = body.body
    if zone_case is not None and body.zone_slots:
        patched = bytearray(data)
        for at in body.zone_slots:
            patched[at : at + len(zone_case)] = zone_case
        data = bytes(patched)
    flags = QR | (q.flags & (RD | CD | OPCODE_MASK)) | body.flags
    opt = opt_record(q) if q.edns else b""
    head = q.raw[12 : q.qend]
    if 12 + len(head) + len(data) + len(authority) + len(opt) > limit:
        return _truncate(q, flags, head, data, authority, body, opt, limit)
    return HEADER.pack(q.id, flags, 1, body.an, 1 if authority else 0, body.ar + (1 if opt else 0)) + head + data + authority + opt


def _truncate(q: Query, flags: int, head: bytes, data: bytes, authority: bytes, body: Body, opt: bytes, limit: int) -> bytes:
    """miekg/dns Msg.Truncate: keep records in order while they fit, TC if any was dropped."""
    room = limit - len(opt) - 12 - len(head)
    kept = 0
    for end in body.ends:
        if end > room:
            break
        kept += 1
    kept_an = min(kept, body.an)
    kept_ns = 1 if authority and len(authority) <= room else 0
    records = data[: body.ends[kept - 1]] if kept else b""
    flags |= TC if kept < len(body.ends) or (authority and not kept_ns) else 0
    return (
        HEADER.pack(q.id, flags, 1, kept_an, kept_ns, kept - kept_an + (1 if opt else 0))
        + head
        + records
        + (authority if kept_ns else b"")
        + opt
    )


def error_reply(data: bytes, rcode: int, q: Query | None = None) -> bytes:
    """A bare reply with `rcode`: header only, or header + question when it was readable.

    REFUSED/NOTIMP/FORMERR carry no SOA (CoreDNS writes these at server level).
    """
    qid, flags = struct.unpack_from(">HH", data)
    flags = QR | (flags & (RD | CD | OPCODE_MASK)) | (rcode & 0xF)
    if q is None:
        return HEADER.pack(qid, flags, 0, 0, 0, 0)
    opt = b""
    if q.edns:
        ext = (rcode >> 4) << 24
        opt = b"\x00" + RR_FIXED.pack(OPT, q.udp_size, ext | (0x8000 if q.do else 0), 0)
    return HEADER.pack(qid, flags, 1, 0, 0, 1 if opt else 0) + data[12 : q.qend] + opt
