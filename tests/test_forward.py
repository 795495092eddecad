"""Forwarding of names outside the zone, against real upstreams over real sockets.

Upstreams: Knot DNS serving example.test. (a real authoritative server with
its own truncation and NXDOMAIN behavior), Python fakes that record what they
receive, delay or swallow, and ports where nothing listens.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from testsupport.mcsdnsserver import ROOT, samples

from testsupport.polling import eventually

from testsupport.testbed import free_port
from upstreams import Fake, ForwardingServer, Knot, dead_port

from mcsdns.config import Config
from mcsdns.forward.forwarder import ForwardingLoop, check_loops, is_self, read_resolv_conf, upstreams_from_config

IN_ZONE = "web.demo.svc.clusterset.local."


def metric(server: ForwardingServer, name: str, **labels: str) -> float | None:
    """The first sample of `name` on the server's /metrics whose labels include `labels`, None when absent."""
    found = samples(server.http("/metrics")[1], name, **labels)
    return found[0][1] if found else None




@pytest.fixture(scope="module")
def knot(tmp_path_factory):
    with Knot(tmp_path_factory.mktemp("knot")) as k:
        yield k


@pytest.fixture(scope="module")
def via_knot(knot):
    """mcsdns forwarding to Knot only (bundled example cluster set in the zone)."""
    with ForwardingServer("--upstream", knot.addr) as s:
        yield s


# --------------------------------------------------------------------------- pass-through


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_forwarded_answer_is_the_upstreams(via_knot, knot, tcp):
    direct = dns.query.udp(dns.message.make_query("www.example.test.", "AAAA"), "127.0.0.1", port=knot.port, timeout=2)
    got = via_knot.query("www.example.test.", "AAAA", tcp=tcp)
    assert got.rcode() == dns.rcode.NOERROR
    assert got.answer == direct.answer and got.flags == direct.flags  # AA from Knot, not ours


def test_upstream_nxdomain_passes_through_with_its_soa(via_knot):
    got = via_knot.query("nothere.example.test.", "A")
    assert got.rcode() == dns.rcode.NXDOMAIN
    assert got.authority[0].name.to_text() == "example.test." and got.authority[0].rdtype == dns.rdatatype.SOA


def test_query_and_reply_bytes_pass_unchanged_but_the_id():
    """EDNS options, the DO and CD bits and the upstream's exact reply survive the trip."""
    with Fake() as up, ForwardingServer("--upstream", up.addr) as s:
        q = dns.message.make_query("host.example.org.", "A", want_dnssec=True, use_edns=0, payload=1400,
                                   options=[dns.edns.GenericOption(dns.edns.NSID, b"")])
        q.flags |= dns.flags.CD
        wire = q.to_wire()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(2)
            sock.sendto(wire, s.addr)
            reply = sock.recv(65535)
        sent = [m for m in up.queries if b"\x04host\x07example\x03org" in m]
        assert len(sent) == 1
        assert sent[0][2:] == wire[2:]  # everything but the ID
        assert reply[:2] == wire[:2]  # the client's ID comes back
        assert reply[2:] == up.reply(sent[0])[2:]  # the upstream's reply, byte for byte
        assert dns.message.from_wire(reply).answer[0][0].address == "198.51.100.7"


def test_truncated_udp_reply_is_fetched_again_over_tcp(via_knot, knot):
    # Knot caps UDP replies at 1232 bytes, so it truncates this ~2.6 KB answer itself...
    q = dns.message.make_query("big.example.test.", "TXT", use_edns=0, payload=4096)
    assert dns.query.udp(q, "127.0.0.1", port=knot.port, timeout=2).flags & dns.flags.TC
    # ...but the client said 4096: mcsdns retries over TCP and sends the whole answer over UDP.
    got = via_knot.query("big.example.test.", "TXT", use_edns=0, payload=4096)
    assert not got.flags & dns.flags.TC and len(got.answer[0]) == 40


def test_reply_larger_than_the_clients_buffer_is_truncated_for_it(via_knot):
    got = via_knot.query("big.example.test.", "TXT")  # no EDNS: 512 bytes
    assert got.flags & dns.flags.TC and not got.answer
    full = via_knot.query("big.example.test.", "TXT", tcp=True)  # what the client does next
    assert len(full.answer[0]) == 40


def test_tcp_clients_go_upstream_over_tcp_on_a_reused_connection():
    with Fake() as up, ForwardingServer("--upstream", up.addr) as s:
        for i in range(3):
            assert s.query(f"t{i}.example.org.", "A", tcp=True).answer[0][0].address == "198.51.100.7"
        assert len(up.queries) == 3 and up.tcp_connections == 1


def test_names_in_the_zone_are_never_forwarded():
    with Fake() as up, ForwardingServer("--upstream", up.addr) as s:
        assert s.query(IN_ZONE, "A").answer[0][0].address == "10.96.10.10"
        assert s.query("nothere.demo.svc.clusterset.local.", "A").rcode() == dns.rcode.NXDOMAIN
        assert s.query("CLUSTERSET.local.", "SOA").answer  # the apex, in any case
        assert s.query("example.org.", "A").rcode() == dns.rcode.NOERROR  # this one is forwarded
        assert [dns.message.from_wire(m).question[0].name.to_text() for m in up.queries] == ["example.org."]


def test_upstream_none_refuses_out_of_zone_names():
    with ForwardingServer("--upstream", "none") as s:
        got = s.query("www.example.test.", "A")
        assert got.rcode() == dns.rcode.REFUSED and not got.answer
        assert s.query(IN_ZONE, "A").answer


# --------------------------------------------------------------------------- failures and health


def test_slow_upstream_gets_servfail_after_the_timeout():
    with Fake(delay=5) as slow, ForwardingServer("--upstream", slow.addr, "--upstream-timeout", "300ms") as s:
        started = time.monotonic()
        got = s.query("slow.example.org.", "A", timeout=8)
        elapsed = time.monotonic() - started
        assert got.rcode() == dns.rcode.SERVFAIL
        assert 0.3 <= elapsed < 3, elapsed  # our timeout, not the upstream's 5 s
        assert "plugin/errors: 2 slow.example.org. A" in s.log()
        # Written by the server, not the upstream: plugin "" as in CoreDNS; no upstream rcode was timed.
        assert metric(s, "coredns_dns_responses_total", zone=".", rcode="SERVFAIL", plugin="") == 1
        assert metric(s, "coredns_proxy_request_duration_seconds_count", to=slow.addr) is None


@pytest.mark.parametrize("dead", ["refused", "swallowed"])
def test_a_dead_upstream_is_skipped_and_marked_down(knot, dead):
    """sequential tries the dead one first; answers still come from Knot, and after 2 failures it is skipped."""
    with Fake(mode="swallow") as swallow:
        bad = dead_port() if dead == "refused" else swallow.addr
        with ForwardingServer("--upstream", bad, "--upstream", knot.addr, "--policy", "sequential", "--upstream-timeout", "1s") as s:
            for _ in range(2):
                assert s.query("www.example.test.", "A", timeout=3).answer[0][0].address == "192.0.2.1"
            assert metric(s, "mcsdns_forward_upstream_up", to=bad) == 0
            tried = len([m for m in swallow.queries if b"\x03www" in m])
            assert s.query("www.example.test.", "A").answer  # straight to Knot now
            assert len([m for m in swallow.queries if b"\x03www" in m]) == tried  # the dead one is skipped
            assert metric(s, "coredns_proxy_request_duration_seconds_count", to=knot.addr, rcode="NOERROR") == 3
            # The background probe (`. IN NS`) keeps failing and says so.
            eventually(lambda: (metric(s, "coredns_proxy_healthcheck_failures_total", proxy_name="forward", to=bad) or 0) >= 1)
            assert metric(s, "mcsdns_forward_upstream_up", to=knot.addr) == 1
            assert "marked down after 2 failures" in s.log()


def test_an_upstream_that_answers_again_is_used_again(knot):
    with Fake(mode="swallow", address="203.0.113.9") as flaky:
        with ForwardingServer("--upstream", flaky.addr, "--upstream", knot.addr, "--policy", "sequential", "--upstream-timeout", "600ms") as s:
            for _ in range(2):
                assert s.query("www.example.test.", "A").answer[0][0].address == "192.0.2.1"  # from Knot
            assert metric(s, "mcsdns_forward_upstream_up", to=flaky.addr) == 0
            flaky.mode = "answer"  # the probe gets through within PROBE_INTERVAL (0.5 s)
            eventually(lambda: metric(s, "mcsdns_forward_upstream_up", to=flaky.addr) == 1)
            assert s.query("www.example.test.", "A").answer[0][0].address == "203.0.113.9"
            assert any(m[12:] == b"\x00\x00\x02\x00\x01" for m in flaky.queries)  # it was probed with `. IN NS`


def test_when_every_upstream_is_down_they_are_tried_anyway():
    with Fake(mode="swallow") as a, Fake(mode="swallow") as b:
        with ForwardingServer("--upstream", a.addr, "--upstream", b.addr, "--upstream-timeout", "200ms") as s:
            for _ in range(4):
                assert s.query("down.example.org.", "A").rcode() == dns.rcode.SERVFAIL
            assert metric(s, "mcsdns_forward_upstream_up", to=a.addr) == 0
            assert metric(s, "mcsdns_forward_upstream_up", to=b.addr) == 0
            a.mode = "answer"
            before = len(a.queries)
            # Both down: still tried (and a answers, before its probe even noticed).
            eventually(lambda: s.query("down.example.org.", "A").rcode() == dns.rcode.NOERROR)
            assert len(a.queries) > before
            assert metric(s, "coredns_forward_healthcheck_broken_total") >= 1


# --------------------------------------------------------------------------- policies and limits


@pytest.mark.parametrize("policy", ["round_robin", "random", "sequential"])
def test_policies_spread_queries_as_named(policy):
    with Fake(address="198.51.100.1") as a, Fake(address="198.51.100.2") as b:
        with ForwardingServer("--upstream", a.addr, "--upstream", b.addr, "--policy", policy) as s:
            for i in range(20):
                assert s.query(f"q{i}.example.org.", "A").rcode() == dns.rcode.NOERROR
        counts = (len(a.queries), len(b.queries))
    if policy == "round_robin":
        assert counts == (10, 10)
    elif policy == "sequential":
        assert counts == (20, 0)
    else:
        assert counts[0] and counts[1] and sum(counts) == 20  # all on one side: p = 2^-19


def test_max_concurrent_refuses_the_excess_at_once():
    with Fake(delay=1.5) as slow, ForwardingServer("--upstream", slow.addr, "--max-concurrent", "2", "--upstream-timeout", "4s") as s:
        def ask(i: int) -> int:
            return s.query(f"c{i}.example.org.", "A", timeout=6).rcode()

        with ThreadPoolExecutor(6) as pool:
            first = [pool.submit(ask, i) for i in range(2)]
            eventually(lambda: len(slow.queries) >= 2)  # both are in flight upstream
            refused = [f.result() for f in [pool.submit(ask, i) for i in range(2, 6)]]
            still_waiting = [not f.done() for f in first]  # "at once": before the upstream's 1.5 s are up
            answered = [f.result() for f in first]
        assert refused == [dns.rcode.REFUSED] * 4 and still_waiting == [True, True]
        assert answered == [dns.rcode.NOERROR] * 2
        assert metric(s, "coredns_forward_max_concurrent_rejects_total") == 4
        assert metric(s, "coredns_dns_responses_total", zone=".", rcode="REFUSED", plugin="") == 4
        assert metric(s, "coredns_dns_responses_total", zone=".", rcode="NOERROR", plugin="forward") == 2
        assert len(slow.queries) == 2


# --------------------------------------------------------------------------- start-up checks


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--http-listen", "127.0.0.1:0", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("listen", ["127.0.0.1", "0.0.0.0"])
def test_forwarding_to_ourselves_is_refused_at_start(listen):
    port = free_port()
    done = _run("--listen", f"{listen}:{port}", "--upstream", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert f"--upstream 127.0.0.1:{port} is this server's own listen address {listen}:{port}" in done.stderr
    assert "loop" in done.stderr and "Traceback" not in done.stderr


def test_upstream_must_be_an_ip_address():
    done = _run("--listen", f"127.0.0.1:{free_port()}", "--upstream", "dns.example:53")
    assert done.returncode == 2
    assert "--upstream 'dns.example': must be an IP address" in done.stderr


def test_resolv_conf_nameservers_minus_our_own_addresses(tmp_path):
    conf = tmp_path / "resolv.conf"
    conf.write_text("# comment\nsearch svc.cluster.local\nnameserver 127.0.0.1\nnameserver 10.0.0.10 ; x\n"
                    "nameserver fe80::1%eth0\nnameserver bogus\noptions ndots:5\n")
    assert read_resolv_conf(conf) == ["127.0.0.1", "10.0.0.10", "fe80::1"]
    ours = Config(listen=(("0.0.0.0", 53),))
    assert upstreams_from_config(ours, conf) == [("10.0.0.10", 53), ("fe80::1", 53)]
    assert upstreams_from_config(Config(listen=(("127.0.0.1", 5353),)), conf)[0] == ("127.0.0.1", 53)
    assert upstreams_from_config(Config(upstreams=()), conf) == []  # --upstream none
    assert upstreams_from_config(Config(), tmp_path / "missing") == []


def test_loop_detection_rules():
    assert is_self(("127.0.0.1", 53), ("127.0.0.1", 53))
    assert not is_self(("127.0.0.1", 53), ("127.0.0.1", 5353))
    assert not is_self(("127.0.0.2", 53), ("127.0.0.1", 53))  # another loopback address, another server
    assert is_self(("127.0.0.2", 53), ("0.0.0.0", 53))  # the wildcard listener gets it
    assert not is_self(("192.0.2.1", 53), ("0.0.0.0", 53))  # not an address of this host
    assert is_self(("::1", 53), ("::", 53))
    with pytest.raises(ForwardingLoop, match="loop"):
        check_loops([("10.0.0.10", 53), ("127.0.0.1", 53)], [("0.0.0.0", 53)])
    check_loops([("10.0.0.10", 53)], [("0.0.0.0", 53)])
