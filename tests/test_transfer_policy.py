"""The transfer decision list (mcsdns/xfr/policy.py, decision 8) as a table, in process: `Policy.decide`.

Each row is one request (type, class, name, signature, the client's address, UDP or TCP, an IXFR's
serial) to a server in one state (a key configured, synced, its clock), and what it gets: the rcode,
our SOA alone, the whole zone or the journal's changes; whether the reply is signed and with which
TSIG error; the result the transfers metric counts. The rows that break two rules at once hold the
order the rules are taken in. test_transfer.py checks the same decisions over real sockets.
"""

from __future__ import annotations

import base64
import ipaddress
import struct
import time
from dataclasses import dataclass

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.tsig
import pytest

from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.xfr.journal import Journal
from mcsdns.xfr.policy import Incremental, Policy, Whole
from mcsdns.xfr.tsig import BADKEY, BADSIG, BADTIME
from mcsdns.zone.table import Table
from testsupport.inprocess import KINDS, build_table
from testsupport.objects import namespace, service_import

ZONE = "clusterset.local."
SECRET = base64.b64encode(bytes(range(32))).decode()
KEY = dns.tsig.Key("xfr-key.", SECRET, "hmac-sha256")
KEYRING = {KEY.name: KEY}
WRONG_SECRET = {KEY.name: dns.tsig.Key("xfr-key.", base64.b64encode(b"x" * 32).decode(), "hmac-sha256")}
OTHER_KEY = {dns.name.from_text("other."): dns.tsig.Key("other.", SECRET, "hmac-sha256")}
ALLOWED = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("fd00::/8"))
INSIDE, OUTSIDE = ("127.0.0.1", 40000), ("10.1.1.1", 40000)


@dataclass(frozen=True)
class Row:
    id: str
    # the request
    qtype: str = "AXFR"
    qname: str = ZONE
    rdclass: str = "IN"
    tcp: bool = True
    client: tuple | None = INSIDE
    signed_with: dict | None = None  # the keyring the request is signed with (None: unsigned)
    serial: str | None = None  # an IXFR's: "ours", "journal" (one change back), "unknown", "future", "none" (no SOA)
    # the server
    key: bool = False  # --tsig-key-file set
    synced: bool = True
    clock_ahead: float = 0  # seconds the server's clock is ahead of the client's
    # what the request gets
    reply: str = ""  # an rcode's name, "SOA" (our SOA alone), "zone" (the whole zone), "changes", "answer"
    tsig_error: int | None = None  # the reply's TSIG error; None: the reply carries no TSIG record
    result: str | None = None  # the transfers metric's result label (None: not counted)
    fallback: str | None = None  # why an IXFR got the whole zone (the fallback metric's reason)


ROWS = [
    # 1. the client's address
    Row("axfr from outside --transfer-to", client=OUTSIDE, reply="REFUSED", result="refused"),
    Row("ixfr from outside --transfer-to", qtype="IXFR", serial="unknown", client=OUTSIDE, reply="REFUSED",
        result="refused"),
    Row("axfr from an ipv4-mapped ipv6 address inside", client=("::ffff:127.0.0.1", 40000, 0, 0), reply="zone",
        result="axfr"),
    Row("axfr from an ipv6 address with a scope inside", client=("fd00::1%eth0", 40000, 0, 1), reply="zone",
        result="axfr"),
    Row("axfr from no address at all", client=None, reply="REFUSED", result="refused"),
    Row("outside and badly signed: the address comes first", client=OUTSIDE, key=True, signed_with=WRONG_SECRET,
        reply="REFUSED", result="refused"),
    Row("outside and class CH: the address comes first", client=OUTSIDE, rdclass="CH", reply="REFUSED",
        result="refused"),
    # 2. the signature
    Row("axfr without a key configured", reply="zone", result="axfr"),
    Row("unsigned axfr with a key configured", key=True, reply="REFUSED", result="unsigned"),
    Row("unsigned ixfr with a key configured", qtype="IXFR", serial="ours", key=True, reply="REFUSED",
        result="unsigned"),
    Row("axfr signed with the key", key=True, signed_with=KEYRING, reply="zone", tsig_error=0, result="axfr"),
    Row("axfr signed with another key", key=True, signed_with=OTHER_KEY, reply="NOTAUTH", tsig_error=BADKEY,
        result="badkey"),
    Row("axfr signed with a wrong secret", key=True, signed_with=WRONG_SECRET, reply="NOTAUTH", tsig_error=BADSIG,
        result="badsig"),
    Row("axfr signed an hour ago", key=True, signed_with=KEYRING, clock_ahead=3600, reply="NOTAUTH",
        tsig_error=BADTIME, result="badtime"),
    Row("axfr signed, no key configured", signed_with=KEYRING, reply="NOTAUTH", tsig_error=BADKEY, result="badkey"),
    Row("badly signed and class CH: the signature comes first", key=True, signed_with=WRONG_SECRET, rdclass="CH",
        reply="NOTAUTH", tsig_error=BADSIG, result="badsig"),
    Row("unsigned and not synced: the signature comes first", key=True, synced=False, reply="REFUSED",
        result="unsigned"),
    Row("a signed query that is no transfer: the resolver's answer, signed", qtype="SOA", key=True,
        signed_with=KEYRING, reply="answer", tsig_error=0),
    Row("a signed query that is no transfer, no key configured", qtype="SOA", signed_with=KEYRING, reply="NOTAUTH",
        tsig_error=BADKEY, result="badkey"),
    Row("a signed query over udp", qtype="SOA", tcp=False, client=None, key=True, signed_with=KEYRING,
        reply="answer", tsig_error=0),
    # 3. class, name, sync
    Row("axfr of class CH", rdclass="CH", reply="REFUSED", result="class"),
    Row("axfr of a name below the apex", qname=f"web.demo.svc.{ZONE}", reply="NOTAUTH", result="notauth"),
    Row("axfr of a zone not served", qname="example.com.", reply="NOTAUTH", result="notauth"),
    Row("axfr before the sync", synced=False, reply="SERVFAIL", result="not_synced"),
    Row("signed axfr before the sync: the error signed", key=True, signed_with=KEYRING, synced=False,
        reply="SERVFAIL", tsig_error=0, result="not_synced"),
    Row("axfr over udp before the sync: the sync comes first", tcp=False, client=None, synced=False,
        reply="SERVFAIL", result="not_synced"),
    # 4. UDP, a malformed IXFR
    Row("axfr over udp", tcp=False, client=None, reply="NOTIMP", result="udp"),
    Row("ixfr without a SOA in its authority section", qtype="IXFR", serial="none", reply="FORMERR",
        result="formerr"),
    Row("ixfr over udp without a SOA", qtype="IXFR", serial="none", tcp=False, client=None, reply="FORMERR",
        result="formerr"),
    # 5. IXFR's answers
    Row("ixfr over udp from an older serial: our SOA alone", qtype="IXFR", serial="journal", tcp=False, client=None,
        reply="SOA", result="udp_soa"),
    Row("ixfr at our serial: our SOA alone", qtype="IXFR", serial="ours", reply="SOA", result="current"),
    Row("signed ixfr at our serial: our SOA, signed", qtype="IXFR", serial="ours", key=True, signed_with=KEYRING,
        reply="SOA", tsig_error=0, result="current"),
    Row("ixfr from a serial the journal holds: the changes", qtype="IXFR", serial="journal", reply="changes",
        result="ixfr"),
    Row("ixfr from a serial never ours: the whole zone", qtype="IXFR", serial="unknown", reply="zone",
        result="fallback_axfr", fallback="unknown"),
    Row("ixfr from a serial newer than ours: the whole zone", qtype="IXFR", serial="future", reply="zone",
        result="fallback_axfr", fallback="future"),
    # 6. AXFR over TCP
    Row("axfr over tcp", reply="zone", result="axfr"),
]


def served(synced: bool) -> tuple[Table, int]:
    """A table with an IXFR journal, synced (unless not `synced`) and then changed once; the serial before
    the change."""
    table = build_table()
    table.journal = Journal(table, 1 << 20, 3600)
    for obj in (namespace("demo"), service_import("demo", "web", ["10.1.0.1"])):
        table.store.apply(convert(obj))
    if not synced:
        return table, table.soa_serial
    for kind in KINDS:
        table.store.mark_synced(kind)
    before = table.soa_serial
    table.store.apply(convert(service_import("demo", "api", ["10.1.0.2"])))
    assert table.soa_serial != before
    return table, before


def request(row: Row, ours: int, before: int) -> dns.message.Message:
    query = dns.message.make_query(row.qname, row.qtype, rdclass=row.rdclass, use_edns=False)
    if row.serial is not None and row.serial != "none":
        serial = {"ours": ours, "journal": before, "unknown": (ours - 1000) & 0xFFFFFFFF,
                  "future": (ours + 1000) & 0xFFFFFFFF}[row.serial]
        soa = f"ns.dns.{ZONE} hostmaster.{ZONE} {serial} 7200 1800 86400 5"
        query.authority.append(dns.rrset.from_text(ZONE, 0, "IN", "SOA", soa))
    if row.signed_with:
        query.use_tsig(row.signed_with, next(iter(row.signed_with)))
    return query


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_transfer_decisions(row: Row) -> None:
    table, before = served(row.synced)
    counted: list[tuple[str, str]] = []
    policy = Policy(table, ALLOWED, KEY if row.key else None,
                    on_result=lambda kind, result: counted.append((kind, result)))
    policy.journal = table.journal
    fallbacks: list[str] = []
    policy.on_fallback = fallbacks.append
    policy.clock = lambda: time.time() + row.clock_ahead
    query = request(row, table.soa_serial, before)
    wire = query.to_wire()
    replies = list(policy.decide(wire, row.client, row.tcp, Resolver(table).handle))

    assert len(replies) == 1, replies
    (reply,) = replies
    kind = {"AXFR": "axfr", "IXFR": "ixfr"}.get(row.qtype, "query")
    assert fallbacks == ([row.fallback] if row.fallback else [])
    if row.reply == "zone":  # counted once the zone is written (Transfers.serve_tcp), as the result it carries
        assert isinstance(reply, Whole), reply
        assert counted == [] and (reply.kind, reply.result) == (kind, row.result)
    else:
        assert counted == ([(kind, row.result)] if row.result else [])
    if row.reply in ("zone", "changes"):
        assert isinstance(reply, Whole if row.reply == "zone" else Incremental), reply
        assert (reply.ctx is not None) == (row.tsig_error is not None)  # each message signed as it goes out
        if row.reply == "changes":  # our SOA, the client's, nothing deleted, our SOA, the service added, our SOA
            soas = [rec.data[0] for owner, rec in reply.records if rec.rtype == dns.rdatatype.SOA]
            assert soas == [table.soa_serial, before, table.soa_serial, table.soa_serial]
            assert {owner for owner, rec in reply.records if rec.rtype != dns.rdatatype.SOA} >= {("api", "demo", "svc")}
        return
    assert isinstance(reply, bytes), reply
    if row.tsig_error == 0:  # signed with the key: dnspython checks the MAC against the request's
        message = dns.message.from_wire(reply, keyring=KEYRING, request_mac=query.mac)
    else:
        message = dns.message.from_wire(reply, keyring=False)
    assert message.id == query.id and message.flags & dns.flags.QR
    assert message.question == query.question  # as asked, the class too
    if row.tsig_error is None:
        assert not message.tsig
    else:
        assert message.tsig and message.tsig[0].error == row.tsig_error
        # BADKEY/BADSIG go unsigned (an empty MAC); BADTIME and every other reply are signed (RFC 8945 5.2)
        assert len(message.tsig[0].mac) == (0 if row.tsig_error in (BADKEY, BADSIG) else 32)
    if row.reply == "SOA":
        assert message.rcode() == dns.rcode.NOERROR and not message.authority
        (rrset,) = message.answer
        assert rrset.rdtype == dns.rdatatype.SOA and rrset[0].serial == table.soa_serial
    elif row.reply == "answer":  # the resolver's own reply to the unsigned query, signed
        expected = dns.message.from_wire(Resolver(table).handle(request(Row("", qtype=row.qtype), 0, 0).to_wire()))
        assert message.rcode() == expected.rcode() and message.answer == expected.answer
    else:
        assert message.rcode() == dns.rcode.from_text(row.reply)
        assert not message.answer and not message.authority


def test_a_request_that_cannot_be_read_is_formerr_or_dropped() -> None:
    """Two questions, or a TSIG record not last: FORMERR; shorter than a header: no reply at all."""
    table, _ = served(True)
    policy = Policy(table, ALLOWED)
    two = dns.message.make_query(ZONE, "AXFR")
    two.question.append(two.question[0])
    tsig_first = dns.message.make_query(ZONE, "AXFR")
    tsig_first.use_tsig(KEYRING, KEY.name)
    signed = tsig_first.to_wire()
    unsigned = dns.message.make_query(ZONE, "AXFR").to_wire()
    # the TSIG record, then an ordinary record after it (ARCOUNT 2)
    record = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 0, 4) + bytes([10, 0, 0, 1])  # the question's name, A 10.0.0.1
    tsig_not_last = signed[:10] + b"\x00\x02" + signed[12:] + record
    for data in (two.to_wire(), tsig_not_last):
        (reply,) = policy.decide(data, INSIDE, True, Resolver(table).handle)
        message = dns.message.from_wire(reply, keyring=False, question_only=True)
        assert message.rcode() == dns.rcode.FORMERR and message.id == int.from_bytes(data[:2], "big")
    assert list(policy.decide(unsigned[:11], INSIDE, True, Resolver(table).handle)) == [None]
