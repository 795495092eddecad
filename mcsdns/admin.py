"""The admin HTTP listener: /health, /ready and /metrics, served from the event loop.

/health is 200 `OK` while the process runs (also during lameduck), as
CoreDNS's health plugin. /ready is 200 `OK` once every watched resource has
been listed, else 503 with the reason; 503 `Shutting down` after SIGTERM, as
CoreDNS's ready plugin. /metrics is the Prometheus text format of the
injected registry. A minimal HTTP/1.1 server is enough for probes and
scrapes and keeps one shutdown path (no side thread).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

MAX_REQUEST = 8192


class Admin:
    def __init__(self, registry: CollectorRegistry, readiness: Callable[[], tuple[bool, str]]) -> None:
        self.registry = registry
        self.readiness = readiness  # () -> (ready, reason when not)
        self.shutting_down = False
        self.server: asyncio.AbstractServer | None = None
        self.address: tuple[str, int] | None = None

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, host, port)
        self.address = self.server.sockets[0].getsockname()[:2]
        log.info("admin HTTP (/health /ready /metrics) on %s:%d", *self.address)
        return self.address

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def respond(self, path: str) -> tuple[int, str, bytes]:
        path = path.split("?", 1)[0]
        if path == "/health":
            return 200, "text/plain; charset=utf-8", b"OK"
        if path == "/ready":
            if self.shutting_down:
                return 503, "text/plain; charset=utf-8", b"Shutting down"
            ready, reason = self.readiness()
            return (200, "text/plain; charset=utf-8", b"OK") if ready else (503, "text/plain; charset=utf-8", reason.encode())
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        return 404, "text/plain; charset=utf-8", b"not found\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if len(head) > MAX_REQUEST:
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain", b"method not allowed\n"
            else:
                status, ctype, body = self.respond(parts[1])
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n".encode()
                + (body if parts and parts[0] != "HEAD" else b"")
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            pass
        except Exception:
            log.exception("admin request failed")
        finally:
            writer.close()
