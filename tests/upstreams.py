"""Upstream DNS servers for the forwarding tests: a real Knot DNS and small Python fakes.

`Knot` runs `knotd` on a loopback port with a zone the test writes. `Fake`
is a UDP+TCP server in a thread that answers every A query with a fixed
address after an optional delay, or swallows queries, and records what it
received byte for byte. `Mcsdns` is the shared `serverproc.Server` with a
readiness probe inside the zone, so a server whose upstreams are dead still
counts as started.
"""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rrset

from serverproc import Server, free_port

EXAMPLE_ZONE = """\
$ORIGIN example.test.
$TTL 300
@    SOA ns.example.test. admin.example.test. 1 3600 600 86400 300
@    NS  ns
ns   A   127.0.0.1
www  A   192.0.2.1
www  AAAA 2001:db8::1
"""


def big_txt(count: int = 40) -> str:
    """TXT lines for `big.example.test.`: about 2.4 KB of answer, more than Knot sends over UDP (1232)."""
    return "".join(f'big  TXT "{i:02d}-{"x" * 50}"\n' for i in range(count))


class Knot:
    """knotd serving `zone_text` as `domain` (default example.test.) on 127.0.0.1:<port>.

    Ready once `probe` (default www.example.test.) gets an answer from it.
    """

    def __init__(self, workdir: Path, zone_text: str = EXAMPLE_ZONE + big_txt(), domain: str = "example.test.",
                 probe: str = "www.example.test.") -> None:
        if shutil.which("knotd") is None:
            raise RuntimeError("knotd is not installed (apt-get install knot; .ci/run installs it)")
        self.dir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.probe = probe
        (workdir / f"{domain}zone").write_text(zone_text)
        (workdir / "knot.conf").write_text(
            f'server:\n    rundir: "{workdir}"\n    listen: 127.0.0.1@{self.port}\n'
            f"    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n"
            f'database:\n    storage: "{workdir}"\n'
            f"log:\n  - target: stderr\n    any: warning\n"
            f'zone:\n  - domain: {domain}\n    storage: "{workdir}"\n    file: "{domain}zone"\n'
        )

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "Knot":
        log = open(self.dir / "knotd.log", "wb")
        self.proc = subprocess.Popen(["knotd", "-c", str(self.dir / "knot.conf")], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        query = dns.message.make_query(self.probe, "A")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"knotd exited: {(self.dir / 'knotd.log').read_text()}")
            try:
                if dns.query.udp(query, "127.0.0.1", port=self.port, timeout=0.2).answer:
                    return self
            except Exception:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("knotd did not answer within 10s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Fake:
    """A UDP and TCP upstream in a thread: answers A queries with `address` after `delay`, or swallows them.

    `queries` holds every message received (raw bytes), so tests can compare
    what the client sent with what reached the upstream; `tcp_connections`
    counts accepted TCP connections. `mode` may be changed
    while it runs ("answer" or "swallow").
    """

    def __init__(self, address: str = "198.51.100.7", delay: float = 0.0, mode: str = "answer") -> None:
        self.address = address
        self.delay = delay
        self.mode = mode
        self.port = free_port()
        self.queries: list[bytes] = []
        self.tcp_connections = 0
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind(("127.0.0.1", self.port))
        self.tcp.listen(16)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve_udp, daemon=True),
                         threading.Thread(target=self._serve_tcp, daemon=True)]

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reply(self, data: bytes) -> bytes:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        if query.question[0].rdtype == 1:
            response.answer.append(dns.rrset.from_text(query.question[0].name, 60, "IN", "A", self.address))
        return response.to_wire()

    def _serve_udp(self) -> None:
        self.udp.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data, addr = self.udp.recvfrom(65535)
            except (TimeoutError, OSError):
                continue
            self.queries.append(data)
            if self.mode == "swallow":
                continue
            reply = self.reply(data)
            if self.delay:
                timer = threading.Timer(self.delay, self._send, (reply, addr))
                timer.daemon = True  # a reply still pending when the test ends must not hold up the run
                timer.start()
            else:
                self._send(reply, addr)

    def _send(self, reply: bytes, addr) -> None:
        try:
            self.udp.sendto(reply, addr)
        except OSError:
            pass

    def _serve_tcp(self) -> None:
        self.tcp.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except (TimeoutError, OSError):
                continue
            self.tcp_connections += 1
            threading.Thread(target=self._tcp_conn, args=(conn,), daemon=True).start()

    def _tcp_conn(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                while not self._stop.is_set():
                    head = conn.recv(2, socket.MSG_WAITALL)
                    if len(head) < 2:
                        return
                    data = conn.recv(struct.unpack(">H", head)[0], socket.MSG_WAITALL)
                    self.queries.append(data)
                    if self.mode == "swallow":
                        continue
                    if self.delay:
                        time.sleep(self.delay)
                    reply = self.reply(data)
                    conn.sendall(struct.pack(">H", len(reply)) + reply)
            except OSError:
                return

    def __enter__(self) -> "Fake":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(2)
        self.udp.close()
        self.tcp.close()


def dead_port() -> str:
    """An address where nothing listens: UDP gets ICMP port unreachable, TCP a reset."""
    return f"127.0.0.1:{free_port()}"


class Mcsdns(Server):
    """serverproc.Server, ready when the zone answers (out-of-zone probes would go to the upstreams)."""

    def _answers(self) -> bool:
        try:
            reply = dns.query.udp(dns.message.make_query("clusterset.local.", "SOA"), "127.0.0.1", port=self.dns_port, timeout=0.2)
            return reply.rcode() == dns.rcode.NOERROR
        except Exception:
            return False
