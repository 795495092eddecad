"""Which upstream replies the forwarder may accept (RFC 5452), and dns-0x20.

Pure functions, no I/O: `forwarder.py` calls them on every datagram or TCP
message an upstream socket receives. A reply is accepted only when it carries
the ID we sent, is a response to a QUERY, has exactly one question equal to
the one we sent (name case-insensitively, or exactly under dns-0x20; type and
class exactly), and is a well-formed message: every record framed inside the
message with valid names and nothing after the last one, at most one OPT (in
the additional section, owned by the root, its options framed), and the data
of the common types (A, AAAA, NS, CNAME, PTR, DNAME, MX, SOA, SRV, TXT) in
their own shape. The data of other types is passed on as opaque bytes
(RFC 3597), as a forwarder must. Anything else gets a reason, which the
forwarder counts in `mcsdns_forward_mismatched_replies_total{reason}`.
"""

from __future__ import annotations

import random

from ..zone.vocab import AAAA, CLASS_CH, CLASS_IN, CNAME, DNAME, MX, NS, OPT, PTR, SOA, SRV, TXT, A
from ..zone.wire import Malformed, check_options

# The reasons a reply is dropped, in the order they are checked (`source` is checked by the
# socket layer before anything is read); exported so the metric shows every one from the start.
REASONS = ("source", "malformed", "id", "not_response", "opcode", "no_question", "question_count",
           "name", "case", "type", "class")

TC_BYTE = 0x02  # TC in the third header byte
IN, CH = CLASS_IN, CLASS_CH
SPF = 99
_NAME_ONLY = frozenset({NS, CNAME, PTR, DNAME})  # one name is the whole data
_TXT = frozenset({TXT, SPF})  # one or more <character-string>s
_IN_ONLY = {A: 4, AAAA: 16}  # fixed sizes, in class IN only (CH A is a name and a 16-bit address)
MAX_HOPS = 16  # compression pointers in one name: what dnspython accepts (miekg/dns: 126)
_bits = random.SystemRandom()


def checks_data(rtype: int, rclass: int) -> bool:
    """Whether `check_reply` checks the data of records of this type and class (else opaque bytes)."""
    return (rtype in _NAME_ONLY or rtype in _TXT or rtype in (MX, SOA)
            or (rclass == IN and rtype in (A, AAAA, SRV)) or (rclass == CH and rtype == A))  # fmt: skip


def check_reply(data: bytes, qid: int, question: bytes, exact_case: bool) -> tuple[str | None, bytes]:
    """(None, the reply to use) when `data` answers the query, else (reason, b"").

    `question` is the question as sent: wire name, type, class. A truncated
    reply (TC=1) whose records do not parse is accepted as its header and
    question alone, with the counts set to match (what CoreDNS's forward does
    with a TC reply it cannot unpack): the client or the TCP retry takes it
    from there.
    """
    n = len(data)
    if n < 12:
        return "malformed", b""
    if (data[0] << 8) | data[1] != qid:
        return "id", b""
    if not data[2] & 0x80:
        return "not_response", b""
    if data[2] & 0x78:  # only QUERY is forwarded (resolve.py answers other opcodes NOTIMP itself)
        return "opcode", b""
    qd = (data[4] << 8) | data[5]
    if qd != 1:
        return ("no_question" if qd == 0 else "question_count"), b""
    qend = 12 + len(question)
    name_end = qend - 4
    got, sent = data[12:name_end], question[:-4]
    if got != sent:
        if got.lower() != sent.lower():
            return "name", b""
        if exact_case:
            return "case", b""
    if data[name_end : name_end + 2] != question[-4:-2]:
        return ("type" if n >= name_end + 2 else "malformed"), b""
    if data[name_end + 2 : qend] != question[-2:]:
        return ("class" if n >= qend else "malformed"), b""
    try:
        _check_records(data, qend)
    except Malformed:
        if not data[2] & TC_BYTE:
            return "malformed", b""
        return None, data[:6] + b"\x00\x00\x00\x00\x00\x00" + data[12:qend]
    return None, data


def _check_records(data: bytes, i: int) -> None:
    """Every record after the question is well framed and the message ends with the last one."""
    n = len(data)
    an, ns, ar = (data[6] << 8) | data[7], (data[8] << 8) | data[9], (data[10] << 8) | data[11]
    seen_opt = False
    for index in range(an + ns + ar):
        owner = i
        i = _skip_name(data, i, n)
        if i + 10 > n:
            raise Malformed("record truncated")
        rtype, rclass = (data[i] << 8) | data[i + 1], (data[i + 2] << 8) | data[i + 3]
        rdlen = (data[i + 8] << 8) | data[i + 9]
        start, i = i + 10, i + 10 + rdlen
        if i > n:
            raise Malformed("record data runs past the end")
        if rtype == OPT:
            if seen_opt or index < an + ns or data[owner] != 0:
                raise Malformed("bad, misplaced or repeated OPT record")
            check_options(data, start, i)
            seen_opt = True
        elif checks_data(rtype, rclass):
            _check_data(data, rtype, rclass, start, i)
    if i != n:
        raise Malformed("bytes after the last record")


def _check_data(data: bytes, rtype: int, rclass: int, start: int, end: int) -> None:
    """The data of a common type has its own shape; its names may point back into the message."""
    size = end - start
    fixed = _IN_ONLY.get(rtype) if rclass == IN else None
    if fixed is not None:
        if size != fixed:
            raise Malformed(f"type {rtype} data of {size} bytes")
        return
    if rtype in _TXT:
        i = start
        while i < end:
            i += data[i] + 1
        if i != end or size == 0:
            raise Malformed("TXT strings do not fill the data")
        return
    if rtype == SOA:
        at = _name_in(data, _name_in(data, start, end), end) + 20
    elif rtype == MX:
        at = _name_in(data, start + 2, end)
    elif rtype == SRV:
        at = _name_in(data, start + 6, end)
    elif rtype == A:  # class CH: a domain name and a 16-bit address
        at = _name_in(data, start, end, compressed=False) + 2
    else:
        at = _name_in(data, start, end, compressed=rtype != DNAME)
    if at != end:
        raise Malformed(f"type {rtype} data is {size} bytes, its fields {at - start}")


def _name_in(data: bytes, i: int, end: int, compressed: bool = True) -> int:
    """Offset past a name that starts at `i` and must end by `end` (a record's data).

    DNAME targets and CH A names are never compressed (RFC 6672 2.5; dnspython refuses them).
    """
    if i >= end:
        raise Malformed("record data too short for its name")
    return _skip_name(data, i, end, compressed)


def _skip_name(data: bytes, i: int, end: int, compressed: bool = True) -> int:
    """Offset past the name at `i`, read within data[:end].

    Stricter than wire._skip_name, as dnspython (2.9) reads replies: a pointer
    goes before the start of the part of the name that holds it, and the name
    it points to ends before that start too (so no loop and no overlap), at
    most MAX_HOPS pointers, none into the header; labels are ordinary, the name
    is at most 255 bytes.
    """
    start, after, size, hops = i, 0, 0, 0
    while True:
        if i >= end:
            raise Malformed("name runs past its bounds")
        length = data[i]
        if length == 0:
            return after or i + 1
        if length & 0xC0 == 0xC0:
            if i + 2 > end or not compressed:
                raise Malformed("truncated pointer, or a pointer where compression is not allowed")
            target = ((length & 0x3F) << 8) | data[i + 1]
            hops += 1
            if target >= start or target < 12 or hops > MAX_HOPS:  # the header: the ID we rewrite is there
                raise Malformed("compression pointer that does not point backwards into the records")
            after = after or i + 2
            end, i = start, target
            start = target
            continue
        if length > 63:
            raise Malformed("extended label type")
        size += length + 1
        if size > 254:
            raise Malformed("name longer than 255 bytes")
        i += length + 1


# --------------------------------------------------------------------------- dns-0x20


def mix_case(name: bytes) -> bytes:
    """`name` (wire form) with each ASCII letter's case chosen at random (dns-0x20).

    Label length bytes are at most 63, below every letter, so only letters change.
    """
    letters = [i for i, b in enumerate(name) if 65 <= b <= 90 or 97 <= b <= 122]
    if not letters:
        return name
    bits = _bits.getrandbits(len(letters))
    out = bytearray(name)
    for k, i in enumerate(letters):
        out[i] = (out[i] | 0x20) if bits >> k & 1 else (out[i] & ~0x20)
    return bytes(out)


__all__ = ["REASONS", "check_reply", "checks_data", "mix_case"]
