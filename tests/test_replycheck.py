"""replycheck.check_reply without sockets: which reason each kind of wrong reply gets.

The same rules over real sockets are in test_forward_spoofing.py and
test_fuzz_upstream.py; this table pins each reason to one small case.
"""

from __future__ import annotations

import dns.message
import dns.rrset
import pytest

from mcsdns.forward.replycheck import REASONS, check_reply, mix_case

QID = 0x1234


def _query(name: str = "www.Example.org.", rdtype: str = "A") -> bytes:
    q = dns.message.make_query(name, rdtype)
    q.id = QID
    return q.to_wire()


QUERY = _query()
QUESTION = QUERY[12:]


def _reply(query: bytes = QUERY, *records: str) -> bytes:
    r = dns.message.make_response(dns.message.from_wire(query))
    for text in records or ("192.0.2.1",):
        r.answer.append(dns.rrset.from_text(r.question[0].name, 60, "IN", "A", text))
    return r.to_wire()


GOOD = _reply()


def _set(wire: bytes, at: int, value: bytes) -> bytes:
    return wire[:at] + value + wire[at + len(value) :]


CASES = {
    "short": (GOOD[:11], "malformed"),
    "another ID": (_set(GOOD, 0, b"\x12\x35"), "id"),
    "a query, not a response": (_set(GOOD, 2, bytes([GOOD[2] & 0x7F])), "not_response"),
    "opcode UPDATE": (_set(GOOD, 2, bytes([GOOD[2] | 0x28])), "opcode"),
    "no question": (_set(GOOD, 4, b"\x00\x00"), "no_question"),
    "two questions": (_set(GOOD, 4, b"\x00\x02"), "question_count"),
    "another name": (_reply(_query("www.example.net.")), "name"),
    "another type": (_reply(_query(rdtype="AAAA"), "192.0.2.1"), "type"),
    "another class": (_set(GOOD, len(QUERY) - 2, b"\x00\x03"), "class"),
    "trailing bytes": (GOOD + b"\x00", "malformed"),
    "an A record of 3 bytes": (_set(GOOD, len(GOOD) - 6, b"\x00\x03"), "malformed"),
    "a pointer into the header": (_set(GOOD, len(QUERY), b"\xc0\x02"), "malformed"),
    "a pointer forward": (_set(GOOD, len(QUERY), bytes([0xC0, len(QUERY) + 4])), "malformed"),
    "an answer count past the records": (_set(GOOD, 6, b"\x00\x02"), "malformed"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_wrong_reply_gets_its_reason(name):
    wire, reason = CASES[name]
    assert reason in REASONS
    assert check_reply(wire, QID, QUESTION, exact_case=False) == (reason, b"")


def test_the_right_reply_is_accepted_in_any_case_unless_0x20():
    assert check_reply(GOOD, QID, QUESTION, exact_case=False) == (None, GOOD)
    lower = _set(GOOD, 12, GOOD[12 : len(QUERY) - 4].lower())
    assert check_reply(lower, QID, QUESTION, exact_case=False) == (None, lower)
    assert check_reply(lower, QID, QUESTION, exact_case=True) == ("case", b"")


def test_a_truncated_reply_whose_records_do_not_parse_is_kept_as_header_and_question():
    cut = _set(GOOD, 2, bytes([GOOD[2] | 0x02]))[:-3]  # TC set, the last record cut short
    reason, reply = check_reply(cut, QID, QUESTION, exact_case=False)
    assert reason is None
    parsed = dns.message.from_wire(reply)
    assert parsed.id == QID and parsed.flags & 0x0200 and not parsed.answer and len(parsed.question) == 1


def test_mix_case_changes_only_the_case_of_letters():
    name = QUESTION[:-4]
    spellings = {mix_case(name) for _ in range(50)}
    assert len(spellings) > 1  # 10 letters: 1,024 spellings
    assert all(s.lower() == name.lower() and len(s) == len(name) for s in spellings)
    digits = b"\x011\x012\x00"
    assert mix_case(digits) == digits


def test_any_bytes_get_a_verdict_never_an_exception():
    """Random damage to a reply (and random bytes): check_reply returns (reason, b"") or (None, bytes), nothing else."""
    import random

    rng = random.Random(5452)
    big = _reply(QUERY, *(f"192.0.2.{i}" for i in range(1, 40)))
    for _ in range(20000):
        wire = bytearray(rng.choice((GOOD, big)))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(wire))
            wire[at] = rng.randrange(256) if rng.random() < 0.8 else 0xC0
        if rng.random() < 0.2:
            del wire[rng.randrange(len(wire)):]
        if rng.random() < 0.1:
            wire = bytearray(rng.randbytes(rng.randrange(64)))
        reason, reply = check_reply(bytes(wire), QID, QUESTION, exact_case=rng.random() < 0.5)
        assert (reason in REASONS and reply == b"") or (reason is None and reply[:2] == QID.to_bytes(2, "big"))
