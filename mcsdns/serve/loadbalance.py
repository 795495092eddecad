"""`--loadbalance round_robin`: A/AAAA answer sets rotated one record per reply (CoreDNS's `loadbalance`).

`RoundRobinResolver` is a subclass of `resolve.Resolver` that `App` picks for the flag, so the
default resolver has not one extra branch per query. It hooks the resolver where a reply is
written (`reply`) and where one enters the packet cache (`_store`); the rest is the resolver's.
"""

from __future__ import annotations

from ..zone.table import Table
from ..zone.wire import Body, Query, address_run
from .resolve import Forward, Resolver

RUN_CACHE_ENTRIES = 8192  # multi-record bodies whose address run is known


class _Run:
    """A body's A/AAAA run (`wire.address_run`), its turn, and its records twice over (`ring`), so
    the run rotated by k records, or the first n records of that (what a truncated reply keeps), is
    one slice: ring[k * size : k * size + n * size]."""

    __slots__ = ("start", "end", "size", "count", "turn", "ring", "view")

    def __init__(self, data: bytes, start: int, end: int, size: int) -> None:
        self.start, self.end, self.size = start, end, size
        self.count = (end - start) // size
        self.turn = 0
        self.ring = data[start:end] * 2
        self.view = _View()


class _SplitRun:
    """--local-cluster with --loadbalance: a run whose first `split` records are the local cluster's.

    Each group rotates on its own turn, so a remote address never moves before a local one. Its
    replies skip the packet cache (two rings to splice): the price of combining the two flags.
    """

    __slots__ = ("local", "remote", "start", "end", "view")

    def __init__(self, data: bytes, start: int, end: int, size: int, split: int) -> None:
        middle = start + split * size
        self.local, self.remote = _Run(data, start, middle, size), _Run(data, middle, end, size)
        self.start, self.end = start, end
        self.view = _View()

    def rotated(self, data: bytes) -> bytes:
        parts = [data[: self.start]]
        for run in (self.local, self.remote):
            run.turn = turn = (run.turn + 1) % run.count
            k = turn * run.size
            parts.append(run.ring[k : k + run.end - run.start])
        parts.append(data[self.end :])
        return b"".join(parts)


_UNCACHED = object()  # RoundRobinResolver._rotated: this reply must not enter the packet cache


class _View:
    """What `assemble` reads of a Body, with the bytes rotated: one per run, refilled per reply (cheaper
    than building a Body per reply; the event loop is the only caller and `assemble` keeps no reference)."""

    __slots__ = ("source", "flags", "an", "ns", "ar", "body", "ends", "zone_slots", "soa", "zone_at")

    def __init__(self) -> None:
        self.source: Body | None = None

    def of(self, body: Body, data: bytes) -> "_View":
        if self.source is not body:
            self.source = body
            self.flags, self.an, self.ns, self.ar = body.flags, body.an, body.ns, body.ar
            self.ends, self.zone_slots, self.soa, self.zone_at = body.ends, body.zone_slots, body.soa, body.zone_at
        self.body = data
        return self


class _Rotation:
    """A cached reply of `RoundRobinResolver` whose A/AAAA run rotates: `prefix + rotation` (the
    packet cache's `data[:2] + hit`) is the reply with the run one record further on."""

    __slots__ = ("before", "run", "width", "after")

    def __init__(self, before: bytes, run: _Run, width: int, after: bytes) -> None:
        self.before, self.run, self.width, self.after = before, run, width, after

    def __radd__(self, prefix: bytes) -> bytes:
        run = self.run
        run.turn = turn = (run.turn + 1) % run.count
        k = turn * run.size
        return prefix + self.before + run.ring[k : k + self.width] + self.after


class RoundRobinResolver(Resolver):
    """`--loadbalance round_robin`: each reply's A/AAAA answer set starts one record further on.

    Like CoreDNS's `loadbalance` plugin (which shuffles A, AAAA and MX in every section), but only
    the answer section's A/AAAA records move, and only as a rotation of the whole set: the records,
    header, rcode, other records and the additional section stay exactly as without the flag. The
    rotation is a whole number of fixed-size records (`wire.address_run`), so the body's record
    ends stay valid and truncation still cuts between records: a truncated reply keeps as many
    addresses as without the flag, starting at the rotated one, so which of them survive rotates too.

    Each answer has its own turn counter (per name and type: true round robin, and A and AAAA
    asked in pairs by stub resolvers do not fall into step). The packet cache keeps a rotated reply
    as the bytes before and after its addresses plus the run, so a hit costs one more slice than
    without the flag, truncated replies included; a body of two or more records costs one more
    dict lookup (by its bytes, whose hash Python caches) and, when rotated, a few slices.
    """

    def __init__(self, table: Table, forwarding: bool = False) -> None:
        super().__init__(table, forwarding)
        # A body's bytes -> (its answer count, its run): a compiled body's bytes object hashes once (cached), and
        # a body computed per query (a name nobody compiled) finds the turn of the last one with the same records.
        # The local group's size (--local-cluster) is part of the entry too: two services may compile the same
        # bytes with their local/remote boundary in different places.
        self._runs: dict[bytes, tuple[int, int, _Run | _SplitRun | None]] = {}
        self._rotated: _Run | None = None  # the run the last reply() rotated, for the packet cache

    # Every reply not from the packet cache comes from one of these two (`_handle` calls them, and
    # `resolve` calls `_lanes` directly): each starts with no rotation noted.
    def _lanes(self, data: bytes, end: int, key: bytes, tcp: bool) -> tuple[bytes | Forward | None, Query | None]:
        self._rotated = None
        return Resolver._lanes(self, data, end, key, tcp)

    def _parsed(self, data: bytes, tcp: bool) -> tuple[bytes | Forward | None, Query | None]:
        self._rotated = None
        return Resolver._parsed(self, data, tcp)

    def _store(self, folded: bool, key: bytes, size: int, reply: bytes, entry: object, q: Query) -> None:
        """`Resolver.resolve`'s hook: a reply whose addresses rotated is kept under its exact bytes as a
        `_Rotation`, which `resolve`'s hit (`data[:2] + hit`) turns one record further on; a reply
        that did not rotate is kept as without the flag (letter-case folding included)."""
        run = self._rotated
        if run is None:
            Resolver._store(self, folded, key, size, reply, entry, q)
            return
        if run is _UNCACHED or (reply[2] & 0x02 and run.start):  # truncated: only a run that leads the answer (all of ours)
            return
        at = q.qend + run.start  # the body follows the question
        width = run.end - run.start if not reply[2] & 0x02 else min((reply[6] << 8) | reply[7], run.count) * run.size
        Resolver._store(self, False, q.raw[2:], size, reply, _Rotation(reply[2:at], run, width, reply[at + width :]), q)

    def flush(self) -> None:
        super().flush()
        self._runs.clear()

    def reply(self, q: Query, body: Body, limit: int) -> bytes:
        if body.an > 1:
            entry = self._runs.get(body.body)
            if entry is None or entry[0] != body.an or entry[1] != body.split:
                if len(self._runs) >= RUN_CACHE_ENTRIES:
                    self._runs.clear()  # bounded: per-query bodies of names nobody compiled can be many
                span = address_run(body)
                made: _Run | _SplitRun | None = None
                if span is not None:
                    made = _SplitRun(body.body, *span, body.split) if body.split and not span[0] else _Run(body.body, *span)
                entry = self._runs[body.body] = (body.an, body.split, made)
            run = entry[2]
            if type(run) is _SplitRun:
                self._rotated = _UNCACHED  # type: ignore[assignment]
                return Resolver.reply(self, q, run.view.of(body, run.rotated(body.body)), limit)  # type: ignore[arg-type]
            if run is not None:
                self._rotated = run
                run.turn = turn = (run.turn + 1) % run.count
                if turn:
                    data, start, end = body.body, run.start, run.end
                    k = turn * run.size
                    rotated = data[:start] + run.ring[k : k + end - start] + data[end:]
                    return Resolver.reply(self, q, run.view.of(body, rotated), limit)  # type: ignore[arg-type]
        return Resolver.reply(self, q, body, limit)
