"""Upstream DNS servers for the forwarding tests: a real Knot DNS and small Python fakes.

`Knot` runs `knotd` on a loopback port with a zone the test writes. `Fake`
is a UDP+TCP server in a thread that answers every A query with a fixed
address after an optional delay, or swallows queries, and records what it
received byte for byte (and, over UDP, from where). `Hostile` is a Fake that
sends forged replies before each true one. `ForwardingServer` is the shared
`mcsdnsserver.McsdnsServer` with a readiness probe inside the zone, so a server whose
upstreams are dead still counts as started.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from testsupport.framing import FrameReader, frame
from testsupport.mcsdnsserver import McsdnsServer
from testsupport.testbed import free_port

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
    what the client sent with what reached the upstream; `sources` the
    (address, port) each UDP one came from; `tcp_connections` counts accepted
    TCP connections. `mode` may be changed while it runs ("answer" or
    "swallow"). `lowercase` answers with the question name lower-cased, as
    upstreams that do not preserve case do (dns-0x20 cannot work with them).
    """

    def __init__(self, address: str = "198.51.100.7", delay: float = 0.0, mode: str = "answer",
                 lowercase: bool = False) -> None:
        self.address = address
        self.delay = delay
        self.mode = mode
        self.lowercase = lowercase
        self.port = free_port()
        self.queries: list[bytes] = []
        self.sources: list[tuple[str, int]] = []
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
        wire = response.to_wire()
        if self.lowercase:
            end = wire.index(b"\x00", 12) + 1  # the question name (not compressed: it comes first)
            wire = wire[:12] + wire[12:end].lower() + wire[end:]
        return wire

    def tcp_replies(self, data: bytes) -> list[bytes]:
        """What to write back on a TCP connection for the query `data`, in order."""
        return [self.reply(data)]

    def _serve_udp(self) -> None:
        self.udp.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data, addr = self.udp.recvfrom(65535)
            except (TimeoutError, OSError):
                continue
            self.queries.append(data)
            self.sources.append(addr)
            if self.mode == "swallow":
                continue
            if not self.before_reply(data, addr):
                continue
            reply = self.reply(data)
            if self.delay:
                timer = threading.Timer(self.delay, self._send, (reply, addr))
                timer.daemon = True  # a reply still pending when the test ends must not hold up the run
                timer.start()
            else:
                self._send(reply, addr)

    def before_reply(self, data: bytes, addr) -> bool:
        """Called before each UDP reply is sent (or scheduled); False: send none. Hostile forges here."""
        return True

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
            reader = FrameReader(conn)
            try:
                while not self._stop.is_set():
                    data = reader.read()
                    if data is None:
                        return
                    self.queries.append(data)
                    if self.mode == "swallow":
                        continue
                    if self.delay:
                        time.sleep(self.delay)
                    conn.sendall(b"".join(frame(m) for m in self.tcp_replies(data)))
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


FORGED = "203.0.113.66"  # the address every forged reply carries


class Hostile(Fake):
    """An upstream that answers each query first with forgeries, then (after `delay`) with the truth.

    Each forgery carries the forged address: one without a question, one for
    another name, one for another type, one for another class, one with
    another ID (all from the upstream's own address and port), and over UDP
    one from another loopback address (127.0.0.2, same port) that is right in
    every other way. Over TCP the forgeries come first on the connection.
    FORGERIES names them by the reason mcsdns counts them under. With
    `truth=False` only the forgeries are sent.
    """

    FORGERIES = ("no_question", "name", "type", "class", "id")
    OTHER_SOURCE = "127.0.0.2"

    def __init__(self, delay: float = 0.05, truth: bool = True) -> None:
        super().__init__(delay=delay)
        self.truth = truth
        self.other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.other.bind((self.OTHER_SOURCE, self.port))

    def forgeries(self, data: bytes) -> list[bytes]:
        query = dns.message.from_wire(data)
        q = query.question[0]
        out = []
        for kind in self.FORGERIES:
            name, rdtype, rdclass, qid = q.name, q.rdtype, q.rdclass, query.id
            if kind == "name":
                name = dns.name.from_text("forged.example.net.")
            elif kind == "type":
                rdtype = dns.rdatatype.AAAA if rdtype != dns.rdatatype.AAAA else dns.rdatatype.A
            elif kind == "class":
                rdclass = dns.rdataclass.CH
            elif kind == "id":
                qid = (qid + 1) % 65536
            forged = dns.message.make_query(name, rdtype, rdclass)
            forged.id = qid
            response = dns.message.make_response(forged)
            response.answer.append(dns.rrset.from_text(q.name, 60, "IN", "A", FORGED))
            if kind == "no_question":
                response.question = []
            out.append(response.to_wire())
        return out

    def before_reply(self, data: bytes, addr) -> bool:
        for forged in self.forgeries(data):
            self._send(forged, addr)
        query = dns.message.from_wire(data)
        exact = dns.message.make_response(query)  # right ID, question and port: only the address is wrong
        exact.answer.append(dns.rrset.from_text(query.question[0].name, 60, "IN", "A", FORGED))
        try:
            self.other.sendto(exact.to_wire(), addr)
        except OSError:
            pass
        return self.truth

    def tcp_replies(self, data: bytes) -> list[bytes]:
        return self.forgeries(data) + ([self.reply(data)] if self.truth else [])

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        self.other.close()


def dead_port() -> str:
    """An address where nothing listens: UDP gets ICMP port unreachable, TCP a reset."""
    return f"127.0.0.1:{free_port()}"


class ForwardingServer(McsdnsServer):
    """`mcsdns serve` that forwards (the tests of forwarding, metrics, lifecycle): mcsdnsserver.McsdnsServer, ready
    when the zone answers, so the upstreams see only the test's queries (the base probe is out of zone)."""

    def _answers(self) -> bool:
        try:
            reply = dns.query.udp(dns.message.make_query("clusterset.local.", "SOA"), "127.0.0.1", port=self.dns_port, timeout=0.2)
            return reply.rcode() == dns.rcode.NOERROR
        except Exception:
            return False


