"""The admin HTTP listener: /health, /ready, /metrics (and the discovery routes), from the event loop.

/health is 200 `OK` while the process runs (also during lameduck), as
CoreDNS's health plugin. /ready is 200 `OK` once every watched resource has
been listed, else 503 with the reason; 503 `Shutting down` after SIGTERM, as
CoreDNS's ready plugin. /metrics is the Prometheus text format of the
injected registry. Other paths (/imports, /explain: discovery.py) are routes
handed in by the app. A minimal HTTP/1.1 server is enough for probes and
scrapes and keeps one shutdown path (no side thread).

Bounded, because probes go through it: a client holding many idle
or half-sent connections must not delay /ready past a kubelet's 1 s probe.
The policy reads like DNS over TCP's (tcp.py), in the same terms:
* **The table does not refuse while it can make room.** At most `max_connections` are open (for a
  moment up to BACKLOG more: the loop accepts that many at once before their handlers run). A new
  connection over the cap *evicts* the oldest one still waiting for its request (a probe sends its
  request at once, so an idle or trickling client is always older), and is admitted. Unlike DNS,
  where a connection is cheap to make again, a response being written is never cut for a newcomer:
  only when every open connection is busy writing one is the new one closed at once.
* **A first-request deadline**: the whole request head must arrive within `read_timeout` (a total
  deadline, not per byte, so trickling one byte at a time does not extend it). One request per
  connection, so there is no idle timeout after it.
* A request head over MAX_REQUEST bytes gets 431 and the connection is closed;
  a request line that is not `METHOD TARGET HTTP/x` gets 400; garbage never
  raises out of the handler.
* A response must be read within WRITE_TIMEOUT, else the connection is cut.
* `aclose()` stops accepting, cuts idle connections, lets responses being
  written finish for at most `drain_timeout`, then cuts the rest.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

MAX_REQUEST = 8192  # request line + headers; a probe or a scrape sends a few hundred bytes
MAX_CONNECTIONS = 128  # open at once; Prometheus, kubelet probes and a few people with curl need a handful
BACKLOG = 128  # listen queue (a small one stalls connects under load), and the most accepted at once beyond the cap
READ_TIMEOUT = 5.0  # seconds for the whole request head
WRITE_TIMEOUT = 10.0  # seconds for a client to take the response
DRAIN_TIMEOUT = 2.0  # at shutdown, seconds for responses being written

TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
REASONS = {
    200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
    431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip

Response = tuple[int, str, bytes]  # status, content type, body
Route = Callable[[dict[str, list[str]]], Response | Awaitable[Response]]  # query parameters -> response


class Admin:
    def __init__(
        self,
        registry: CollectorRegistry,
        readiness: Callable[[], tuple[bool, str]],
        routes: dict[str, Route] | None = None,
        *,
        max_connections: int = MAX_CONNECTIONS,
        read_timeout: float = READ_TIMEOUT,
        drain_timeout: float = DRAIN_TIMEOUT,
    ) -> None:
        self.registry = registry
        self.readiness = readiness  # () -> (ready, reason when not)
        self.routes = dict(routes or {})
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.drain_timeout = drain_timeout
        self.shutting_down = False
        self.server: asyncio.AbstractServer | None = None
        self.address: tuple[str, int] | None = None
        # Open connections in arrival order -> True once their request is complete (writing the response).
        self._open: dict[asyncio.StreamWriter, bool] = {}
        self._tasks: set[asyncio.Task] = set()
        self.evicted = 0  # idle connections cut to admit a new one (logged)

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        # The backlog is also how many connections the loop accepts in one go before any handler runs
        # (and can evict): it bounds how far open descriptors may pass the cap for a moment.
        self.server = await asyncio.start_server(self._connected, host, port, limit=MAX_REQUEST, backlog=BACKLOG)
        self.address = self.server.sockets[0].getsockname()[:2]
        log.info("admin HTTP (/health /ready /metrics %s) on %s:%d", " ".join(sorted(self.routes)), *self.address)
        return self.address

    def close(self) -> None:
        """Stop accepting (connections already open are left to `aclose`)."""
        if self.server is not None:
            self.server.close()

    async def aclose(self) -> None:
        """Stop accepting, cut idle connections, give responses `drain_timeout`, then cut the rest."""
        self.close()
        for writer, busy in list(self._open.items()):
            if not busy:
                writer.transport.abort()
        deadline = time.monotonic() + self.drain_timeout
        while any(self._open.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for writer in list(self._open):
            writer.transport.abort()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=0.5)

    # ----------------------------------------------------------------- routing

    def respond(self, target: str) -> Response | Awaitable[Response]:
        parts = urlsplit(target)
        path = parts.path
        if path == "/health":
            return 200, TEXT, b"OK"
        if path == "/ready":
            if self.shutting_down:
                return 503, TEXT, b"Shutting down"
            ready, reason = self.readiness()
            return (200, TEXT, b"OK") if ready else (503, TEXT, reason.encode())
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        route = self.routes.get(path)
        if route is not None:
            return route(parse_qs(parts.query, keep_blank_values=True))
        return 404, TEXT, b"not found\n"

    # ----------------------------------------------------------------- connections

    def _admit(self, writer: asyncio.StreamWriter) -> bool:
        """Register a new connection, evicting the oldest idle one at the cap (False: refuse it)."""
        if len(self._open) >= self.max_connections:
            idle = next((w for w, busy in self._open.items() if not busy), None)
            if idle is None:
                return False
            self._open.pop(idle)
            idle.transport.abort()
            self.evicted += 1
            if self.evicted in (1, 100) or self.evicted % 10000 == 0:
                log.warning("admin HTTP: %d connections open (the cap); cut the oldest idle one (%d so far)",
                            self.max_connections, self.evicted)
        self._open[writer] = False
        return True

    def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Admit (evicting at the cap) or refuse a connection at once, in the loop's `connection_made`.

        Not in the request task: a task's first step runs an iteration later, after the next accept
        burst, so cuts would lag the accepts and a flood of connections could pass the descriptor
        limit (asyncio then logs EMFILE and stops accepting for a second, probes included).
        """
        if not self._admit(writer):
            writer.transport.abort()
            return
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await self._read_head(reader)
            if writer in self._open:
                self._open[writer] = True  # busy from here: never evicted while its response is made
            response, head_only = await self._route(head)
            await self._write(writer, response, head_only)
            if response[0] in (400, 431):
                await self._linger(reader, writer)
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # slow, vanished or half-sent: nothing to answer
        except Exception:
            log.exception("admin request failed")
        finally:
            self._open.pop(writer, None)
            writer.close()

    async def _read_head(self, reader: asyncio.StreamReader) -> bytes | None:
        """The request head (None: over MAX_REQUEST); raises TimeoutError/IncompleteReadError."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.read_timeout)
        except asyncio.LimitOverrunError:
            return None
        return head if len(head) <= MAX_REQUEST else None

    async def _route(self, head: bytes | None) -> tuple[Response, bool]:
        """(response, HEAD) for a request head."""
        if head is None:
            return (431, TEXT, b"request head too large\n"), False
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
            return (400, TEXT, b"bad request line\n"), False
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return (405, TEXT, b"method not allowed\n"), False
        try:
            response = self.respond(target)
            if inspect.isawaitable(response):  # a route that lets the loop answer DNS while it works
                response = await response
            return response, method == "HEAD"
        except Exception:
            log.exception("admin request %s failed", target[:200])
            return (500, TEXT, b"internal error (see the server log)\n"), method == "HEAD"

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """After an error response to a request not read whole: end our side and discard what the
        client still sends (briefly, bounded), so closing does not reset the connection before the
        client has read the response."""
        if writer.can_write_eof():
            writer.write_eof()
        try:
            async with asyncio.timeout(1.0):
                for _ in range(16):
                    if not await reader.read(MAX_REQUEST):
                        break
        except (asyncio.TimeoutError, asyncio.LimitOverrunError, ValueError):
            pass

    async def _write(self, writer: asyncio.StreamWriter, response: Response, head_only: bool) -> None:
        status, ctype, body = response
        writer.write(
            f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + (b"" if head_only else body)
        )
        try:
            await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)
        except asyncio.TimeoutError:
            writer.transport.abort()
