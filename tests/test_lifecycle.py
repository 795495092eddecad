"""Health, readiness, signals and logs of a running server, as an operator sees them.

SIGTERM: /ready turns 503 `Shutting down` while DNS keeps answering for the
lameduck period, open queries finish, exit 0; a second signal exits at once.
SIGHUP re-reads the manifests. The query log prints CoreDNS's log-plugin
lines; error logs are rate-limited with a summary of what was suppressed.
"""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import socket
import time

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rrset

from testsupport.framing import FrameReader, frame
from testsupport.mcsdnsserver import ROOT

from testsupport.polling import eventually
from upstreams import Fake, ForwardingServer

from mcsdns.serve.querylog import QueryLog, RateLimitedLog, format_line
from mcsdns.serve.transport import Listener
from mcsdns.zone.wire import parse_query

WEB = "web.demo.svc.clusterset.local."




def exit_code(server: ForwardingServer, timeout: float) -> int:
    assert server.proc is not None
    return server.proc.wait(timeout)


# --------------------------------------------------------------------------- health, ready, SIGTERM


def test_sigterm_turns_ready_503_keeps_answering_for_the_lameduck_then_exits_0():
    with ForwardingServer("--lameduck", "1.5s") as s:
        assert s.http("/health") == (200, "OK")
        assert s.http("/ready") == (200, "OK")
        s.signal(signal.SIGTERM)
        signalled = time.monotonic()
        eventually(lambda: s.http("/ready") == (503, "Shutting down"))
        assert s.http("/health") == (200, "OK")  # alive, just not taking new traffic
        assert s.query(WEB, "A").answer[0][0].address == "10.96.10.10"
        assert s.query(WEB, "A", tcp=True).answer
        assert exit_code(s, timeout=10) == 0
        assert time.monotonic() - signalled >= 1.5
        assert "[INFO]" not in s.log()  # no query log unless asked for


def test_answers_during_the_lameduck_follow_changes_to_the_manifests(tmp_path):
    """A pod in its lameduck still gets queries (kube-proxy and conntrack move them only later): its
    answers follow the source until it stops answering, never freeze at the SIGTERM's state."""
    path = tmp_path / "clusterset.yaml"
    path.write_text((ROOT / "mcsdns/examples/clusterset.yaml").read_text())
    with ForwardingServer("--lameduck", "6s", "--manifests", str(path)) as s:
        assert s.query(WEB, "A").answer[0][0].address == "10.96.10.10"
        s.signal(signal.SIGTERM)
        eventually(lambda: s.http("/ready") == (503, "Shutting down"))
        path.write_text(path.read_text().replace("10.96.10.10", "10.96.10.77"))
        eventually(lambda: s.query(WEB, "A").answer[0][0].address == "10.96.10.77", timeout=4)
        assert s.proc.poll() is None and s.http("/ready")[0] == 503  # still the lameduck
        assert exit_code(s, timeout=15) == 0


def test_an_open_tcp_query_finishes_during_shutdown():
    with Fake(delay=0.8) as slow, ForwardingServer("--upstream", slow.addr) as s:
        with socket.create_connection(s.addr, timeout=5) as conn:
            wire = dns.message.make_query("slow.example.org.", "A").to_wire()
            conn.sendall(frame(wire))
            eventually(lambda: slow.queries)  # it is upstream now
            s.signal(signal.SIGTERM)  # lameduck 0: listeners close at once, in-flight queries drain
            reply = dns.message.from_wire(FrameReader(conn).expect())
        assert reply.rcode() == dns.rcode.NOERROR and reply.answer[0][0].address == "198.51.100.7"
        assert exit_code(s, timeout=10) == 0


def test_a_second_signal_exits_at_once():
    with ForwardingServer("--lameduck", "30s") as s:
        s.signal(signal.SIGTERM)
        eventually(lambda: s.http("/ready")[0] == 503)
        s.signal(signal.SIGTERM)
        assert exit_code(s, timeout=5) == 1
        assert "second signal" in s.log()


def test_sighup_rereads_the_manifests(tmp_path):
    path = tmp_path / "clusterset.yaml"
    path.write_text((ROOT / "mcsdns/examples/clusterset.yaml").read_text())
    with ForwardingServer("--manifests", str(path)) as s:
        assert s.query(WEB, "A").answer[0][0].address == "10.96.10.10"
        # Same size, same inode, same mtime: the file poll cannot notice this edit; SIGHUP must.
        stat = path.stat()
        with open(path, "r+") as f:
            text = f.read().replace("10.96.10.10", "10.96.10.99")
            f.seek(0)
            f.write(text)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        after = path.stat()
        assert (after.st_mtime_ns, after.st_size, after.st_ino) == (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        s.signal(signal.SIGHUP)
        eventually(lambda: s.query(WEB, "A").answer[0][0].address == "10.96.10.99")
        assert "SIGHUP: re-reading manifests" in s.log()
        assert s.proc.poll() is None


# --------------------------------------------------------------------------- logs


LOG_LINE = re.compile(
    r'^\[INFO\] 127\.0\.0\.1:(?P<port>\d+) - (?P<id>\d+) "(?P<type>\S+) IN (?P<name>\S+) (?P<proto>udp|tcp) (?P<size>\d+) '
    r'(?P<do>true|false) (?P<bufsize>\d+)" (?P<rcode>[A-Z]+) (?P<flags>[a-z,]+) (?P<rsize>\d+) (?P<duration>\d+\.\d+)s$',
    re.M,
)


def logged(server: ForwardingServer, ids: set[str]) -> list[dict] | None:
    """The query-log lines of these message IDs, once all of them are in the log."""
    found = [m.groupdict() for m in LOG_LINE.finditer(server.log()) if m["id"] in ids]
    return found if len(found) == len(ids) else None


def test_query_log_prints_coredns_log_lines():
    with ForwardingServer("--log-queries") as s:
        q1 = dns.message.make_query(WEB, "A")
        r1 = dns.query.udp(q1, "127.0.0.1", port=s.dns_port, timeout=2)
        q2 = dns.message.make_query("NoThere.demo.svc.clusterset.local.", "AAAA", want_dnssec=True, payload=1232)
        r2 = dns.query.tcp(q2, "127.0.0.1", port=s.dns_port, timeout=2)
        lines = eventually(lambda: logged(s, {str(q1.id), str(q2.id)}))
    first, second = sorted(lines, key=lambda d: d["proto"] == "tcp")
    assert first | {"port": "", "duration": ""} == {
        "port": "", "id": str(q1.id), "type": "A", "name": WEB, "proto": "udp", "size": str(len(q1.to_wire())),
        "do": "false", "bufsize": "512", "rcode": "NOERROR", "flags": "qr,aa,rd", "rsize": str(len(r1.to_wire())),
        "duration": "",
    }  # fmt: skip
    assert second["name"] == "NoThere.demo.svc.clusterset.local."  # as the client spelled it
    assert (second["type"], second["proto"], second["do"], second["bufsize"], second["rcode"]) == ("AAAA", "tcp", "true", "65535", "NXDOMAIN")
    assert second["rsize"] == str(len(r2.to_wire()))


def test_format_line_matches_corednss_example():
    """The shape of the CoreDNS log plugin's line, rebuilt from wire bytes."""
    q = dns.message.make_query(WEB, "A", use_edns=0, payload=1232)
    q.id = 12345
    wire = q.to_wire()
    reply = dns.message.make_response(q)
    reply.flags |= dns.flags.AA
    reply.answer.append(dns.rrset.from_text(WEB, 5, "IN", "A", "10.96.10.10"))
    rwire = reply.to_wire()
    line = format_line(("127.0.0.1", 45678), "udp", wire, parse_query(wire), rwire, 0.000123)
    assert len(wire) == 58
    assert line == f'[INFO] 127.0.0.1:45678 - 12345 "A IN {WEB} udp 58 false 1232" NOERROR qr,aa,rd {len(rwire)} 0.000123s'


def test_a_flood_of_bad_packets_is_logged_rate_limited():
    with ForwardingServer("--lameduck", "0") as s:
        bad = dns.message.make_query("x.example.", "A").to_wire()[:14]  # header, then a cut question
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(2)
            for _ in range(200):  # in lock step, so the kernel drops none
                sock.sendto(bad, s.addr)
                assert dns.message.from_wire(sock.recv(512), question_only=True).rcode() == dns.rcode.FORMERR
        formerr = sum(float(line.rsplit(" ", 1)[1]) for line in s.http("/metrics")[1].splitlines()
                      if line.startswith("coredns_dns_responses_total") and 'rcode="FORMERR"' in line)
        s.signal(signal.SIGTERM)
        assert exit_code(s, timeout=10) == 0
        log = s.log()
    logged = log.count("malformed query from 127.0.0.1:")
    suppressed = int(re.search(r"malformed: suppressed (\d+) messages", log)[1])
    assert logged == 20 and logged + suppressed == formerr == 200


def test_rate_limited_log_budget_and_summary(caplog):
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.limited"), per_window=3, window=10, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="test.limited"):
        written = [limited.log("bad", logging.WARNING, "bad packet %d", i) for i in range(5)]
        assert written == [True, True, True, False, False] and limited.suppressed("bad") == 2
        assert limited.log("other", logging.WARNING, "another kind has its own budget")
        now[0] = 10.5
        assert limited.log("bad", logging.WARNING, "bad packet again")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[:3] == ["bad packet 0", "bad packet 1", "bad packet 2"]
    assert messages[4].startswith("bad: suppressed 2 messages in the last 10s") and messages[5] == "bad packet again"


def test_query_log_writes_bare_lines_for_answered_packets_only():
    out = io.StringIO()
    qlog = QueryLog(out)
    wire = dns.message.make_query(WEB, "A").to_wire()
    reply = wire[:2] + b"\x85\x00" + wire[4:]
    where = Listener("dns://[::1]:53", "udp", 2)
    qlog.observe(where, ("::1", 1053, 0, 0), wire, parse_query(wire), reply, time.perf_counter(), False)
    qlog.observe(where, ("::1", 1053, 0, 0), b"\x00", None, None, time.perf_counter(), False)  # dropped: no line
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'[INFO] [::1]:1053 - {(wire[0] << 8) | wire[1]} "A IN {WEB} udp ')
