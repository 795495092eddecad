"""`mcsdns follow-primary` as a sidecar runs it: real DNS servers on loopback sockets.

A "cluster DNS" answers the headless name with the addresses a test gives it (or fails, or has
none); "pods" on 127.0.0.2 and 127.0.0.3, one port, answer the zone's SOA (UDP) or not, and an IXFR at
that serial (TCP) with the SOA or, as an mcsdns pod in its lameduck does, with REFUSED. The command
runs as a process, and the test reads what a secondary would: the file it writes, and its log.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from testsupport.polling import eventually
from testsupport.testbed import free_port

NAME = "mcsdns-primaries.mcsdns.svc.cluster.local."
ZONE = "clusterset.local."


SOA = f"ns.dns.{ZONE} hostmaster.{ZONE} 1 7200 1800 86400 5"


class Server:
    """A UDP DNS server on `address`:`port`: A queries for NAME get `self.listed` (NXDOMAIN when empty,
    SERVFAIL while `self.failing`); the SOA of ZONE is answered when `soa`. A pod (`soa`) also listens
    on TCP: an IXFR of ZONE gets the SOA, or REFUSED while `leaving` (shutting down)."""

    def __init__(self, address: str, port: int, listed: list[str] | None = None, soa: bool = False) -> None:
        self.listed = list(listed or [])
        self.failing = False
        self.soa = soa
        self.leaving = False
        self.ixfrs = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        self.tcp: socket.socket | None = None
        if soa:
            self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp.bind((address, port))
            self.tcp.listen(8)
            threading.Thread(target=self.serve_tcp, daemon=True).start()

    def serve_tcp(self) -> None:
        assert self.tcp is not None
        while True:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            with conn:
                try:
                    query = dns.query.receive_tcp(conn, expiration=time.time() + 2)[0]
                except Exception:
                    continue
                self.ixfrs += 1
                reply = dns.message.make_response(query)
                if self.leaving or query.question[0].rdtype != dns.rdatatype.IXFR or not query.authority:
                    reply.set_rcode(dns.rcode.REFUSED)
                else:
                    reply.answer.append(dns.rrset.from_text(ZONE, 5, "IN", "SOA", SOA))
                dns.query.send_tcp(conn, reply)

    def serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            query = dns.message.from_wire(data)
            reply = dns.message.make_response(query)
            q = query.question[0]
            if q.rdtype == dns.rdatatype.SOA and q.name.to_text() == ZONE and self.soa:
                reply.flags |= dns.flags.AA
                reply.answer.append(dns.rrset.from_text(ZONE, 5, "IN", "SOA", SOA))
            elif q.name.to_text() != NAME or self.failing:
                reply.set_rcode(dns.rcode.SERVFAIL)
            elif not self.listed:
                reply.set_rcode(dns.rcode.NXDOMAIN)
            elif q.rdtype == dns.rdatatype.A:
                reply.answer.append(dns.rrset.from_text(NAME, 5, "IN", "A", *self.listed))
            self.sock.sendto(reply.to_wire(), peer)

    def close(self) -> None:
        self.sock.close()
        if self.tcp is not None:
            self.tcp.close()


@pytest.fixture
def world():
    port = free_port()
    dns_server = Server("127.0.0.1", free_port())
    pods = {"127.0.0.2": Server("127.0.0.2", port, soa=True), "127.0.0.3": Server("127.0.0.3", port, soa=True)}
    yield dns_server, pods, port
    for s in (dns_server, *pods.values()):
        s.close()


def command(dns_server: Server, port: int, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mcsdns", "follow-primary", "--name", NAME,
            "--server", f"127.0.0.1:{dns_server.sock.getsockname()[1]}", "--port", str(port), "--out", str(out), *extra]


def test_once_writes_a_listed_address_that_serves_transfers(world, tmp_path: Path) -> None:
    dns_server, pods, port = world
    pods["127.0.0.2"].soa = False  # listed (ready) but not answering: not chosen
    dns_server.listed = ["127.0.0.2", "127.0.0.3"]
    out = tmp_path / "secondary.conf"
    done = subprocess.run(command(dns_server, port, out, "--once"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == f"secondary {{\n    transfer from 127.0.0.3:{port}\n}}\n"
    assert f"transferring from mcsdns pod 127.0.0.3:{port}" in done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["secondary.conf"]  # no temporary file left beside it


def test_once_with_no_answering_address_writes_nothing_and_exits_1(world, tmp_path: Path) -> None:
    dns_server, pods, port = world
    out = tmp_path / "secondary.conf"
    done = subprocess.run(command(dns_server, port, out, "--once"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and not out.exists()
    assert f"{NAME} lists no address: keeping {out} unwritten" in done.stderr, done.stderr
    pods["127.0.0.2"].soa = pods["127.0.0.3"].soa = False
    dns_server.listed = ["127.0.0.2", "127.0.0.3"]
    done = subprocess.run(command(dns_server, port, out, "--once"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and not out.exists()
    assert "lists 127.0.0.2, 127.0.0.3, none serving transfers of clusterset.local here" in done.stderr, done.stderr


def test_a_pod_in_its_lameduck_is_not_chosen(world, tmp_path: Path) -> None:
    """A rollout's old pod, still listed (the cluster DNS caches the name) and answering queries, but
    refusing transfers since its SIGTERM: the follower takes the pod that stays, even second in order."""
    dns_server, pods, port = world
    pods["127.0.0.2"].leaving = True
    dns_server.listed = ["127.0.0.2", "127.0.0.3"]
    out = tmp_path / "secondary.conf"
    done = subprocess.run(command(dns_server, port, out, "--once"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == f"secondary {{\n    transfer from 127.0.0.3:{port}\n}}\n"
    assert pods["127.0.0.2"].ixfrs == 1 and pods["127.0.0.3"].ixfrs == 1  # each asked, over TCP
    pods["127.0.0.3"].leaving = True  # both leaving: nothing is written
    out.unlink()
    done = subprocess.run(command(dns_server, port, out, "--once"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and not out.exists(), done.stderr


def test_keeps_the_address_while_listed_switches_when_it_goes_and_survives_a_failing_lookup(world, tmp_path: Path) -> None:
    dns_server, pods, port = world
    dns_server.listed = ["127.0.0.3"]
    template = tmp_path / "template"
    template.write_text("remote: MCSDNS_PRIMARY # the rest of the file as written\n")
    out = tmp_path / "primary.conf"
    proc = subprocess.Popen(command(dns_server, port, out, "--template", str(template), "--interval", "0.2"),
                            stderr=subprocess.PIPE, text=True)
    try:
        eventually(out.exists, 10, what=f"{out} written")
        assert out.read_text() == f"remote: 127.0.0.3:{port} # the rest of the file as written\n"
        written = out.stat().st_ino
        dns_server.listed = ["127.0.0.2", "127.0.0.3"]  # another pod, first in order: the chosen one stays
        time.sleep(1.0)
        assert out.stat().st_ino == written, "rewritten although its address is still listed"
        dns_server.failing = True  # the cluster DNS fails: nothing changes
        time.sleep(1.0)
        assert out.stat().st_ino == written
        dns_server.failing = False
        dns_server.listed = []  # no pod listed (all unready): nothing better to write
        time.sleep(1.0)
        assert out.stat().st_ino == written
        dns_server.listed = ["127.0.0.2"]  # the chosen pod is gone: the other one, written atomically
        eventually(lambda: out.read_text() == f"remote: 127.0.0.2:{port} # the rest of the file as written\n", 10,
                   what=lambda: f"the move to 127.0.0.2 in {out}: {out.read_text()!r}")
        assert out.stat().st_ino != written
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert f"transferring from mcsdns pod 127.0.0.3:{port}" in err, err
    assert err.count(f"cannot look {NAME} up") == 1, err  # said once, not every pass
    assert "keeping mcsdns pod 127.0.0.3" in err
    assert f"127.0.0.3 is no longer listed by {NAME}; transferring from mcsdns pod 127.0.0.2:{port}" in err, err


def test_a_restart_keeps_the_address_the_file_already_holds(world, tmp_path: Path) -> None:
    dns_server, pods, port = world
    dns_server.listed = ["127.0.0.2", "127.0.0.3"]
    out = tmp_path / "secondary.conf"
    out.write_text(f"secondary {{\n    transfer from 127.0.0.3:{port}\n}}\n")  # written before the restart
    written = out.stat().st_ino
    done = subprocess.run(command(dns_server, port, out, "--once"), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and out.stat().st_ino == written, done.stderr


@pytest.mark.parametrize("args, message", [
    (["--port", "0"], "argument --port: must be in range [1, 65535]: 0"),
    (["--interval", "0"], "argument --interval: must be in range (0, 3600] seconds: 0"),
    (["--interval", "soon"], "argument --interval: 'soon' is not a duration"),
    (["--server", "10.96.0.10:99999"], "argument --server"),
    (["--template", "/nonexistent/template"], "--template /nonexistent/template: cannot read it: No such file or directory"),
    (["--template", "{template}"], "--template {template}: MCSDNS_PRIMARY does not occur in it"),
    (["--out", "/nonexistent/dir/out"], "--out /nonexistent/dir/out: the directory /nonexistent/dir does not exist"),
])
def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path, args: list[str], message: str) -> None:
    template = tmp_path / "template"
    template.write_text("transfer from 10.0.0.1:5353\n")
    args = [a.replace("{template}", str(template)) for a in args]
    base = ["--name", NAME, "--out", str(tmp_path / "out")]
    done = subprocess.run([sys.executable, "-m", "mcsdns", "follow-primary", *base, *args], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert message.replace("{template}", str(template)) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_lookup_failing_in_changing_ways_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A lookup that keeps failing is said once, whichever of its A and AAAA queries failed first in each
    pass (the error's text names it), and the chosen address stays written."""
    import logging

    from mcsdns.xfr.follow import Follower, LookupFailed, Settings

    outcomes: list[object] = [["127.0.0.2"], LookupFailed("SERVFAIL for IN AAAA"), LookupFailed("SERVFAIL for IN A"),
                              LookupFailed("SERVFAIL for IN AAAA"), LookupFailed("SERVFAIL for IN A")]

    def lookup(name: str, server: tuple[str, int] | None) -> list[str]:
        got = outcomes.pop(0)
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[return-value]

    settings = Settings(NAME, None, 5353, "clusterset.local", "remote: MCSDNS_PRIMARY\n", tmp_path / "out.conf", 1.0)
    follower = Follower(settings, lookup=lookup, serves=lambda address, port, zone: True)
    with caplog.at_level(logging.INFO, logger="mcsdns.follow"):
        for _ in range(5):
            assert follower.step()
    failures = [r.getMessage() for r in caplog.records if "cannot look" in r.getMessage()]
    assert len(failures) == 1 and "IN AAAA" in failures[0], failures
    assert (tmp_path / "out.conf").read_text() == "remote: 127.0.0.2:5353\n"


def test_a_real_mcsdns_is_chosen_until_its_sigterm(tmp_path: Path) -> None:
    """Both halves for real: `mcsdns serve --transfer-to` is chosen; after its SIGTERM it still answers
    queries (its lameduck) but the follower no longer chooses it."""
    from testsupport.mcsdnsserver import ROOT, McsdnsServer

    dns_server = Server("127.0.0.1", free_port(), listed=["127.0.0.1"])
    out = tmp_path / "secondary.conf"
    try:
        with McsdnsServer("--manifests", str(ROOT / "mcsdns" / "examples" / "clusterset.yaml"), "--transfer-to",
                          "127.0.0.1", "--lameduck", "6s") as server:
            done = subprocess.run(command(dns_server, server.dns_port, out, "--once"), capture_output=True,
                                  text=True, timeout=30)
            assert done.returncode == 0, done.stderr
            assert out.read_text() == f"secondary {{\n    transfer from 127.0.0.1:{server.dns_port}\n}}\n"
            out.unlink()
            server.signal(signal.SIGTERM)
            eventually(lambda: server.http("/ready")[0] == 503, 5, what="/ready 503 after SIGTERM")
            done = subprocess.run(command(dns_server, server.dns_port, out, "--once"), capture_output=True,
                                  text=True, timeout=30)
            assert done.returncode == 1 and not out.exists(), done.stderr
            assert "lists 127.0.0.1, none serving transfers of clusterset.local here" in done.stderr, done.stderr
            assert server.query(ZONE, "SOA").answer and server.proc is not None and server.proc.poll() is None
    finally:
        dns_server.close()
