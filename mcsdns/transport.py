"""UDP and TCP listeners: bytes in, bytes out, no DNS decisions.

UDP reads straight from a non-blocking socket in a reader callback, draining
every datagram that is waiting before yielding to the loop: no transport or
protocol objects per packet. TCP follows RFC 7766: several queries may be
pipelined on one connection and are answered as they complete (forwarded
ones may overtake), with an idle timeout and a cap on open connections.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

from .resolve import Forward, Resolver
from .wire import FORMERR, Query, error_reply

log = logging.getLogger(__name__)

U16 = struct.Struct(">H")
UDP_BATCH = 64  # datagrams drained per wakeup before letting other work run


class Observer(Protocol):
    def __call__(self, proto: str, family: int, query: bytes, reply: bytes | None, started: float) -> None: ...


ForwardFn = Callable[[Query, bool], Awaitable[bytes | None]]


@dataclass(slots=True)
class TcpLimits:
    max_connections: int = 1000  # beyond this, new connections are closed at once
    idle_timeout: float = 10.0  # seconds without a complete query (CoreDNS's read timeout is 10s)
    max_queries: int = 0  # per connection; 0 = unlimited


def parse_hostport(text: str, default_port: int = 53) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT`, `HOST` or `[V6]` -> (host, port); ValueError with a reason."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: missing ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':PORT' after ']'")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        host, port_text = text, ""  # a bare IPv6 address
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{text!r}: empty host")
    if port_text == "":
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: port must be 0..65535")
    return host, int(port_text)


class DnsServer:
    """All listeners of one process, sharing one resolver."""

    def __init__(
        self,
        resolver: Resolver,
        forward: ForwardFn | None = None,
        observe: Observer | None = None,
        tcp_limits: TcpLimits | None = None,
        reuse_port: bool = False,
    ) -> None:
        self.resolver = resolver
        self.forward = forward
        self.observe = observe
        self.tcp_limits = tcp_limits or TcpLimits()
        self.reuse_port = reuse_port
        self._udp: list[socket.socket] = []
        self._tcp: list[asyncio.AbstractServer] = []
        self._tcp_conns: set[asyncio.StreamWriter] = set()
        self._inflight: set[asyncio.Task] = set()
        self.addresses: list[tuple[str, int]] = []

    # ----------------------------------------------------------------- lifecycle

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind UDP and TCP on the same port (port 0: the kernel picks, both share it)."""
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        udp = socket.socket(family, socket.SOCK_DGRAM)
        try:
            if self.reuse_port:
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            udp.bind((host, port))
            udp.setblocking(False)
            actual = udp.getsockname()[1]
            server = await asyncio.start_server(
                self._serve_tcp, host, actual, family=family, reuse_port=self.reuse_port or None, backlog=1024
            )
        except OSError:
            udp.close()
            raise
        loop.add_reader(udp.fileno(), self._on_udp, udp, 2 if family == socket.AF_INET6 else 1)
        self._udp.append(udp)
        self._tcp.append(server)
        self.addresses.append((host, actual))
        log.info("listening for DNS on %s (udp, tcp)", _fmt(host, actual))
        return host, actual

    def stop_accepting(self) -> None:
        loop = asyncio.get_event_loop()
        for udp in self._udp:
            loop.remove_reader(udp.fileno())
        for server in self._tcp:
            server.close()

    async def drain(self, timeout: float) -> None:
        """Let in-flight work finish within `timeout`, then close what is left."""
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in list(self._inflight):
            task.cancel()
        for writer in list(self._tcp_conns):
            writer.close()
        for udp in self._udp:
            udp.close()
        self._udp.clear()

    # ----------------------------------------------------------------- UDP

    def _on_udp(self, sock: socket.socket, family: int) -> None:
        handle = self.resolver.handle
        observe = self.observe
        for _ in range(UDP_BATCH):
            try:
                data, addr = sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ICMP errors surfacing on the socket
                log.debug("udp receive error: %s", exc)
                continue
            started = time.perf_counter() if observe else 0.0
            try:
                reply = handle(data, False)
            except Exception:  # a bug must not stop the listener
                log.exception("resolver failed on a UDP query")
                reply = error_reply(data, 2) if len(data) >= 12 else None
            if type(reply) is bytes:
                try:
                    sock.sendto(reply, addr)
                except OSError as exc:
                    log.debug("udp send to %s failed: %s", addr, exc)
                if observe:
                    observe("udp", family, data, reply, started)
            elif reply is None:
                if observe:
                    observe("udp", family, data, None, started)
            else:
                self._spawn(self._forward_udp(sock, addr, family, data, reply, started))

    async def _forward_udp(self, sock, addr, family: int, data: bytes, fwd: Forward, started: float) -> None:
        reply = await self._forwarded(fwd, False)
        if reply is not None:
            try:
                sock.sendto(reply, addr)
            except OSError as exc:
                log.debug("udp send to %s failed: %s", addr, exc)
        if self.observe:
            self.observe("udp", family, data, reply, started)

    async def _forwarded(self, fwd: Forward, tcp: bool) -> bytes | None:
        if self.forward is None:
            return error_reply(fwd.query.raw, 5, fwd.query)
        try:
            return await self.forward(fwd.query, tcp)
        except Exception:
            log.exception("forwarding failed")
            return error_reply(fwd.query.raw, 2, fwd.query)

    def _spawn(self, coro) -> None:
        task = asyncio.get_event_loop().create_task(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    # ----------------------------------------------------------------- TCP

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limits = self.tcp_limits
        if len(self._tcp_conns) >= limits.max_connections:
            writer.close()
            return
        self._tcp_conns.add(writer)
        sock = writer.get_extra_info("socket")
        family = 2 if sock is not None and sock.family == socket.AF_INET6 else 1
        served = 0
        try:
            while True:
                try:
                    prefix = await asyncio.wait_for(reader.readexactly(2), limits.idle_timeout)
                    (length,) = U16.unpack(prefix)
                    data = await asyncio.wait_for(reader.readexactly(length), limits.idle_timeout)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
                    return
                started = time.perf_counter() if self.observe else 0.0
                try:
                    reply = self.resolver.handle(data, True)
                except Exception:
                    log.exception("resolver failed on a TCP query")
                    reply = error_reply(data, 2) if len(data) >= 12 else None
                if isinstance(reply, Forward):
                    self._spawn(self._forward_tcp(writer, family, data, reply, started))
                else:
                    self._write_tcp(writer, family, data, reply, started)
                    if reply is None and len(data) < 12:
                        return  # garbage without a header: drop the connection
                served += 1
                if limits.max_queries and served >= limits.max_queries:
                    return
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._tcp_conns.discard(writer)
            writer.close()

    def _write_tcp(self, writer: asyncio.StreamWriter, family: int, data: bytes, reply: bytes | None, started: float) -> None:
        if reply is not None and not writer.is_closing():
            writer.write(U16.pack(len(reply)) + reply)
        if self.observe:
            self.observe("tcp", family, data, reply, started)

    async def _forward_tcp(self, writer, family: int, data: bytes, fwd: Forward, started: float) -> None:
        reply = await self._forwarded(fwd, True)
        self._write_tcp(writer, family, data, reply, started)


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


__all__ = ["DnsServer", "TcpLimits", "parse_hostport", "FORMERR"]
