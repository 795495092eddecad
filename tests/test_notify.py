"""NOTIFY (--notify, mcsdns/notify.py) as a secondary sees it, on a loopback UDP socket of the test.

The secondary here is a socket that reads what arrives: each NOTIFY must be a signed
opcode-NOTIFY query for the zone with the new SOA in the answer; unanswered, it comes again
after 1 and then 2 more seconds; answered, a burst of changes brings at most one NOTIFY per
250 ms round, the last with the final serial. (Real secondaries following NOTIFY: test_secondaries.)
"""

from __future__ import annotations

import base64
import signal
import socket
import time
from pathlib import Path

import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rdatatype
import dns.tsig

from testsupport.serverproc import ROOT, Server, eventually

ZONE = "clusterset.local."
EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SECRET = base64.b64encode(bytes(range(50, 82))).decode()
KEYRING = {dns.name.from_text("xfr-key."): dns.tsig.Key("xfr-key.", SECRET, "hmac-sha256")}


def listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def receive(sock: socket.socket, until: float) -> list[tuple[float, dns.message.Message, tuple, bytes]]:
    """Every NOTIFY arriving before `until` (monotonic): (arrival, parsed and TSIG-verified, sender, wire)."""
    out = []
    while (left := until - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            wire, peer = sock.recvfrom(65535)
        except socket.timeout:
            break
        out.append((time.monotonic(), dns.message.from_wire(wire, keyring=KEYRING), peer, wire))
    return out


def change(manifests: Path, server: Server, step: int) -> None:
    manifests.write_text(EXAMPLE.read_text().replace("10.96.10.10", f"10.96.10.{10 + step}"))
    server.signal(signal.SIGHUP)


def serial_of(server: Server) -> int:
    return server.query(ZONE, "SOA").answer[0][0].serial


def setup(tmp_path: Path, sock: socket.socket) -> tuple[Server, Path]:
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    manifests = tmp_path / "m.yaml"
    manifests.write_text(EXAMPLE.read_text())
    server = Server("--manifests", str(manifests), "--transfer-to", "127.0.0.1", "--tsig-key-file",
                    str(tmp_path / "key"), "--notify", f"127.0.0.1:{sock.getsockname()[1]}")
    return server, manifests


def test_an_unanswered_notify_is_signed_and_retried(tmp_path: Path) -> None:
    with listener() as sock:
        server, manifests = setup(tmp_path, sock)
        with server:
            receive(sock, time.monotonic() + 0.5)  # the start's own change, if any, is not this test's
            change(manifests, server, 1)
            eventually(lambda: server.query(f"web.demo.svc.{ZONE}", "A").answer[0][0].address == "10.96.10.11")
            serial = serial_of(server)
            got = [n for n in receive(sock, time.monotonic() + 4.5) if n[1].answer[0][0].serial == serial]
            _, metrics = server.http("/metrics")
    assert len(got) == 3, [(t, m.id) for t, m, _, _ in got]  # at once, after 1 s, after 2 s more
    for _, message, peer, _ in got:
        assert message.opcode() == dns.opcode.NOTIFY and message.flags & dns.flags.AA
        assert not message.flags & dns.flags.QR and message.had_tsig  # from_wire verified the MAC
        assert message.question[0].name == dns.name.from_text(ZONE)
        assert message.question[0].rdtype == dns.rdatatype.SOA
        assert message.answer[0].rdtype == dns.rdatatype.SOA and peer[0] == "127.0.0.1"
    gaps = [b[0] - a[0] for a, b in zip(got, got[1:])]
    assert 0.8 < gaps[0] < 1.6 and 1.7 < gaps[1] < 2.6, gaps
    assert 'mcsdns_notify_total{result="sent"}' in metrics


def test_a_burst_of_changes_is_coalesced(tmp_path: Path) -> None:
    """Twenty changes in about two seconds; the secondary acknowledges each NOTIFY. It gets at most one
    per 250 ms round (plus one for the start), and the last one carries the final serial."""
    with listener() as sock:
        server, manifests = setup(tmp_path, sock)
        with server:
            seen: list = []
            started = time.monotonic()
            for step in range(20):
                change(manifests, server, step)
                for arrival, message, peer, _ in receive(sock, time.monotonic() + 0.1):
                    seen.append((arrival, message))
                    ack = dns.message.make_response(message)
                    sock.sendto(ack.to_wire(), peer)
            eventually(lambda: server.query(f"web.demo.svc.{ZONE}", "A").answer[0][0].address == "10.96.10.29")
            final = serial_of(server)
            for arrival, message, peer, _ in receive(sock, time.monotonic() + 1.5):
                seen.append((arrival, message))
                sock.sendto(dns.message.make_response(message).to_wire(), peer)
            elapsed = time.monotonic() - started
            _, metrics = server.http("/metrics")
    assert 3 <= len(seen) <= elapsed / 0.25 + 2, (len(seen), elapsed)
    assert seen and seen[-1][1].answer[0][0].serial == final
    serials = [m.answer[0][0].serial for _, m in seen]
    assert serials == sorted(serials), serials  # newer serials only
    assert 'mcsdns_notify_total{result="acknowledged"}' in metrics, metrics
