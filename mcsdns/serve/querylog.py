"""The query log (CoreDNS `log` plugin format) and rate-limited error logging.

The query log is opt-in (--log-queries) and goes to stdout, one line per
answered query, exactly as CoreDNS's default format prints it, so the same
log pipelines parse both:

    [INFO] 127.0.0.1:45678 - 12345 "A IN web.demo.svc.clusterset.local. udp 58 false 1232" NOERROR qr,aa,rd 74 0.000123s

Errors (malformed packets, upstream failures, internal faults) are always
logged, but through `RateLimitedLog`: a flood of bad packets must not be able
to fill a disk or starve the event loop with log formatting.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable

from ..zone.vocab import CLASS_TEXT, RCODE_TEXT, type_text
from ..zone.wire import Query

# Header flag bits in miekg/dns's flagsToString order.
FLAG_TEXT = ((0x8000, "qr"), (0x0400, "aa"), (0x0200, "tc"), (0x0100, "rd"), (0x0080, "ra"), (0x0040, "z"),
             (0x0020, "ad"), (0x0010, "cd"))  # fmt: skip

WINDOW = 10.0  # seconds per rate-limit window
PER_WINDOW = 20  # lines per kind per window; the rest are counted and summarized


class RateLimitedLog:
    """At most `per_window` lines per kind every `window` seconds, then one summary line.

    The summary ("suppressed K messages") is written when the kind logs again
    after its window, or by `flush()` (called at shutdown), so a flood that
    stops is still accounted for. No timers: a quiet kind costs nothing.
    """

    def __init__(
        self,
        logger: logging.Logger,
        per_window: int = PER_WINDOW,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.per_window = per_window
        self.window = window
        self.clock = clock
        self._state: dict[str, list] = {}  # kind -> [window start, lines written, suppressed]

    def log(self, kind: str, level: int, msg: str, *args: Any, exc_info: Any = None) -> bool:
        """Log unless `kind` is over its budget; True when the line was written."""
        now = self.clock()
        state = self._state.get(kind)
        if state is None:
            state = self._state[kind] = [now, 0, 0]
        elif now - state[0] >= self.window:
            self._summarize(kind, state)
            state[0], state[1], state[2] = now, 0, 0
        if state[1] >= self.per_window:
            state[2] += 1
            return False
        state[1] += 1
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def flush(self) -> None:
        """Write the pending summaries (shutdown): nothing suppressed goes unmentioned."""
        for kind, state in self._state.items():
            self._summarize(kind, state)
            state[2] = 0

    def suppressed(self, kind: str) -> int:
        state = self._state.get(kind)
        return state[2] if state else 0

    def _summarize(self, kind: str, state: list) -> None:
        if state[2]:
            self.logger.warning("%s: suppressed %d messages in the last %.0fs (rate limit %d per %.0fs)",
                                kind, state[2], self.clock() - state[0], self.per_window, self.window)


# The process-wide error log; the transport, the forwarder and the query path share its budget per kind.
errors = RateLimitedLog(logging.getLogger("mcsdns.errors"))


def client_text(addr: Any) -> str:
    """`{remote}:{port}` as CoreDNS prints it: IPv6 in brackets.

    `addr` is a recvfrom-style tuple, or the batched UDP path's lazy `mmsg.Peer` (made a tuple here)."""
    if not isinstance(addr, tuple) and hasattr(addr, "address"):
        addr = addr.address()
    if isinstance(addr, tuple) and len(addr) >= 2:
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return "-:0"


def name_text(wire: bytes) -> str:
    """A wire-format name as presentation text with the trailing dot (as spelled in the query)."""
    out = []
    i = 0
    while i < len(wire) and wire[i]:
        label = wire[i + 1 : i + 1 + wire[i]]
        out.append("".join(chr(b) if 0x21 <= b <= 0x7E and b not in b'."\\' else f"\\{b:03d}" for b in label))
        i += wire[i] + 1
    return ".".join(out) + "."


def flags_text(flags: int) -> str:
    return ",".join(text for bit, text in FLAG_TEXT if flags & bit)


def duration_text(seconds: float) -> str:
    """Go's strconv.FormatFloat(d, 'f', -1, 64) + "s": plain decimal, no exponent."""
    text = f"{seconds:.9f}".rstrip("0")
    return (text + "0" if text.endswith(".") else text) + "s"


def format_line(client: Any, proto: str, data: bytes, q: Query | None, reply: bytes, seconds: float) -> str:
    """One CoreDNS `log` line: `{remote}:{port} - {>id} "{type} {class} {name} {proto} {size} {>do} {>bufsize}" ...`."""
    qid = (data[0] << 8) | data[1]
    if q is not None:
        qtype = type_text(q.qtype)
        qclass = CLASS_TEXT.get(q.qclass) or f"CLASS{q.qclass}"
        name = name_text(data[12 : q.qend - 4])  # as received: a cached Query may be another packet's
        do = "true" if q.do else "false"
        bufsize = 65535 if proto == "tcp" else (q.udp_size if q.edns else 512)
    else:
        qtype, qclass, name, do, bufsize = "-", "-", "-", "false", 65535 if proto == "tcp" else 512
    rflags = (reply[2] << 8) | reply[3]
    rcode = rflags & 0xF
    if rcode == 0 and q is not None and q.edns_version:
        rcode = 16  # the resolver's BADVERS: extended rcode in the OPT record
    return (
        f'[INFO] {client_text(client)} - {qid} "{qtype} {qclass} {name} {proto} {len(data)} {do} {bufsize}" '
        f"{RCODE_TEXT.get(rcode, str(rcode))} {flags_text(rflags)} {len(reply)} {duration_text(seconds)}"
    )


class QueryLog:
    """Writes one line per answered query to stdout (CoreDNS writes its log plugin output there)."""

    def __init__(self, stream: Any = None) -> None:
        self.logger = logging.getLogger("mcsdns.queries")
        self.logger.propagate = False  # bare lines, not the process log's "time level name:" prefix
        self.logger.setLevel(logging.INFO)
        for old in list(self.logger.handlers):
            self.logger.removeHandler(old)
        handler = logging.StreamHandler(stream or sys.stdout)  # flushed per line, unlike a piped print()
        handler.setFormatter(logging.Formatter("%(message)s"))
        self.logger.addHandler(handler)

    def observe(self, where: Any, client: Any, data: bytes, q: Query | None, reply: bytes | None, started: float, forwarded: bool) -> None:
        """Observer-compatible: the transport calls it for every packet (dropped ones print nothing)."""
        if reply is None:
            return
        self.logger.info(format_line(client, where.proto, data, q, reply, time.perf_counter() - started if started else 0.0))


def chain(*observers: Callable[..., None]) -> Callable[..., None]:
    """One observer that calls several in order (metrics, then the query log)."""

    def observe(*args: Any) -> None:
        for observer in observers:
            observer(*args)

    return observe
