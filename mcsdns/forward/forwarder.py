"""Forwarding of names outside the served zones: CoreDNS's `forward` plugin, in asyncio.

A query the resolver hands over (`Forward`) goes to one upstream at a time,
chosen by policy (random, round_robin, sequential) among the healthy ones,
until one replies or the per-query timeout runs out (then SERVFAIL: the error replies are the
resolver's, `resolve.forward_failed` and `resolve.forward_overloaded`). The
client's message goes out byte for byte except the ID, and the upstream's
reply comes back byte for byte except the ID; the one exception is a reply
too large for the client's UDP buffer, which is cut to a TC=1 header so the
client retries over TCP.

Transport: UDP clients are forwarded over UDP, retried over TCP when the
upstream truncates below what the client can take (EDNS buffer > 512); TCP
clients are forwarded over TCP. Each UDP query leaves from its own socket on
a random port under a random ID (`UdpQuery`, RFC 5452), and a reply is
accepted only from the address and port the query went to, with that ID and
the very question sent (`replycheck.py`); everything else is counted and
ignored while the wait goes on. TCP connections are kept idle for reuse (one
query at a time each); their replies get the same checks. With
`--forward-0x20` the name goes out in random letter case, which the reply
must echo (dns-0x20). Forwarded replies are never cached.

Health: two consecutive failures mark an upstream down; from its first
failure a background task probes it with `. IN NS` (as CoreDNS does) until
any reply comes back. When every upstream is down they are tried anyway.

Bounds: at most `max_concurrent` queries in flight (beyond it REFUSED at
once); each holds a future, a copy of the query and at most one UDP socket
or TCP connection at a time, so memory and open sockets stay proportional to
that bound.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config, ConfigError, check_upstreams, hostport_text
from ..serve.querylog import client_text, errors, name_text
from ..serve.resolve import LocalReply, forward_failed, forward_overloaded
from ..zone.vocab import AXFR, IXFR, type_text
from ..zone.wire import MAX_UDP, TC, Query, opt_record
from .replycheck import check_reply, mix_case

if TYPE_CHECKING:
    from ..metrics import Metrics

log = logging.getLogger(__name__)

RESOLV_CONF = Path("/etc/resolv.conf")
MAX_FAILS = 2  # CoreDNS forward `max_fails`: consecutive failures before an upstream is marked down
PROBE_INTERVAL = 0.5  # CoreDNS `health_check` default
PROBE_TIMEOUT = 1.0  # CoreDNS health check read timeout
TCP_IDLE = 10.0  # CoreDNS `expire`: idle upstream TCP connections are closed after this long
TCP_POOL = 16  # idle TCP connections kept per upstream
MAX_STRAY = 8  # replies that do not answer our query read from one TCP connection before giving up on it
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)  # Linux values; Python names them only on some builds
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)

U16 = struct.Struct(">H")
# `. IN NS`, RD set (CoreDNS health checks use recursion desired by default); ID 0 is replaced on send.
PROBE = b"\x00\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x00\x00\x02\x00\x01"
PROBE_QUESTION = PROBE[12:]
_ids = random.SystemRandom()


class ForwardingLoop(ConfigError):
    """An upstream is this server itself: every out-of-zone query would come back to us forever."""


class UpstreamError(Exception):
    """One exchange with one upstream failed: timeout, refused, reset or unusable reply."""


# --------------------------------------------------------------------------- configuration


def upstreams_from_config(config: Config, resolv_conf: Path = RESOLV_CONF) -> list[tuple[str, int]]:
    """--upstream as given; without it, resolv.conf's nameservers minus our own listen addresses."""
    if config.upstreams is not None:
        return list(config.upstreams)  # checked by Config.validate
    found = read_resolv_conf(resolv_conf)
    keep = []
    for host in found:
        if any(is_self((host, 53), listen) for listen in config.listen):
            log.info("%s: skipping nameserver %s, it is this server's own listen address", resolv_conf, host)
        else:
            keep.append((host, 53))
    if not keep:
        log.warning("no usable nameserver in %s: names outside %s are REFUSED", resolv_conf, ", ".join(config.zones))
    return keep


def read_resolv_conf(path: Path) -> list[str]:
    """The `nameserver` addresses of a resolv.conf, in order; [] when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        log.warning("%s: cannot read (%s)", path, exc.strerror or exc)
        return []
    out = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split(";", 1)[0].split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            host = parts[1].split("%", 1)[0]  # fe80::1%eth0: scoped addresses cannot be used from here
            try:
                ipaddress.ip_address(host)
            except ValueError:
                log.warning("%s: ignoring nameserver %r, not an IP address", path, parts[1])
                continue
            if host not in out:
                out.append(host)
    return out


def is_self(upstream: tuple[str, int], listen: tuple[str, int]) -> bool:
    """Whether queries sent to `upstream` would arrive at the listener `listen`.

    Same port and either the same address, or a wildcard listener and an
    upstream address of this host (`::` also takes IPv4 on a dual-stack host).
    """
    (uhost, uport), (lhost, lport) = upstream, listen
    if uport != lport or lport == 0:
        return False
    try:
        uip = ipaddress.ip_address(uhost)
    except ValueError:
        return False
    if lhost in ("", "0.0.0.0", "::"):
        if lhost == "0.0.0.0" and uip.version != 4:
            return uip.ipv4_mapped is not None and is_local_address(str(uip.ipv4_mapped))
        return is_local_address(str(uip))
    try:
        lip = ipaddress.ip_address(lhost)
    except ValueError:
        return False
    return uip == lip or (uip.is_unspecified and is_local_address(str(lip)))


def is_local_address(host: str) -> bool:
    """True when `host` is an address of this machine: the kernel lets us bind to it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


def check_loops(upstreams: list[tuple[str, int]], listen: list[tuple[str, int]]) -> None:
    """Raise ForwardingLoop when an upstream is one of our own listen addresses."""
    for up in upstreams:
        for addr in listen:
            if is_self(up, addr):
                raise ForwardingLoop(
                    f"--upstream {hostport_text(*up)} is this server's own listen address {hostport_text(*addr)}: "
                    f"out-of-zone queries would be forwarded to ourselves in a loop. "
                    f"Give a different upstream, or --upstream none to refuse out-of-zone names"
                )


# --------------------------------------------------------------------------- UDP


class UdpQuery:
    """One query over UDP from its own socket, open only while the query waits (RFC 5452).

    The socket is unconnected and bound by the kernel to a random ephemeral
    port (Linux picks UDP ports at random); the query carries a random ID.
    Every datagram the socket receives is checked: it must come from the exact
    address and port the query went to and pass `check_reply`. Anything else
    is counted by reason and the wait goes on. IP_RECVERR keeps ICMP port
    unreachable visible on the unconnected socket, so a dead upstream still
    fails at once instead of timing out.
    """

    __slots__ = ("sock", "future", "peer", "family", "qid", "question", "exact", "metrics", "label")

    def __init__(self, upstream: "Upstream", raw: bytes, question: bytes, exact: bool) -> None:
        self.family = upstream.family
        self.peer = upstream.peer
        self.metrics = upstream.metrics
        self.label = upstream.label
        self.question = question
        self.exact = exact
        self.qid = _ids.getrandbits(16)
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.sock = socket.socket(upstream.family, socket.SOCK_DGRAM)
        try:
            self.sock.setblocking(False)
            if upstream.family == socket.AF_INET6:
                self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
            else:
                self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
            self.sock.sendto(U16.pack(self.qid) + raw[2:], upstream.addr)
        except OSError:
            self.sock.close()
            raise

    async def reply(self, timeout: float) -> bytes:
        """The first acceptable reply within `timeout`; the socket is closed however this ends."""
        loop = asyncio.get_running_loop()
        fd = self.sock.fileno()
        loop.add_reader(fd, self._readable)
        try:
            async with asyncio.timeout(timeout):
                return await self.future
        except TimeoutError:
            raise UpstreamError(f"no reply over UDP within {timeout:.3g}s") from None
        finally:
            loop.remove_reader(fd)
            self.sock.close()

    def _readable(self) -> None:
        while not self.future.done():
            try:
                data, source = self.sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # ICMP port/host unreachable for the datagram we sent
                self.future.set_exception(UpstreamError(_oserror(exc)))
                return
            if source[0] != self.peer[0] or source[1] != self.peer[1]:
                _mismatch(self.metrics, self.label, "source", source)
                continue
            reason, reply = check_reply(data, self.qid, self.question, self.exact)
            if reason is not None:
                _mismatch(self.metrics, self.label, reason, source)
                continue
            self.future.set_result(reply)


def _mismatch(metrics: "Metrics | None", label: str, reason: str, source: object) -> None:
    """A reply that does not answer our query: count it, say so (rate-limited), keep waiting."""
    if metrics is not None:
        metrics.mismatched_reply(reason)
    errors.log("forward-mismatch", logging.WARNING, "dropped a reply from %s for a query to %s: %s",
               client_text(source), label, reason)


# --------------------------------------------------------------------------- upstream


class Upstream:
    """One upstream server: its sockets, its idle TCP connections and its health."""

    def __init__(self, host: str, port: int, metrics: "Metrics | None" = None) -> None:
        self.addr = (host, port)
        self.family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.label = hostport_text(host, port)  # CoreDNS's `to` label: net.JoinHostPort
        self.metrics = metrics
        # What a UDP reply's source must be, spelled as recvfrom spells addresses (inet_ntop).
        self.peer = (socket.inet_ntop(self.family, socket.inet_pton(self.family, host)), port)
        self.fails = 0
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []
        self.prober: asyncio.Task | None = None

    @property
    def down(self) -> bool:
        return self.fails >= MAX_FAILS

    # ----------------------------------------------------------------- exchanges

    async def exchange(self, q: Query, tcp: bool, timeout: float, exact: bool = False) -> bytes:
        """The upstream's reply to `q` (ID as we sent it); UDP first unless the client used TCP.

        `exact` (dns-0x20): the name goes out with its letters' case chosen at
        random and the reply must echo that spelling exactly. Either way the
        reply comes back with the client's own spelling in its question.

        A truncated UDP reply is fetched again over TCP when the client's own
        buffer is larger than 512 bytes: the upstream may have cut at its own
        limit (Knot, BIND: 1232) below the client's. A client without EDNS
        gets the TC reply as is, since the full answer could not fit anyway.
        """
        raw = q.raw
        name_end = q.qend - 4
        if exact:
            raw = raw[:12] + mix_case(raw[12:name_end]) + raw[name_end:]
        question = raw[12 : q.qend]
        reusable = q.qtype not in (AXFR, IXFR)  # a transfer may leave more messages on the stream
        if tcp:
            reply = await self.tcp(raw, question, timeout, reusable, exact)
        else:
            deadline = time.monotonic() + timeout
            reply = await self.udp(raw, question, timeout, exact)
            if reply[2] & (TC >> 8) and q.edns and q.udp_size > MAX_UDP:
                try:
                    reply = await self.tcp(raw, question, deadline - time.monotonic(), reusable, exact)
                except UpstreamError as exc:
                    log.debug("%s: TCP retry of a truncated reply failed (%s); passing the truncated one on", self.label, exc)
        if reply[12:name_end] != q.raw[12:name_end]:
            # Checked equal but for case (dns-0x20, or an upstream that folds case): the client's spelling
            # goes back, as it sent it. Same length, so every compression pointer still holds.
            reply = reply[:12] + q.raw[12:name_end] + reply[name_end:]
        return reply

    async def udp(self, raw: bytes, question: bytes, timeout: float, exact: bool = False) -> bytes:
        """Send `raw` (ID replaced) from a fresh socket; the accepted reply, ID as we sent it."""
        try:
            query = UdpQuery(self, raw, question, exact)
        except OSError as exc:  # EMFILE, ENOBUFS, no route
            raise UpstreamError(_oserror(exc)) from None
        return await query.reply(timeout)

    async def tcp(self, raw: bytes, question: bytes, timeout: float, reusable: bool = True, exact: bool = False) -> bytes:
        if timeout <= 0:
            raise UpstreamError("no time left for TCP")
        qid = _ids.getrandbits(16)
        message = U16.pack(len(raw)) + U16.pack(qid) + raw[2:]
        try:
            async with asyncio.timeout(timeout):
                return await self._tcp_exchange(message, qid, question, reusable, exact)
        except TimeoutError:
            raise UpstreamError(f"no reply over TCP within {timeout:.3g}s") from None

    async def _tcp_exchange(self, message: bytes, qid: int, question: bytes, reusable: bool, exact: bool) -> bytes:
        while True:
            reader, writer, reused = await self._connection()
            try:
                writer.write(message)
                await writer.drain()
                reply = await self._read_reply(reader, qid, question, exact)
            except (OSError, asyncio.IncompleteReadError, UpstreamError) as exc:
                writer.close()
                if reused:
                    continue  # the upstream closed an idle connection: once more on a fresh one
                raise UpstreamError(_oserror(exc) if isinstance(exc, OSError) else str(exc) or "connection closed") from None
            except BaseException:  # timeout or cancel mid-exchange: the stream is unusable
                writer.close()
                raise
            if reusable:
                self._release(reader, writer)
            else:
                writer.close()
            return reply

    async def _read_reply(self, reader: asyncio.StreamReader, qid: int, question: bytes, exact: bool) -> bytes:
        """The next length-prefixed message on the stream that answers our query (the same checks as UDP)."""
        for _ in range(MAX_STRAY):
            (length,) = U16.unpack(await reader.readexactly(2))
            data = await reader.readexactly(length)
            reason, reply = check_reply(data, qid, question, exact)
            if reason is None:
                return reply
            _mismatch(self.metrics, self.label, reason, self.addr)
        raise UpstreamError("no matching reply on the TCP connection")

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        now = time.monotonic()
        while self.idle:
            reader, writer, since = self.idle.pop()
            if now - since < TCP_IDLE and not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.close()
        try:
            reader, writer = await asyncio.open_connection(*self.addr)
        except OSError as exc:
            raise UpstreamError(_oserror(exc)) from None
        return reader, writer, False

    def _release(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self.idle) < TCP_POOL and not writer.is_closing():
            self.idle.append((reader, writer, time.monotonic()))
        else:
            writer.close()

    # ----------------------------------------------------------------- health

    def failed(self, reason: str) -> None:
        """A query to this upstream failed: count it and make sure a probe is running."""
        self.fails += 1
        if self.fails == MAX_FAILS:
            log.warning("upstream %s marked down after %d failures (last: %s); probing it with `. IN NS`", self.label, MAX_FAILS, reason)
        if self.prober is None or self.prober.done():
            self.prober = asyncio.get_running_loop().create_task(self._probe(), name=f"probe {self.label}")

    def succeeded(self) -> None:
        if self.fails >= MAX_FAILS:
            log.info("upstream %s answers again", self.label)
        self.fails = 0

    async def _probe(self) -> None:
        """Probe every PROBE_INTERVAL until any reply comes back (CoreDNS counts any reply as alive)."""
        while self.fails:
            await asyncio.sleep(PROBE_INTERVAL)
            if not self.fails:
                return  # a real query got through meanwhile
            try:
                await self.udp(PROBE, PROBE_QUESTION, PROBE_TIMEOUT)
            except UpstreamError as exc:
                self.fails += 1
                if self.metrics is not None:
                    self.metrics.healthcheck_failed(self.label)
                log.debug("health check of %s failed: %s", self.label, exc)
                continue
            self.succeeded()

    def close(self) -> None:
        if self.prober is not None:
            self.prober.cancel()
        for _, writer, _ in self.idle:
            writer.close()
        self.idle.clear()


def _oserror(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- forwarder


@dataclass(frozen=True, slots=True)
class ForwardConfig:
    """What the forwarder reads of the configuration, built once from it (as `table.TableConfig` is)."""

    zones: tuple[str, ...]  # the served zones, for the log line only
    timeout: float  # --upstream-timeout
    policy: str  # --policy
    max_concurrent: int  # --max-concurrent
    exact: bool  # --forward-0x20

    @classmethod
    def of(cls, config: Config) -> "ForwardConfig":
        return cls(config.zones, config.upstream_timeout, config.upstream_policy, config.max_concurrent, config.forward_0x20)


class Forwarder:
    """Sends out-of-zone queries upstream; the transport awaits `forward`."""

    def __init__(self, upstreams: list[tuple[str, int]], settings: ForwardConfig, metrics: "Metrics") -> None:
        if not upstreams:
            raise ConfigError("forwarding needs at least one upstream")
        check_upstreams(upstreams)
        self.upstreams = [Upstream(host, port, metrics) for host, port in upstreams]
        self.zones = settings.zones
        self.timeout = settings.timeout
        self.policy = settings.policy
        self.max_concurrent = settings.max_concurrent
        self.exact = settings.exact
        self.metrics = metrics
        self.inflight = 0
        self._next = 0  # round_robin position

    async def start(self, listen: list[tuple[str, int]]) -> None:
        """Refuse to run as our own upstream (checked before any listener opens)."""
        check_loops([u.addr for u in self.upstreams], list(listen))
        log.info("forwarding names outside %s to %s (policy %s, timeout %.3gs, max %d in flight%s)",
                 ", ".join(self.zones), ", ".join(u.label for u in self.upstreams),
                 self.policy, self.timeout, self.max_concurrent, ", dns-0x20" if self.exact else "")

    async def forward(self, q: Query, tcp: bool) -> bytes:
        """The reply for the client: the upstream's (client's ID), or our SERVFAIL/REFUSED."""
        if self.inflight >= self.max_concurrent:
            self.metrics.max_concurrent_rejects += 1
            return forward_overloaded(q)
        self.inflight += 1
        try:
            return await self._resolve(q, tcp)
        finally:
            self.inflight -= 1

    async def _resolve(self, q: Query, tcp: bool) -> bytes:
        deadline = time.monotonic() + self.timeout
        order = self._order()
        reason = "timeout"
        for i, upstream in enumerate(order):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            started = time.perf_counter()
            try:
                # Split what is left among the upstreams still to try: a silent one cannot eat it all.
                reply = await upstream.exchange(q, tcp, left / (len(order) - i), self.exact)
            except UpstreamError as exc:
                reason = f"{upstream.label}: {exc}"
                upstream.failed(str(exc))
                continue
            upstream.succeeded()
            self.metrics.proxy_observe(upstream.label, reply[3] & 0x0F, time.perf_counter() - started)
            return self._for_client(q, reply, tcp)
        errors.log("forward", logging.ERROR, "plugin/errors: 2 %s %s: %s", name_text(q.raw[12 : q.qend - 4]),
                   type_text(q.qtype), reason)
        return forward_failed(q)

    def _order(self) -> list[Upstream]:
        """Upstreams to try, in policy order, healthy ones only unless none is healthy."""
        ups = self.upstreams
        if len(ups) == 1:
            order = ups
        elif self.policy == "random":
            order = random.sample(ups, len(ups))
        elif self.policy == "round_robin":
            start = self._next
            self._next = (start + 1) % len(ups)
            order = ups[start:] + ups[:start]
        else:
            order = ups
        healthy = [u for u in order if not u.down]
        if healthy:
            return healthy
        self.metrics.healthcheck_broken += 1  # every upstream is down: try them all anyway
        return list(order)

    @staticmethod
    def _for_client(q: Query, reply: bytes, tcp: bool) -> bytes:
        """The upstream's reply under the client's ID; cut to a TC header if it exceeds the client's UDP buffer."""
        limit = 65535 if tcp else (q.udp_size if q.edns else MAX_UDP)
        if len(reply) <= limit:
            return q.raw[:2] + reply[2:]
        opt = opt_record(q) if q.edns else b""
        flags = bytes((reply[2] | (TC >> 8), reply[3]))
        return q.raw[:2] + flags + b"\x00\x01\x00\x00\x00\x00" + U16.pack(1 if opt else 0) + q.raw[12 : q.qend] + opt

    def close(self) -> None:
        for upstream in self.upstreams:
            upstream.close()


__all__ = [
    "ForwardConfig", "Forwarder", "ForwardingLoop", "LocalReply", "Upstream", "UpstreamError",
    "check_loops", "is_self", "read_resolv_conf", "upstreams_from_config",
]  # fmt: skip
