"""DNS over TCP (RFC 7766): framing, pipelining, and the connection policy that keeps one client from
locking the others out.

Any pod can reach the Service, and every truncated answer is retried over TCP, so a client holding
thousands of connections must not be able to starve the rest. The policy reads like the admin port's
(admin/server.py), in the same terms:

* **The table never refuses.** At most `max_connections` are open. A new connection over the cap
  *evicts* the one that has gone longest without a complete query (a connection still waiting for
  its first query counts from its accept, one that has asked counts from its last query), and is
  admitted. A client that is asking questions has just asked one, so it is the last to go; an idle
  or trickling connection is always older. RFC 7766 section 6.2.3 lets a server close idle
  connections at any time.
* **A first-query deadline**, separate from the idle timeout: a connection that has not delivered
  one complete query within `first_query_timeout` (CoreDNS waits a few seconds) is closed. Then,
  between queries, `idle_timeout`. Both are totals since the accept or the last query, not per
  byte: trickling one byte at a time does not extend them.
* **Optionally a per-source cap** (`max_per_source`, off by default: a node's SNAT address can carry
  every pod of the node). Over it, the source's own oldest connection is evicted, never another
  client's.
* **A stalled reader is a stalled connection.** Once a reply does not fit the kernel's send buffer
  the connection stops reading queries (so pipelining without reading holds one reply here) and,
  having completed no query since, meets the idle timeout: it is then aborted, its unread replies
  dropped.
* **Fair turns** (TURN_BUDGET below): no loop iteration answers more than a few hundred TCP queries,
  and a connection asking one query at a time goes before one with hundreds pipelined.
* Answers still owed (forwarded queries, a zone transfer) are written before a close for any reason
  but eviction and abort.

Deadlines cost one timer for the whole server, not one per connection: connections sit in dicts kept
in deadline order (`waiting` for a first query, by accept time; `active`, by last query; `closing`,
by when it must be gone), so a sweep every fraction of a second closes what expired from their
fronts, and eviction takes the oldest front. Every close for these reasons is counted by reason
(`closed`, read by the metrics) and logged rate-limited.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from .querylog import errors

log = logging.getLogger(__name__)

U16 = struct.Struct(">H")
BACKLOG = 1024  # listen queue; also how many connections the loop accepts in one go (well under the cap)
# Descriptors kept out of the TCP budget: UDP sockets, upstream sockets, the admin port's connections
# and its backlog, the API watches, logs. The cap is lowered to fit under the open-file limit, because a
# listener that hits EMFILE stops accepting for a second (asyncio's back-off): a lockout of its own.
RESERVED_FDS = 512
# Fair turns. Queries read from any connection wait in one of two queues, served once per loop iteration
# up to TURN_BUDGET queries: `light` (connections whose earlier queries were all answered: new ones, and
# clients asking one at a time) first, LIGHT_TURN queries per visit, then `heavy` (connections with more
# still buffered after a visit), HEAVY_TURN per visit. So a client pipelining thousands of queries on
# thousands of connections is answered at the pace the loop can spare, a new connection's query waits
# only behind other light ones, and UDP, the accepts and the admin port run between the turns: no loop
# iteration answers more than TURN_BUDGET TCP queries (without the budget, such a client stalls the whole
# loop).
# LIGHT_TURN is 2 because resolvers send A and AAAA together.
LIGHT_TURN = 2
HEAVY_TURN = 16
TURN_BUDGET = 256
READ_SIZE = 2 + 65535  # bytes read at a time: one largest query (asyncio's default is 256 KiB)
# Deadline closes are paced: at most SWEEP_BATCH per callback (a few ms), and CLOSE_RATE a second. A client
# that opened thousands of connections at once would otherwise have them all closed at once, reopen them
# all at once, and overflow the listen queue, where a SYN that is dropped is retried only after a second.
# Paced, they leave (and come back) a few thousand a second; a deadline may pass by that much. Evictions
# are not paced: a new connection is never kept waiting for room.
SWEEP_BATCH = 100
CLOSE_RATE = 2000.0
# Why the server closed a connection (the metric's `reason` label).
EVICTED = "evicted"  # the table was full: the connection longest without a complete query made room
PER_SOURCE = "per_source"  # its source reached --max-tcp-connections-per-source: that source's oldest made room
FIRST_QUERY = "first_query_timeout"  # no complete query within --tcp-first-query-timeout of the accept
IDLE = "idle_timeout"  # no complete query within --tcp-idle-timeout of the last one
NOT_READING = "not_reading"  # replies backed up unread until the idle timeout: aborted, unread replies dropped
MAX_QUERIES = "max_queries"  # --tcp-max-queries answered
GARBAGE = "garbage"  # a frame too short to hold a DNS header
CLOSE_REASONS = (EVICTED, PER_SOURCE, FIRST_QUERY, IDLE, NOT_READING, MAX_QUERIES, GARBAGE)


class Answerer(Protocol):
    """What answers the queries read here (transport.DnsServer: the resolver, forwarding, zone transfers)."""

    def answer_tcp(self, conn: "Connection", data: bytes) -> bool: ...


@dataclass(slots=True)
class TcpLimits:
    max_connections: int = 20000  # open at once; over it the connection longest without a query is evicted
    idle_timeout: float = 10.0  # seconds from a complete query to the next (CoreDNS's idle timeout is 10s)
    max_queries: int = 0  # per connection; 0 = unlimited
    first_query_timeout: float = 3.0  # seconds from the accept to the first complete query
    max_per_source: int = 0  # per client address; 0 = no cap

    def fitted(self, asked: bool = True) -> "TcpLimits":
        """These limits with the cap lowered to fit the process's open-file limit (raised first to its
        hard limit, as Go programs such as CoreDNS do at start), logged when lowered: a warning when
        the cap is one the operator `asked` for, information when it is the default, which the flag's
        documentation says is lowered to fit."""
        budget = open_files_budget()
        if self.max_connections <= budget:
            return self
        (log.warning if asked else log.info)("--max-tcp-connections %d does not fit the open-file limit (%d, of which %d are kept for "
                    "other sockets): using %d; raise the limit (ulimit -n) to allow more",
                    self.max_connections, budget + RESERVED_FDS, RESERVED_FDS, budget)
        return TcpLimits(budget, self.idle_timeout, self.max_queries, self.first_query_timeout, self.max_per_source)


def open_files_budget() -> int:
    """Descriptors TCP connections may use: the soft open-file limit (raised to the hard one where
    allowed) less RESERVED_FDS, at least 64."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return 1 << 30
    return max(64, soft - RESERVED_FDS)


class Connection(asyncio.Protocol):
    """One client connection: length-prefixed queries in, each reply out as it is ready (RFC 7766
    6.2.1.1: forwarded answers may be overtaken by later local ones)."""

    __slots__ = ("pool", "where", "transport", "peer", "host", "buf", "since", "queries", "owed", "paused",
                 "queued", "held", "drained", "done")

    def __init__(self, pool: "Connections", where: Any) -> None:
        self.pool = pool
        self.where = where  # the transport's Listener (the metrics' server, proto and family labels)
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.host: str = ""
        self.buf = bytearray()
        self.since = 0.0  # monotonic time of the accept, then of the last complete query
        self.queries = 0
        self.owed = 0  # forwarded queries not answered yet
        self.paused = False  # the write buffer is over its high-water mark: no queries are read
        self.queued = False  # waiting in a turn queue (and not reading meanwhile, so its buffer stays bounded)
        self.held = False  # a zone transfer is being written: no other query is read until it ends
        self.drained: asyncio.Future | None = None  # a transfer waiting for the client to read (Stream.drain)
        self.done = False  # no more queries are read (limit, garbage, end of stream, deadline, eviction)

    # ----------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Admitted at once, in the loop's accept (not in a task a loop iteration later, by when a burst of
        accepts could have passed the cap)."""
        self.transport = transport  # type: ignore[assignment]
        # Stop reading queries as soon as a reply does not fit the kernel's send buffer: a client that
        # pipelines without reading then holds one reply in this process, not 64 KiB (asyncio's default).
        transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]
        # Read at most one largest query at a time (asyncio reads up to 256 KiB): with reading paused while
        # queries wait for their turn, a connection then buffers at most two frames' worth (128 KiB).
        transport.max_size = READ_SIZE  # type: ignore[attr-defined]
        self.peer = transport.get_extra_info("peername")
        self.host = self.peer[0] if self.peer else ""
        self.since = time.monotonic()
        self.pool.admit(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.done = True
        self.pool.lost(self)
        if self.drained is not None and not self.drained.done():
            self.drained.set_exception(ConnectionResetError("the connection was closed"))

    def data_received(self, data: bytes) -> None:
        if not self.done:
            self.buf += data
            if not self.queued and not self.paused and self._complete():
                self.pool.queue_turn(self, light=True)

    def eof_received(self) -> bool:
        """The client is done sending (a half-close is allowed): answer what is owed, then close."""
        if self.owed:
            if not self.done:
                self.pool.finishing(self)
            return True  # our side stays open for the replies; the last one owed closes it
        self.done = True
        return False

    def pause_writing(self) -> None:
        self.paused = True
        if not self.done and self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        if not self.done and not self.queued and not self.held:
            self._after_turn()

    # ----------------------------------------------------------------- queries

    def _complete(self) -> bool:
        """Whether the buffer holds a whole query."""
        buf = self.buf
        return len(buf) >= 2 and len(buf) >= 2 + U16.unpack_from(buf)[0]

    def take_turn(self, limit: int) -> int:
        """Answer up to `limit` buffered queries (none while replies are backed up); how many were answered."""
        self.queued = False
        buf = self.buf
        at = 0
        pool = self.pool
        max_queries = pool.limits.max_queries
        served = 0
        while served < limit and not self.paused and not self.held and not self.done and len(buf) - at >= 2:
            (length,) = U16.unpack_from(buf, at)
            end = at + 2 + length
            if len(buf) < end:
                break
            data = bytes(buf[at + 2:end])
            at = end
            served += 1
            self.since = time.monotonic()
            pool.progressed(self)
            self.queries += 1
            if not pool.server.answer_tcp(self, data):
                self.finish(GARBAGE)
            elif max_queries and self.queries >= max_queries:
                self.finish(MAX_QUERIES)
        if at:
            del buf[:at]
        if not self.done and not self.paused and not self.held:
            self._after_turn()
        return served

    def _after_turn(self) -> None:
        """More whole queries buffered: queue for another (heavy) turn; else read on."""
        if self._complete():
            self.pool.queue_turn(self, light=False)
        elif self.transport is not None:
            self.transport.resume_reading()

    def write(self, reply: bytes) -> None:
        """One reply, framed; dropped once the connection is closing."""
        self.send(U16.pack(len(reply)) + reply)

    def send(self, framed: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(framed)

    def hold(self) -> None:
        """Read no queries until `release` (a zone transfer's messages go out one response at a time)."""
        self.held = True
        if self.transport is not None:
            self.transport.pause_reading()
        self.pool.hold(self)

    def release(self) -> None:
        self.held = False
        if not self.done:
            self.pool.release(self)
            if not self.paused and not self.queued:
                self._after_turn()

    def stream(self) -> "Stream":
        return Stream(self)

    def settled(self) -> None:
        """An owed answer (forwarded, or a transfer) was written or given up on: close after the last one
        owed once finishing."""
        self.owed -= 1
        if self.done and not self.owed and self.transport is not None:
            self.transport.close()

    # ----------------------------------------------------------------- closing

    def finish(self, reason: str) -> None:
        """Read no more queries; close once the forwarded answers owed are written (the close flushes
        the replies already queued)."""
        if self.done:
            return
        self.pool.count(reason, self)
        self.pool.finishing(self)
        if self.transport is not None:
            self.transport.pause_reading()
            if not self.owed:
                self.transport.close()

    def abort(self, reason: str) -> None:
        """Close now, dropping replies not yet sent (counted unless it was already closing for a reason)."""
        if not self.done:
            self.pool.count(reason, self)
        self.done = True
        self.pool.lost(self)
        if self.transport is not None:
            self.transport.abort()


class Stream:
    """A connection as transfer.py writes to it: asyncio.StreamWriter's `write` (framed messages) and
    `drain`, which waits while the client's reads lag (transfer.py bounds each wait by the idle timeout)."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def write(self, framed: bytes) -> None:
        self.conn.send(framed)

    async def drain(self) -> None:
        conn = self.conn
        if conn.transport is None or conn.transport.is_closing():
            raise ConnectionResetError("the connection was closed")
        if conn.paused:
            conn.drained = asyncio.get_running_loop().create_future()
            try:
                await conn.drained
            finally:
                conn.drained = None


class Connections:
    """The open connections of one server's TCP listeners, in deadline order, and their policy."""

    def __init__(self, server: Answerer, limits: TcpLimits) -> None:
        self.server = server
        self.limits = limits
        # Dict order is deadline order. `waiting`: by accept time (no complete query yet); `active`: by
        # the last complete query (moved to the end on each); `closing`: reads no more queries, flushing
        # or owed forwarded answers -> the time by which it must be gone (one idle timeout on).
        self.waiting: dict[Connection, None] = {}
        self.active: dict[Connection, None] = {}
        self.closing: dict[Connection, float] = {}
        # Writing a zone transfer: out of the deadline order (transfer.py times each message out itself),
        # never evicted (transfer.py writes at most --max-transfers at once), back in `active` when it ends.
        self.transferring: dict[Connection, None] = {}
        self.by_source: dict[str, dict[Connection, None]] = {}  # reading connections per address, with a cap
        self.light: deque[Connection] = deque()  # connections with queries waiting for a turn (see TURN_BUDGET)
        self.heavy: deque[Connection] = deque()
        self._turns: asyncio.Handle | None = None
        self.closed: dict[str, int] = dict.fromkeys(CLOSE_REASONS, 0)
        self._sweeper: asyncio.TimerHandle | None = None

    def factory(self, where: Any) -> Callable[[], Connection]:
        return lambda: Connection(self, where)

    def __len__(self) -> int:
        """Connections open (every one holds a descriptor, so every one counts against the cap)."""
        return len(self.waiting) + len(self.active) + len(self.closing) + len(self.transferring)

    def admit(self, conn: Connection) -> None:
        """Make room if the table (or the source) is full, then take the new connection."""
        limits = self.limits
        if limits.max_per_source:
            mine = self.by_source.get(conn.host)
            if mine is not None and len(mine) >= limits.max_per_source:
                next(iter(mine)).abort(PER_SOURCE)
            self.by_source.setdefault(conn.host, {})[conn] = None
        while len(self) >= limits.max_connections:
            victim = self._oldest()
            if victim is None:
                break  # only transfers are open (transfer.py bounds how many): admitted over the cap
            victim.abort(EVICTED)
        self.waiting[conn] = None
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(self._period(), self._sweep)

    def _oldest(self) -> Connection | None:
        """Who makes room: one already closing, else the one longest without a complete query."""
        if self.closing:
            return next(iter(self.closing))
        first = next(iter(self.waiting), None)
        idlest = next(iter(self.active), None)
        if first is None or (idlest is not None and idlest.since < first.since):
            return idlest
        return first

    def queue_turn(self, conn: Connection, light: bool) -> None:
        """`conn` has whole queries buffered: it stops reading and waits for a turn."""
        conn.queued = True
        if conn.transport is not None:
            conn.transport.pause_reading()
        (self.light if light else self.heavy).append(conn)
        if self._turns is None:
            self._turns = asyncio.get_running_loop().call_soon(self._take_turns)

    def _take_turns(self) -> None:
        """One round: the light queue, then the heavy one, TURN_BUDGET queries at most; again next
        iteration while any wait."""
        self._turns = None
        budget = TURN_BUDGET
        for queue, turn in ((self.light, LIGHT_TURN), (self.heavy, HEAVY_TURN)):
            for _ in range(len(queue)):
                if budget <= 0:
                    break
                budget -= max(1, queue.popleft().take_turn(turn))
        if (self.light or self.heavy) and self._turns is None:  # (a turn taken may have queued the next round)
            self._turns = asyncio.get_running_loop().call_soon(self._take_turns)

    def hold(self, conn: Connection) -> None:
        self._unlist(conn)
        self.transferring[conn] = None

    def release(self, conn: Connection) -> None:
        """The transfer ended: the connection is active again, as if it had just asked."""
        del self.transferring[conn]
        conn.since = time.monotonic()
        self.active[conn] = None
        if self.limits.max_per_source:
            self.by_source.setdefault(conn.host, {})[conn] = None

    def progressed(self, conn: Connection) -> None:
        """`conn` completed a query: to the end of the deadline order."""
        if conn in self.waiting:
            del self.waiting[conn]
        else:
            del self.active[conn]
        self.active[conn] = None

    def finishing(self, conn: Connection) -> None:
        """`conn` reads no more queries: out of the reading order, into `closing` with its deadline."""
        conn.done = True
        self._unlist(conn)
        self.closing[conn] = time.monotonic() + self.limits.idle_timeout

    def lost(self, conn: Connection) -> None:
        """`conn` is closed (or being aborted): forget it."""
        self._unlist(conn)
        self.closing.pop(conn, None)

    def _unlist(self, conn: Connection) -> None:
        if conn in self.waiting:
            del self.waiting[conn]
        elif conn in self.active:
            del self.active[conn]
        else:
            self.transferring.pop(conn, None)
        if self.by_source:
            mine = self.by_source.get(conn.host)
            if mine is not None:
                mine.pop(conn, None)
                if not mine:
                    del self.by_source[conn.host]

    def count(self, reason: str, conn: Connection) -> None:
        self.closed[reason] += 1
        errors.log(f"tcp {reason}", logging.INFO, "DNS over TCP: closed a connection from %s (%s; %d open)",
                   conn.host, reason.replace("_", " "), len(self))

    # ----------------------------------------------------------------- deadlines

    def _period(self) -> float:
        """How often the deadlines are checked: an eighth of the shorter one, within [50 ms, 500 ms]."""
        limits = self.limits
        return min(0.5, max(0.05, min(limits.first_query_timeout, limits.idle_timeout) / 8))

    def _sweep(self) -> None:
        """Close what has passed its deadline, from the fronts of the deadline order, SWEEP_BATCH at most
        (the rest follow at CLOSE_RATE)."""
        self._sweeper = None
        now = time.monotonic()
        limits = self.limits
        first = now - min(limits.first_query_timeout, limits.idle_timeout)
        idle = now - limits.idle_timeout
        budget = SWEEP_BATCH
        while self.waiting and budget:
            conn = next(iter(self.waiting))
            if conn.since > first:
                break
            conn.finish(FIRST_QUERY)
            budget -= 1
        while self.active and budget:
            conn = next(iter(self.active))
            if conn.since > idle:
                break
            if conn.transport is not None and conn.transport.get_write_buffer_size():
                conn.abort(NOT_READING)  # replies backed up since its last query: the client stopped reading
            else:
                conn.finish(IDLE)
            budget -= 1
        while self.closing and budget:
            conn, deadline = next(iter(self.closing.items()))
            if deadline > now:
                break
            conn.abort(NOT_READING)  # still flushing (or owed) an idle timeout after it began closing: cut
            budget -= 1
        if len(self):
            delay = SWEEP_BATCH / CLOSE_RATE if not budget else self._period()
            self._sweeper = asyncio.get_running_loop().call_later(delay, self._sweep)

    def close_all(self) -> None:
        """Shutdown: close every connection (queued replies are flushed while the process lives)."""
        for handle in (self._sweeper, self._turns):
            if handle is not None:
                handle.cancel()
        self._sweeper = self._turns = None
        self.light.clear()
        self.heavy.clear()
        for conn in [*self.waiting, *self.active, *self.closing, *self.transferring]:
            conn.done = True
            if conn.transport is not None:
                conn.transport.close()
        self.waiting.clear()
        self.active.clear()
        self.closing.clear()
        self.transferring.clear()
        self.by_source.clear()
