"""Run the real `mcsdns serve` as a subprocess on free loopback ports.

The one helper the real-socket tests share: it picks free ports, starts the
command, waits until DNS answers and /health is up, and stops the process by
PID (SIGTERM, then SIGKILL) however the test ends.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import dns.message
import dns.query
import dns.rdatatype
from testsupport.framing import FrameReader, frame
from testsupport.testbed import free_port, stop_popen

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

# Where a server's log goes when the caller names no file. Under pytest, the running test's tmp_path
# (tests/conftest.py sets it), so a failure's log sits with the test and pytest removes old runs; else
# one directory of this process, removed when it exits.
LOG_DIR: Path | None = None
_process_log_dir: tempfile.TemporaryDirectory | None = None


def log_dir() -> Path:
    """LOG_DIR, or this process's own log directory."""
    global _process_log_dir
    if LOG_DIR is not None:
        return LOG_DIR
    if _process_log_dir is None:
        _process_log_dir = tempfile.TemporaryDirectory(prefix="mcsdns-logs-")
    return Path(_process_log_dir.name)


def mcsdns_command(dns_port: int, http_port: int, args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """`python -m mcsdns serve` on 127.0.0.1:<dns_port> (admin on <http_port>), no lameduck wait, and
    hermetic: `--upstream none` unless `args` name upstreams (never this host's resolv.conf)."""
    return [
        sys.executable, "-m", "mcsdns", "serve",
        "--listen", f"127.0.0.1:{dns_port}",
        "--http-listen", f"127.0.0.1:{http_port}",
        "--lameduck", "0",
        *(() if "--upstream" in args else ("--upstream", "none")),
        *args,
    ]  # fmt: skip


def http_get(port: int, path: str, timeout: float = 2) -> tuple[int, str]:
    """GET http://127.0.0.1:`port``path`: (status, body); (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


class McsdnsServer:
    """`mcsdns serve ARGS` on 127.0.0.1:<dns_port>, admin on 127.0.0.1:<http_port>."""

    def __init__(self, *args: str, wait_ready: bool = True, env: dict | None = None) -> None:
        self.dns_port = free_port()
        self.http_port = free_port()
        self.args = list(args)
        self.wait_ready = wait_ready
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        # The whole command, when a test runs the server some other way (the Deployment's own launcher);
        # it must still listen on dns_port and http_port.
        self.argv: list[str] | None = None

    @property
    def addr(self) -> tuple[str, int]:
        return ("127.0.0.1", self.dns_port)

    def start(self, log_path: Path | None = None, timeout: float = 20) -> "McsdnsServer":
        cmd = self.argv or mcsdns_command(self.dns_port, self.http_port, self.args)
        self.log_path = log_path or log_dir() / f"mcsdns-{self.dns_port}.log"
        self._log = open(self.log_path, "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(self.env or {}))
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mcsdns exited with {self.proc.returncode}:\n{self.log()}")
            # The admin port opens just after the DNS listeners: wait for it too (a 503 counts), or a
            # test's first /ready on a loaded machine can fall in between and see nothing listening.
            if self._answers() and self.http("/ready")[0] in ((200,) if self.wait_ready else (200, 503)):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mcsdns did not become ready in {timeout}s:\n{self.log()}")

    def _answers(self) -> bool:
        try:
            dns.query.udp(dns.message.make_query("probe.invalid.", "A"), "127.0.0.1", port=self.dns_port, timeout=0.2)
            return True
        except Exception:
            return False

    def http(self, path: str) -> tuple[int, str]:
        return http_get(self.http_port, path)

    def query(self, qname: str, qtype: str = "A", *, tcp: bool = False, timeout: float = 2, **kw) -> dns.message.Message:
        q = dns.message.make_query(qname, qtype, **kw)
        if tcp:
            return dns.query.tcp(q, "127.0.0.1", port=self.dns_port, timeout=timeout)
        return dns.query.udp(q, "127.0.0.1", port=self.dns_port, timeout=timeout, ignore_trailing=False)

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10) -> int | None:
        if self.proc is None:
            return None
        code = stop_popen(self.proc, timeout)
        self._log.close()
        return code

    def __enter__(self) -> "McsdnsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------- asking over real sockets


def ask(server: McsdnsServer, name: str, qtype: str, how: str = "udp") -> dns.message.Message:
    """One query: `udp` (EDNS 1232), `udp512` (no EDNS) or `tcp`; the reply must parse strictly."""
    q = dns.message.make_query(name, qtype, use_edns=False if how == "udp512" else 0, payload=1232)
    if how == "tcp":
        return dns.query.tcp(q, "127.0.0.1", port=server.dns_port, timeout=2)
    return dns.query.udp(q, "127.0.0.1", port=server.dns_port, timeout=2, ignore_trailing=False, raise_on_truncation=False)


def samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample named `name` in a /metrics text whose labels include `labels`, in order."""
    found = [(dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")), float(m.group(2)))
             for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M)]
    return [(got, value) for got, value in found if labels.items() <= got.items()]


def total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` in a /metrics text whose labels include `labels` (0 when none)."""
    return sum(value for _, value in samples(text, name, **labels))


def metric(server: McsdnsServer, name: str, **labels: str) -> float:
    """Sum of the samples of `name` on the server's /metrics whose labels include `labels` (with
    --workers, one sample per worker)."""
    return total(server.http("/metrics")[1], name, **labels)


def order(reply: dns.message.Message) -> list[str]:
    """The answer section's rdata, in the order sent."""
    return [rd.to_text() for rrset in reply.answer for rd in rrset]


def exchange(server: McsdnsServer, wire: bytes, tcp: bool) -> bytes:
    """The reply's bytes, as sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        if not tcp:
            sock.sendto(wire, server.addr)
            return sock.recv(65535)
        sock.connect(server.addr)
        sock.sendall(frame(wire))
        reader = FrameReader(sock)
        reply = reader.expect()
        assert not reader.buffer, "bytes after the reply"
        return reply


def record_sets(reply: dns.message.Message) -> tuple:
    """A reply with its records as sets: everything but record order, SRV priorities (--local-cluster)
    and the SOA serial (each server has its own)."""

    def records(rrsets) -> list:
        out = []
        for r in rrsets:
            for rd in r:
                if rd.rdtype == dns.rdatatype.SOA:
                    rd = rd.replace(serial=0)
                elif rd.rdtype == dns.rdatatype.SRV:
                    rd = rd.replace(priority=0)
                out.append((r.name.to_text().lower(), r.rdtype, r.ttl, rd.to_text().lower()))
        return sorted(out)

    return (reply.rcode(), reply.flags, records(reply.answer), records(reply.authority), records(reply.additional),
            reply.edns, reply.payload)
