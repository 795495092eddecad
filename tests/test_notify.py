"""NOTIFY (--notify, mcsdns/xfr/notify.py) as a secondary sees it, on a loopback UDP socket of the test.

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

from testsupport.mcsdnsserver import ROOT, McsdnsServer, mcsdns_command

from testsupport.polling import eventually

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


def change(manifests: Path, server: McsdnsServer, step: int) -> None:
    manifests.write_text(EXAMPLE.read_text().replace("10.96.10.10", f"10.96.10.{10 + step}"))
    server.signal(signal.SIGHUP)


def serial_of(server: McsdnsServer) -> int:
    return server.query(ZONE, "SOA").answer[0][0].serial


def setup(tmp_path: Path, sock: socket.socket) -> tuple[McsdnsServer, Path]:
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    manifests = tmp_path / "m.yaml"
    manifests.write_text(EXAMPLE.read_text())
    server = McsdnsServer("--manifests", str(manifests), "--transfer-to", "127.0.0.1", "--tsig-key-file",
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


def listeners_on_one_port(hosts: list[str]) -> list[socket.socket]:
    """A UDP socket on each of `hosts`, all on one port (picked by the kernel for the first)."""
    for _ in range(20):
        socks: list[socket.socket] = []
        try:
            for host in hosts:
                sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(sock)
                sock.bind((host, socks[0].getsockname()[1] if len(socks) > 1 else 0))
            return socks
        except OSError:
            for sock in socks:
                sock.close()
    raise AssertionError("no port free on every address")


def test_a_host_name_is_resolved_at_each_change_and_every_address_notified(tmp_path: Path) -> None:
    """`--notify NAME:PORT` (a headless Service over per-node secondaries, say): at each change the name is
    looked up again and each address it has then gets the NOTIFY. The server runs in a mount namespace of
    its own whose /etc/hosts gives `secondaries.test` three addresses, then two; a second target that does
    not resolve is counted `unresolved` and logged, and costs the others nothing."""
    hosts = tmp_path / "hosts"
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")  # nothing else resolves, at once

    def names(addresses: list[str]) -> None:
        hosts.write_text("127.0.0.1 localhost\n" + "".join(f"{a} secondaries.test\n" for a in addresses))

    addresses = ["127.0.0.2", "127.0.0.3", "::1"]
    names(addresses)
    socks = listeners_on_one_port(addresses)
    port = socks[0].getsockname()[1]
    manifests = tmp_path / "m.yaml"
    manifests.write_text(EXAMPLE.read_text())
    server = McsdnsServer("--manifests", str(manifests), "--transfer-to", "127.0.0.1", "--notify", f"secondaries.test:{port}",
                    "--notify", f"nowhere.invalid:{port}")
    server.argv = ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/resolv.conf '
                   '&& shift && exec "$@"', str(hosts), str(resolv),
                   *mcsdns_command(server.dns_port, server.http_port, server.args)]

    def round_of(step: int, between=None) -> dict[str, int]:
        """Make change `step` (then call `between`); the serial each listener is sent, acknowledged
        (address -> serial)."""
        change(manifests, server, step)
        if between is not None:
            between()
        eventually(lambda: server.query(f"web.demo.svc.{ZONE}", "A").answer[0][0].address == f"10.96.10.{10 + step}")
        serial = serial_of(server)
        got: dict[str, int] = {}
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            for address, sock in zip(addresses, socks):
                for _, message, peer, _ in receive(sock, time.monotonic() + 0.05):
                    sock.sendto(dns.message.make_response(message).to_wire(), peer)
                    if message.answer[0][0].serial == serial:
                        got[address] = serial
        return {a: s for a, s in got.items() if s == serial}

    with server:
        try:
            assert set(round_of(1)) == {"127.0.0.2", "127.0.0.3", "::1"}
            names(["127.0.0.2", "::1"])  # a node went away: its address is no longer the name's
            assert set(round_of(2)) == {"127.0.0.2", "::1"}
            # The name is gone when the change comes (a cluster DNS that failed once), back 0.5 s later:
            # the lookup is tried again after 1 s, and the NOTIFY goes without another change.
            names([])
            assert set(round_of(3, between=lambda: (time.sleep(0.5), names(["127.0.0.3"])))) == {"127.0.0.3"}
            _, metrics = server.http("/metrics")
        finally:
            for sock in socks:
                sock.close()
    assert "nowhere.invalid:%d: nowhere.invalid does not resolve" % port in server.log(), server.log()[-2000:]
    unresolved = float(metrics.split('mcsdns_notify_total{result="unresolved"} ')[1].split()[0])
    acknowledged = float(metrics.split('mcsdns_notify_total{result="acknowledged"} ')[1].split()[0])
    assert unresolved >= 4 and acknowledged >= 6, metrics
