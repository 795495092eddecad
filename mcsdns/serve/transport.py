"""UDP and TCP listeners: bytes in, bytes out, no DNS decisions.

UDP reads straight from a non-blocking socket in a reader callback, draining
every datagram that is waiting before yielding to the loop: no transport or
protocol objects per packet, and on the command line's loop (selector.py) no
asyncio handle either: the selector calls the reader itself. TCP (tcp.py) follows RFC 7766: several queries
may be pipelined on one connection and are answered as they complete
(forwarded ones may overtake), under a connection policy that one client
holding thousands of connections cannot use to lock the others out.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol, Sequence

from ..zone.vocab import FORMERR  # noqa: F401 (re-exported: part of this module's names)
from ..zone.wire import Query
from . import mmsg, selector
from .querylog import errors
from .resolve import Forward, LocalReply, Resolver, forward_failed, not_forwarding
from .tcp import BACKLOG, NOT_READING, Connection, Connections, TcpLimits

log = logging.getLogger(__name__)

UDP_BATCH = 64  # datagrams drained per wakeup before letting other work run
UDP_ROUNDS = 4  # batched path: full batches of UDP_BATCH served per wakeup before letting other work run
_ROUNDS = range(UDP_ROUNDS)
_clock = time.perf_counter
# Socket receive buffer asked for (the kernel caps it at net.core.rmem_max). The default (~200 KB,
# ~150 small datagrams) overflows whenever the process is descheduled for a few milliseconds at
# tens of thousands of queries per second; 1 MB (~1000 datagrams) rides out a ~25 ms stall at full
# rate. Not more: under sustained overload a deeper queue only answers queries later, after the
# client gave up. Bounded either way: a flood costs at most this much queued memory.
UDP_RCVBUF = 1 << 20
PORT_PICKS = 20  # port 0: kernel-picked UDP ports tried before a TCP bind's EADDRINUSE is final
# MCSDNS_UDP=plain: one recvfrom/sendto per datagram even where recvmmsg/sendmmsg exist (to compare both paths).
UDP_PLAIN_ENV = "MCSDNS_UDP"


@dataclass(eq=False, slots=True)
class Listener:
    """One bound socket as metrics and logs name it; hashes by identity, so observers can key on it."""

    server: str  # CoreDNS's `server` label: dns://HOST:PORT (dns://:PORT for a wildcard address)
    proto: str  # "udp" or "tcp"
    family: int  # 1 IPv4, 2 IPv6 (CoreDNS's `family` label)


class Observer(Protocol):
    """Called once per packet: `q` is the resolver's parsed query (None if unreadable), `reply` None if dropped.

    `client` is the source address: a (host, port) tuple, or on the batched UDP path an `mmsg.Peer`
    whose `address()` gives that tuple, valid during the call only (querylog.client_text reads both).
    `started` is `time.perf_counter()` when the packet was read (0.0: not timed); on the batched UDP
    path, when its batch was read.
    """

    def __call__(self, where: Listener, client: Any, query: bytes, q: Query | None, reply: bytes | None,
                 started: float, forwarded: bool) -> None: ...


class BatchObserver(Protocol):
    """Called once per batch of UDP datagrams, after their replies went out, in place of an `Observer`
    call per datagram: for each i < n, datagram i's source (`clients[i]`, an `mmsg.Peer`), bytes, parsed
    query and reply as an Observer gets them; `datas[i]` None for a forwarded datagram (observed when
    its reply comes). `started` is when the batch was read."""

    def __call__(self, where: Listener, clients: Sequence[Any], datas: Sequence[bytes | None],
                 queries: Sequence[Query | None], replies: Sequence[bytes | None], n: int, started: float) -> None: ...


class _Seen:
    """One batch's datagrams, parsed queries and replies, kept for the batch observer (one per listener)."""

    __slots__ = ("datas", "queries", "replies")

    def __init__(self, size: int) -> None:
        self.datas: list[bytes | None] = [None] * size
        self.queries: list[Query | None] = [None] * size
        self.replies: list[bytes | None] = [None] * size


ForwardFn = Callable[[Query, bool], Awaitable[bytes | None]]


class DnsServer:
    """All listeners of one process, sharing one resolver."""

    def __init__(
        self,
        resolver: Resolver,
        forward: ForwardFn | None = None,
        observe: Observer | None = None,
        tcp_limits: TcpLimits | None = None,
        reuse_port: bool = False,
        batch_udp: bool | None = None,
        observe_batch: BatchObserver | None = None,
    ) -> None:
        """`batch_udp`: receive and send UDP in batches (recvmmsg/sendmmsg); None: where libc has
        them, unless the environment says MCSDNS_UDP=plain. `observe_batch`: what observes a batch of
        UDP datagrams at once (the same counts as `observe` per datagram, with one call per batch);
        without it `observe` is called per datagram there too."""
        if batch_udp is None:
            batch_udp = os.environ.get(UDP_PLAIN_ENV, "").lower() != "plain"
        self.batch_udp = batch_udp and mmsg.available()
        self.resolver = resolver
        self.forward = forward
        self.observe = observe
        self.observe_batch = observe_batch if observe is not None else None
        self.tcp = Connections(self, tcp_limits or TcpLimits())
        self.reuse_port = reuse_port
        self._udp: list[socket.socket] = []
        self._batches: dict[socket.socket, mmsg.Batch] = {}
        self._tcp: list[asyncio.AbstractServer] = []
        self._inflight: set[asyncio.Task] = set()
        self.addresses: list[tuple[str, int]] = []
        self.on_panic: Callable[[], None] | None = None  # metrics: coredns_panics_total
        self.transfers: Any = None  # --transfer-to: transfer.Transfers, which answers AXFR/IXFR and signed queries

    # ----------------------------------------------------------------- lifecycle

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind UDP and TCP on the same port (port 0: the kernel picks, both share it).

        The kernel picks the UDP port; the same TCP port may be taken (an outgoing connection's
        ephemeral port, on a busy host), so with port 0 a pick whose TCP bind fails is dropped and
        the kernel asked again, a bounded number of times."""
        picks = PORT_PICKS if port == 0 else 1
        for pick in range(1, picks + 1):
            try:
                return await self._listen(host, port)
            except OSError as exc:
                if pick == picks or exc.errno != errno.EADDRINUSE:
                    # The address belongs in the message: the kernel's alone ("Address already in use")
                    # does not say which of several --listen addresses failed.
                    reason = os.strerror(exc.errno) if exc.errno else str(exc)
                    raise OSError(exc.errno, f"--listen {_fmt(host, port)} (DNS over UDP and TCP): {reason}") from None
        raise AssertionError("unreachable: the last pick returns or raises")

    async def _listen(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        udp = socket.socket(family, socket.SOCK_DGRAM)
        try:
            try:
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RCVBUF)
            except OSError:
                pass  # keep the default
            if self.reuse_port:
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            udp.bind((host, port))
            udp.setblocking(False)
            actual = udp.getsockname()[1]
            fam = 2 if family == socket.AF_INET6 else 1
            label = server_label(host, actual)
            server = await loop.create_server(
                self.tcp.factory(Listener(label, "tcp", fam)), host, actual, family=family,
                reuse_port=self.reuse_port or None, backlog=BACKLOG,
            )
        except OSError:
            udp.close()
            raise
        where = Listener(label, "udp", fam)
        if self.batch_udp:
            batch = self._batches[udp] = mmsg.Batch(UDP_BATCH)
            selector.add_reader(loop, udp.fileno(), self._batched_reader(udp, where, batch, _Seen(UDP_BATCH)))
        else:
            selector.add_reader(loop, udp.fileno(), self._on_udp, udp, where)
        self._udp.append(udp)
        self._tcp.append(server)
        self.addresses.append((host, actual))
        log.info("listening for DNS on %s (udp%s, tcp)", _fmt(host, actual),
                 " batched: recvmmsg/sendmmsg" if udp in self._batches else "")
        return host, actual

    def stop_accepting(self) -> None:
        loop = asyncio.get_event_loop()
        for udp in self._udp:
            selector.remove_reader(loop, udp.fileno())
        for server in self._tcp:
            server.close()

    async def drain(self, timeout: float) -> None:
        """Let in-flight work finish within `timeout`, then close what is left."""
        deadline = time.monotonic() + timeout
        while self._inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in list(self._inflight):
            task.cancel()
        self.tcp.close_all()
        for udp in self._udp:
            udp.close()
        self._udp.clear()
        for batch in self._batches.values():
            batch.close()
        self._batches.clear()

    # ----------------------------------------------------------------- UDP

    def _on_udp(self, sock: socket.socket, where: Listener) -> None:
        resolve = self.resolver.resolve
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
                reply, q = resolve(data, False)
            except Exception:  # a bug must not stop the listener
                reply, q = self._panic(data, "UDP"), None
            if type(reply) is bytes:
                try:
                    sock.sendto(reply, addr)
                except OSError as exc:
                    log.debug("udp send to %s failed: %s", addr, exc)
                if observe:
                    observe(where, addr, data, q, reply, started, False)
            elif reply is None:
                if observe:
                    observe(where, addr, data, q, None, started, False)
            else:
                self._spawn(self._forward_udp(sock, addr, where, data, reply, started))

    def _batched_reader(self, sock: socket.socket, where: Listener, batch: mmsg.Batch, seen: _Seen) -> Callable[[], None]:
        """The reader of a batched UDP socket: `_on_udp` with one recvmmsg for up to UDP_BATCH datagrams
        and one sendmmsg for their replies, and again while the batches come full, up to UDP_ROUNDS of
        them per wakeup (at saturation every batch is full, and each trip through the event loop costs
        as much as a few queries).

        The same decisions per datagram, in the same order; replies go out together after the batch is
        resolved (also when an observer raises), each to the address its query came from, then the
        batch is observed. One function with what it uses bound here: at light load every datagram is
        its own wakeup, and each call and attribute lookup between epoll_wait and the resolver costs
        about what a cached answer's own work does. The observers are read per batch (they may change).
        """
        fd = sock.fileno()
        recv, data_of, put, send, address = batch.recv, batch.data, batch.put, batch.send, batch.address
        peers, size = batch.peers, batch.size
        datas, queries, replies = seen.datas, seen.queries, seen.replies
        resolve = self.resolver.resolve
        server = self

        def wake() -> None:
            for _ in _ROUNDS:
                try:
                    n = recv(fd)
                except OSError as exc:
                    n = server._receive_failed(sock, where, batch, exc)
                    if n is None:
                        return
                observe = server.observe
                observe_batch = server.observe_batch
                # One clock read for the batch: its datagrams arrived together, and each one's duration
                # runs from there (the time it waited behind the batch's earlier datagrams counts).
                started = _clock() if observe else 0.0
                j = 0
                refused = None
                try:
                    for i in range(n):
                        data = data_of(i)
                        try:
                            reply, q = resolve(data, False)
                        except Exception:  # a bug must not stop the listener
                            reply, q = server._panic(data, "UDP"), None
                        if type(reply) is bytes:
                            if put(j, i, reply):
                                j += 1
                            else:
                                server._send_alone(sock, reply, address(i))
                        elif reply is not None:
                            server._spawn(server._forward_udp(sock, address(i), where, data, reply, started))
                            data = q = reply = None  # observed when its reply comes
                        if observe_batch is not None:
                            datas[i] = data
                            queries[i] = q
                            replies[i] = reply  # type: ignore[assignment]
                        elif observe and data is not None:
                            observe(where, peers[i], data, q, reply, started, False)  # type: ignore[arg-type]
                finally:
                    if j:
                        refused = send(fd, j)
                        for failed in refused:
                            server._send_failed(sock, where, batch, *failed)
                if observe_batch is not None:
                    observe_batch(where, peers, datas, queries, replies, n, started)
                # (only a refused reply can have sent the socket back to the plain path)
                if n < size or (refused and server._batches.get(sock) is not batch):
                    return

        return wake

    def _receive_failed(self, sock: socket.socket, where: Listener, batch: mmsg.Batch, exc: OSError) -> int | None:
        """The batched reader's recvmmsg raised `exc`: the datagrams a retry received (0: none waiting),
        or None when this wakeup is over (interrupted, or the socket went back to the plain path and that
        served it). Receive errors are skipped as the plain loop skips them, up to UDP_BATCH in all."""
        fd = sock.fileno()
        for _ in range(UDP_BATCH - 1):
            if isinstance(exc, mmsg.Unsupported):
                self._unbatch(sock, where)
                self._on_udp(sock, where)
                return None
            if isinstance(exc, InterruptedError):
                return None
            log.debug("udp receive error: %s", exc)
            try:
                return batch.recv(fd)
            except OSError as again:
                exc = again
        return None

    def _send_alone(self, sock: socket.socket, reply: bytes, addr: tuple) -> None:
        """One reply with sendto, its error logged as the plain loop logs it."""
        try:
            sock.sendto(reply, addr)
        except OSError as exc:
            log.debug("udp send to %s failed: %s", addr, exc)

    def _send_failed(self, sock: socket.socket, where: Listener, batch: mmsg.Batch, j: int, exc: OSError) -> None:
        """Reply j of a batch did not go out: logged as the plain path logs it, or sent alone if the
        kernel has no sendmmsg (and the socket goes back to the plain path)."""
        addr = batch.sent_address(j)
        if isinstance(exc, mmsg.Unsupported):
            if self._batches.get(sock) is batch:
                self._unbatch(sock, where)
            return self._send_alone(sock, batch.reply(j), addr)
        log.debug("udp send to %s failed: %s", addr, exc)

    def _unbatch(self, sock: socket.socket, where: Listener) -> None:
        """The kernel lacks recvmmsg/sendmmsg (ENOSYS): this socket reads with the plain loop from now on."""
        log.info("recvmmsg/sendmmsg unavailable: UDP on %s uses one system call per datagram", where.server)
        self._batches.pop(sock, None)  # its buffers go with the last reference (a send may still use them)
        loop = asyncio.get_event_loop()
        selector.add_reader(loop, sock.fileno(), self._on_udp, sock, where)  # (in place of the batched reader)

    def _panic(self, data: bytes, proto: str) -> bytes | None:
        """The resolver raised: count it like CoreDNS counts a recovered panic, log (rate-limited), SERVFAIL."""
        if self.on_panic is not None:
            self.on_panic()
        errors.log("panic", logging.ERROR, "resolver failed on a %s query", proto, exc_info=True)
        return self.resolver.panicked(data)

    async def _forward_udp(self, sock, addr, where: Listener, data: bytes, fwd: Forward, started: float) -> None:
        reply = await self._forwarded(fwd, False)
        if reply is not None:
            self._send_alone(sock, reply, addr)
        if self.observe:
            self.observe(where, addr, data, fwd.query, reply, started, True)

    async def _forwarded(self, fwd: Forward, tcp: bool) -> bytes | None:
        if self.forward is None:
            return not_forwarding(fwd.query)
        try:
            return await self.forward(fwd.query, tcp)
        except Exception:
            if self.on_panic is not None:
                self.on_panic()
            errors.log("panic", logging.ERROR, "forwarding failed", exc_info=True)
            return forward_failed(fwd.query)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_event_loop().create_task(coro)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    # ----------------------------------------------------------------- TCP

    def answer_tcp(self, conn: Connection, data: bytes) -> bool:
        """Answer one query read from a TCP connection (a forwarded one later); False for a frame too
        short to hold a header, after which the connection reads no more."""
        if self.transfers is not None and self.transfers.handles(data):  # zone transfers: transfer.py
            conn.owed += 1
            conn.hold()  # one transfer at a time per connection, its messages not interleaved with others
            self._spawn(self._transfer_tcp(conn, data))
            return True
        started = time.perf_counter() if self.observe else 0.0
        try:
            reply, q = self.resolver.resolve(data, True)
        except Exception:
            reply, q = self._panic(data, "TCP"), None
        if isinstance(reply, Forward):
            conn.owed += 1
            self._spawn(self._forward_tcp(conn, data, reply, started))
            return True
        if reply is not None:
            conn.write(reply)
        if self.observe:
            self.observe(conn.where, conn.peer, data, q, reply, started, False)
        return reply is not None or len(data) >= 12

    async def _forward_tcp(self, conn: Connection, data: bytes, fwd: Forward, started: float) -> None:
        try:
            reply = await self._forwarded(fwd, True)
            if reply is not None:
                conn.write(reply)
            if self.observe:
                self.observe(conn.where, conn.peer, data, fwd.query, reply, started, True)
        finally:
            conn.settled()

    async def _transfer_tcp(self, conn: Connection, data: bytes) -> None:
        """A transfer's messages (or a signed reply), written under the connection's flow control; the
        connection reads its next query after the last one."""
        try:
            await self.transfers.serve_tcp(data, conn.peer, conn.stream(), self.tcp.limits.idle_timeout,
                                           lambda signed: self.resolver.resolve(signed, True)[0])
        except (ConnectionError, asyncio.TimeoutError):
            conn.abort(NOT_READING)  # nobody reads: drop what is buffered and free the socket now
        finally:
            conn.settled()
            conn.release()


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def server_label(host: str, port: int) -> str:
    """CoreDNS's `server` label: `dns://:53` for a wildcard address, else `dns://HOST:PORT`."""
    if host in ("", "0.0.0.0", "::"):
        return f"dns://:{port}"
    return f"dns://{_fmt(host, port)}"


__all__ = ["DnsServer", "Listener", "LocalReply", "TcpLimits", "server_label", "FORMERR"]
