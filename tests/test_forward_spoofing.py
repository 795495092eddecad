"""Forwarding that cannot be poisoned (RFC 5452, dns-0x20), over real loopback sockets.

A hostile upstream (`upstreams.Hostile`) answers every forwarded query first
with forged replies (no question, another name, type or class, another ID,
and one perfect in every way but sent from 127.0.0.2) and only then with the
truth; a recording upstream shows which source ports and IDs the forwarder
uses; case-preserving and case-folding upstreams exercise --forward-0x20.
"""

from __future__ import annotations

import os

import dns.message
import dns.rcode
import pytest

from test_forward import metric
from upstreams import FORGED, Fake, ForwardingServer, Hostile

REASONS = Hostile.FORGERIES


def mismatched(server: ForwardingServer, reason: str) -> float | None:
    return metric(server, "mcsdns_forward_mismatched_replies_total", reason=reason)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_forged_replies_are_dropped_and_counted_and_the_true_answer_wins(tcp):
    with Hostile() as up, ForwardingServer("--upstream", up.addr) as s:
        for reason in REASONS + ("source",):
            assert mismatched(s, reason) == 0  # every reason is exported from the start
        answers = [s.query(f"h{i}.example.org.", "A", tcp=tcp).answer for i in range(20)]
        assert [a[0][0].address for a in answers] == [up.address] * 20  # never FORGED
        counted = {reason: mismatched(s, reason) for reason in REASONS + ("source",)}
    assert counted == {**{reason: 20 for reason in REASONS}, "source": 0 if tcp else 20}
    assert FORGED != up.address


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_forgeries_alone_get_the_client_servfail_not_the_forged_address(tcp):
    with Hostile(truth=False) as up, ForwardingServer("--upstream", up.addr, "--upstream-timeout", "500ms") as s:
        reply = s.query("only.example.org.", "A", tcp=tcp, timeout=3)
        assert reply.rcode() == dns.rcode.SERVFAIL and not reply.answer
        counted = {reason: mismatched(s, reason) for reason in REASONS + ("source",)}
    assert counted == {**{reason: 1 for reason in REASONS}, "source": 0 if tcp else 1}


def _udp_sockets(pid: int) -> int:
    """UDP sockets the process holds (its listener included), from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        with open(table) as f:
            count += sum(1 for line in f.readlines()[1:] if line.split()[9] in inodes)
    return count


def test_each_forwarded_query_has_its_own_random_port_and_id_and_the_socket_is_closed():
    with Fake() as up, ForwardingServer("--upstream", up.addr) as s:
        before = _udp_sockets(s.proc.pid)
        for i in range(200):
            assert s.query(f"p{i}.example.org.", "A").rcode() == dns.rcode.NOERROR
        after = _udp_sockets(s.proc.pid)
    assert len(up.sources) == 200
    ports = {port for _, port in up.sources}
    ids = {int.from_bytes(m[:2], "big") for m in up.queries}
    # 200 draws from ~28,000 ephemeral ports and 65,536 IDs: about one collision each is expected.
    assert len(ports) >= 195, len(ports)
    assert len(ids) >= 195, len(ids)
    assert after == before  # no socket outlives its query


NAME = "abcdefghijklmnopqrstuvwxyz.example.org."  # 36 letters: all-lower by chance is 2^-36


def test_0x20_randomises_the_case_upstream_and_gives_the_client_its_own():
    with Fake() as up, ForwardingServer("--upstream", up.addr, "--forward-0x20") as s:
        for spelling in (NAME, NAME.upper(), "AbCdEfGhIjKlMnOpQrStUvWxYz.Example.ORG."):
            reply = s.query(spelling, "A")
            assert reply.rcode() == dns.rcode.NOERROR and reply.answer[0][0].address == up.address
            assert reply.question[0].name.to_text() == spelling  # the client's own case comes back
            assert reply.answer[0].name.to_text() == spelling  # the owner points into the question
        sent = [dns.message.from_wire(m).question[0].name.to_text() for m in up.queries]
        assert all(name.lower() == NAME for name in sent)
        assert len(set(sent)) == 3 and not set(sent) & {NAME, NAME.upper()}  # mixed, not the client's
        assert mismatched(s, "case") == 0


def test_0x20_drops_replies_that_do_not_echo_the_case():
    with Fake(lowercase=True) as up:
        with ForwardingServer("--upstream", up.addr, "--forward-0x20", "--upstream-timeout", "500ms") as s:
            assert s.query(NAME, "A", timeout=3).rcode() == dns.rcode.SERVFAIL
            assert mismatched(s, "case") == 1
        with ForwardingServer("--upstream", up.addr) as s:  # without the flag, case is not compared
            assert s.query(NAME.upper(), "A").answer[0][0].address == up.address
            assert mismatched(s, "case") == 0


def test_0x20_over_tcp_gets_the_same_check():
    with Fake(lowercase=True) as up, ForwardingServer("--upstream", up.addr, "--forward-0x20", "--upstream-timeout", "500ms") as s:
        assert s.query(NAME, "A", tcp=True, timeout=3).rcode() == dns.rcode.SERVFAIL
        assert mismatched(s, "case") >= 1
