"""Every metric, on an injected registry, under CoreDNS's names (contract section 5).

The query path only bumps plain integers (`observe`); a custom collector
turns them into Prometheus families at scrape time. That keeps counting off
the hot path's budget, and lets tests build a fresh registry and read values
back with `registry.get_sample_value`.

Label values follow CoreDNS so its Grafana dashboards work unchanged:
`server` is `dns://HOST:PORT` of the listener, `zone` the served zone that
matched (`clusterset.local.`) or `.` for everything else, `view` empty, and
the `plugin` of responses_total says who wrote the reply: `kubernetes` for
zone answers, `forward` for upstream replies, "" for errors the server wrote
itself (FORMERR, NOTIMP, REFUSED, SERVFAIL on a failed forward).
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
import platform
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Iterable, Mapping, Protocol, Sequence, Sized

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from . import __version__
from .forward.replycheck import REASONS as MISMATCH_REASONS
from .serve.querylog import client_text, errors
from .zone.vocab import BADVERS, RCODE_TEXT, TYPE_TEXT
from .zone.wire import ONCE, Query

log = logging.getLogger(__name__)

# CoreDNS exports no `*_created` series, so neither does mcsdns: off for every registry of the process.
disable_created_metrics()

# CoreDNS plugin/metrics/vars: duration buckets 0.00025 * 2^k (16), size buckets as listed.
DURATION_BUCKETS = tuple(0.00025 * 2**k for k in range(16))
SIZE_BUCKETS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3)
PROGRAMMING_BUCKETS = tuple(0.001 * 2**k for k in range(20))  # plugin/kubernetes/metrics.go
PROXY_BUCKETS = DURATION_BUCKETS  # plugin/pkg/proxy/metrics.go: ExponentialBuckets(.00025, 2, 16)

# The qtype label values CoreDNS keeps (plugin/metrics/vars/report.go); everything else is "other".
_LABELLED_TYPES = (1, 2, 5, 6, 12, 15, 16, 28, 33, 43, 46, 47, 48, 50, 64, 65, 251, 252, 255)
QTYPE_NAMES = {t: TYPE_TEXT[t] for t in _LABELLED_TYPES}
RCODE_NAMES = RCODE_TEXT
AA = 0x04  # in the third header byte

ROOT = "."  # the zone label of forwarded and out-of-zone queries
VIEW = ""
PROXY_NAME = "forward"
PLUGINS = ("kubernetes", "forward", "")  # who wrote a reply; observe() uses the index
_bisect = bisect.bisect_left  # buckets are `le`: the first bound >= the value
_now = time.perf_counter




class _Hist:
    """A histogram kept as plain bucket counts; rendered at scrape time."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # buckets are `le`
        self.sum += value

    def add(self, other: "_Hist") -> None:
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.sum += other.sum

    def buckets(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, count in zip(self.bounds, self.counts):
            acc += count
            out.append((_fmt(bound), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out


def _fmt(bound: float) -> str:
    """Bucket bounds as Go's client prints them (`0.00025`, `100`, `16000`)."""
    value = float(bound)
    return repr(value) if not value.is_integer() else str(int(value))



# A series' counters live in one flat list, so the query path does `counts[i] += 1` on a local
# instead of attribute hops and method calls (those cost as much as the counting itself).
N_SIZE = len(SIZE_BUCKETS) + 1
TYPE_LABELS = tuple(QTYPE_NAMES.values()) + ("other",)
TYPES = 0  # requests by CoreDNS `type` label, in TYPE_LABELS order
REQ_SIZE = TYPES + len(TYPE_LABELS)  # request size buckets (+Inf last)
RESP_SIZE = REQ_SIZE + N_SIZE  # response size buckets
DURATION = RESP_SIZE + N_SIZE  # duration buckets
RESPONSES = DURATION + len(DURATION_BUCKETS) + 1  # [rcode * 3 + plugin index]
DO = RESPONSES + (BADVERS + 1) * len(PLUGINS)  # requests with the DO bit (BADVERS: the extended rcode the resolver writes into OPT)
SCRATCH = DO + 1  # read by nothing: where a precomputed tally counts "no DO bit" (see `Metrics.observe`)
N_COUNTS = SCRATCH + 1
SUM_REQ, SUM_RESP, SUM_DURATION = 0, 1, 2
# A tally (`Query.tally`, see `Metrics.observe`): [the stamp of its listener and Metrics, request size, reply
# size, the series' counts, its sums, five slots of `counts`, hits not yet added to them]. A hit bumps only
# the last.
T_SLOTS = slice(5, 10)
T_HITS = 10
FOLD_AT = 4096  # tallies with hits waiting before `fold` runs without a scrape (bounds what they keep alive)


def _size_slots(offset: int) -> bytes:
    """`offset` + bucket index of every message size 0..65535: a byte lookup instead of a bisect."""
    out, low = bytearray(), 0
    for index, bound in enumerate(SIZE_BUCKETS):
        out += bytes([offset + index]) * (int(bound) - low + 1)
        low = int(bound) + 1
    return bytes(out) + bytes([offset + len(SIZE_BUCKETS)]) * (65536 - len(out))


REQ_SLOT, RESP_SLOT = _size_slots(REQ_SIZE), _size_slots(RESP_SIZE)


def _type_slots() -> bytes:
    """qtype -> slot of its `type` label; every qtype CoreDNS does not name counts as "other"."""
    out = bytearray([TYPES + len(TYPE_LABELS) - 1]) * 65536
    for slot, qtype in enumerate(QTYPE_NAMES):
        out[qtype] = TYPES + slot
    return bytes(out)


TYPE_SLOT = _type_slots()


class _Series:
    """Everything counted for one (listener, zone): CoreDNS's per-server, per-zone series.

    Every counter is a slot of one list (label names are attached at scrape
    time), so the query path indexes a local list and hashes nothing.
    """

    __slots__ = ("counts", "sums")

    def __init__(self) -> None:
        self.counts = [0] * N_COUNTS
        self.sums = [0.0, 0.0, 0.0]  # request bytes, response bytes, seconds

    def add(self, other: "_Series") -> None:
        counts = self.counts
        for i, n in enumerate(other.counts):
            counts[i] += n
        for i, v in enumerate(other.sums):
            self.sums[i] += v

    def _hist(self, bounds: tuple[float, ...], at: int, sum_index: int) -> _Hist:
        hist = _Hist(bounds)
        hist.counts = self.counts[at : at + len(bounds) + 1]
        hist.sum = self.sums[sum_index]
        return hist

    @property
    def req_size(self) -> _Hist:
        return self._hist(SIZE_BUCKETS, REQ_SIZE, SUM_REQ)

    @property
    def resp_size(self) -> _Hist:
        return self._hist(SIZE_BUCKETS, RESP_SIZE, SUM_RESP)

    @property
    def duration(self) -> _Hist:
        return self._hist(DURATION_BUCKETS, DURATION, SUM_DURATION)

    @property
    def do(self) -> int:
        return self.counts[DO]

    def request_counts(self) -> dict[str, int]:
        """By CoreDNS's `type` label: the named types, everything else `other`."""
        return {label: n for label, n in zip(TYPE_LABELS, self.counts[TYPES:REQ_SIZE]) if n}

    def response_counts(self) -> list[tuple[str, str, int]]:
        """(rcode label, plugin label, count) for every non-zero cell."""
        out = []
        for i, n in enumerate(self.counts[RESPONSES:DO]):
            if n:
                code, plugin = divmod(i, len(PLUGINS))
                out.append((RCODE_NAMES.get(code) or str(code), PLUGINS[plugin], n))
        return out


class JournalView(Protocol):
    """What the metrics read of the IXFR journal (journal.Journal)."""

    entries: Sized
    bytes: int


class TransfersView(Protocol):
    """What the metrics read of the zone transfers (xfr/transfer.Transfers)."""

    active: int
    max_transfers: int


class TableView(Protocol):
    """What the metrics read of the record table: its zones, its zone matching and its sizes."""

    zones: tuple[bytes, ...]  # wire form
    reverse_zones: AbstractSet[bytes]
    answers: Mapping[bytes, object]
    owned: Mapping[object, object]
    synced: bool
    generation: int
    serial: int

    def zone_of(self, lname: bytes) -> bytes | None: ...


class UpstreamView(Protocol):
    label: str
    down: bool


class ForwarderView(Protocol):
    upstreams: Sequence[UpstreamView]
    inflight: int


class TcpView(Protocol):
    """The TCP connection table (tcp.Connections): open connections, and the server's closes by reason."""

    closed: Mapping[str, int]

    def __len__(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Views:
    """The running server as the metrics see it: read-only, read at scrape time (and the table's
    zone matching per packet). The App builds it; the metrics never see the App."""

    table: TableView
    object_counts: Callable[[], Mapping[str, int]]  # objects known, by kind (Store.counts)
    servers: Callable[[], Iterable[str]]  # the listeners' `server` labels (dns://host:port)
    forwarder: ForwarderView | None = None
    tcp: TcpView | None = None
    # ServiceImports by (condition type, status, reason) (Store.condition_counts; decision 14)
    import_conditions: Callable[[], Mapping[tuple[str, str, str], int]] | None = None


class Metrics(Collector):
    """Counts from the query path, the forwarder and the sources, published on scrape."""

    def __init__(self, registry: CollectorRegistry, views: Views | None = None) -> None:
        self.views: Views | None = None
        self._zones: list[tuple[bytes, str]] = []  # (wire name, label), set by `attach`
        self._zone_labels: dict[bytes, str] = {}
        self._zone_of: Callable[[bytes], bytes | None] | None = None
        self._single_zone: str | None = None
        # listener -> zone label -> series; listeners hash by identity, so no key tuples per query.
        self._series: dict[Any, dict[str, _Series]] = {}
        self._tallies: list[list] = []  # tallies with hits not yet in their series (see `fold`)
        self._stamps: dict[Any, tuple] = {}  # listener -> the object its tallies start with (see `observe`)
        self.dropped = 0
        self.rejects: dict[str, int] = defaultdict(int)  # objects rejected, by reason
        # Forwarding (plugin/forward and plugin/pkg/proxy).
        self.proxy_duration: dict[tuple[str, str], _Hist] = {}  # (to, rcode) -> durations
        self.healthcheck_failures: dict[str, int] = defaultdict(int)  # to -> failed probes
        self.healthcheck_broken = 0
        self.max_concurrent_rejects = 0
        self.mismatched: dict[str, int] = dict.fromkeys(MISMATCH_REASONS, 0)  # upstream replies dropped, by reason
        self.panics = Counter("coredns_panics_total", "A metrics that counts the number of panics.", registry=registry)
        self.transfers = Counter(
            "mcsdns_transfers_total",
            "Zone transfer requests (--transfer-to) by type (axfr, ixfr, query: a TSIG-signed query) and result: axfr, "
            "fallback_axfr (an IXFR answered with the whole zone), current (SOA alone), udp_soa, refused (address), "
            "unsigned, badkey, badsig, badtime, leaving (shutting down), class, notauth, not_synced, udp (AXFR over UDP), formerr, busy.",
            ["type", "result"], registry=registry)
        self.notifies = Counter(
            "mcsdns_notify_total",
            "NOTIFY messages (--notify) by result: sent (each try), acknowledged, error (answered with an error "
            "rcode), failed (no answer after every retry), unresolved (a lookup of a target's host name failed; "
            "retried as NOTIFY is).", ["result"], registry=registry)
        self.ixfr_fallbacks = Counter(
            "mcsdns_ixfr_fallbacks_total",
            "IXFR requests answered with the whole zone, by reason: future (the client's serial is newer than "
            "ours), purged (one of ours since the sync, older than the IXFR journal keeps), reverse_zone (a "
            "--reverse-cidr zone: no journal is kept of it), unknown (any other: before this process started, "
            "another replica's, or no journal).", ["reason"], registry=registry)
        self.journal: JournalView | None = None  # the IXFR journal (--transfer-to), read at scrape time
        self.transfers_now: TransfersView | None = None  # the transfers under way (--transfer-to), read at scrape time
        self.programming = Histogram(
            "coredns_kubernetes_dns_programming_duration_seconds",
            "Histogram of the time (in seconds) it took to program a dns instance.",
            ["service_kind"],
            buckets=PROGRAMMING_BUCKETS,
            registry=registry,
        )
        self.api_programming = Histogram(
            "mcsdns_programming_duration_seconds",
            "Seconds from a change's time as the API reports it (the EndpointSlice annotation "
            "endpoints.kubernetes.io/last-change-trigger-time, else the newest managedFields time: one-second "
            "resolution) to the moment its new answers are served.",
            ["kind"],
            buckets=PROGRAMMING_BUCKETS,
            registry=registry,
        )
        build = Gauge(
            "coredns_build_info",
            "A metric with a constant '1' value labeled by version, revision, and goversion from which CoreDNS was built.",
            ["version", "revision", "goversion"],
            registry=registry,
        )
        build.labels(f"mcsdns-{__version__}", "", f"python{platform.python_version()}").set(1)
        # Watch health, fed by the Kubernetes source.
        self.watch_restarts: dict[str, int] = defaultdict(int)
        self.relists: dict[str, int] = defaultdict(int)
        self.last_sync: float | None = None
        self.watch_up: dict[str, bool] = {}
        self.extra_collectors: list = []
        registry.register(self)
        try:  # process_* (memory, CPU, fds): what CoreDNS dashboards chart next to the DNS panels
            ProcessCollector(registry=registry)
        except ValueError:
            pass  # already registered on this registry
        if views is not None:
            self.attach(views)

    def attach(self, views: Views) -> None:
        """Read the server through `views` from now on; the table's zones label the DNS series."""
        self.views = views
        table = views.table
        self._zones = [(z, _zone_label(z)) for z in table.zones + tuple(sorted(table.reverse_zones))]
        self._zone_labels = dict(self._zones)
        self._zone_of = table.zone_of
        self._single_zone = self._zones[0][1] if len(self._zones) == 1 else None

    # ----------------------------------------------------------------- hot path

    def observe(self, where: Any, client: Any, data: bytes, q: Query | None, reply: bytes | None,
                started: float, forwarded: bool) -> None:
        """Count one packet and its reply (None: dropped).

        `where` is the transport's Listener (server label, proto, family); `q`
        the resolver's parsed query, so nothing is parsed twice. Integer and
        list bumps and bisects only, inlined (a method call costs as much as
        the counting): no objects per query.

        A query object the resolver returns again (`q.tally`, wire.REUSED: with every cache hit, or
        with every missing name of one shape) always comes with the same reply (rcode, size) and the
        same type, EDNS and zone: its slots are computed at its first count here and kept on it
        (a tally), so a cache hit adds one to the tally's hits, which `fold` adds to the five slots
        before anything reads them. A tally starts with the stamp this Metrics made for the listener
        (`_stamps`), so one identity test tells a tally computed here for this listener; the sizes are
        not compared per packet, as a reused object's request and reply keep their sizes by
        construction (exact hits differ only in the ID, folded ones in letter case, a missing name's
        shape fixes both: tests/test_metrics.py checks it over mixed traffic).
        """
        if q is not None and q.tally[0] is self._stamps.get(where):
            tally = q.tally
            hits = tally[T_HITS]
            tally[T_HITS] = hits + 1
            if not hits:
                self._waiting(tally)
            if started:
                elapsed = _now() - started
                tally[3][DURATION + _bisect(DURATION_BUCKETS, elapsed)] += 1
                tally[4][2] += elapsed
            return
        self._count(where, client, data, q, reply, _now() - started if started else None, forwarded)

    def observe_batch(self, where: Any, clients: Sequence[Any], datas: Sequence[bytes | None],
                      queries: Sequence[Query | None], replies: Sequence[bytes | None], n: int, started: float) -> None:
        """Count packets 0..n-1 of one batch read together (UDP), as `observe` counts each one, after their
        replies went out: every one's duration is the batch's, from `started` (when it was read) to now. A
        packet whose data is None is not counted here (it was forwarded: counted when its reply comes).
        One call per batch, and per cached answer one bump of its tally's hits."""
        elapsed = _now() - started
        bucket = DURATION + _bisect(DURATION_BUCKETS, elapsed)
        counts: list[int] | None = None  # the series the last run of tallied packets counts its durations in
        sums: list[float] = []
        same = 0
        stamp = self._stamps.get(where)
        for i in range(n):
            q = queries[i]
            if q is not None and (tally := q.tally)[0] is stamp:
                hits = tally[T_HITS]
                tally[T_HITS] = hits + 1
                if not hits:
                    self._waiting(tally)
                if tally[3] is counts:
                    same += 1
                    continue
                if same:
                    counts[bucket] += same  # type: ignore[index]
                    sums[2] += elapsed * same
                counts, sums, same = tally[3], tally[4], 1
            else:
                data = datas[i]
                if data is not None:
                    self._count(where, clients[i], data, q, replies[i], elapsed, False)
        if same:
            counts[bucket] += same  # type: ignore[index]
            sums[2] += elapsed * same

    def _waiting(self, tally: list) -> None:
        """A tally's first hit since the last fold: remembered for `fold` (which runs now if too many wait)."""
        waiting = self._tallies
        waiting.append(tally)
        if len(waiting) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Add every tally's waiting hits to its series' slots and sums (before anything reads them)."""
        waiting = self._tallies
        for tally in waiting:
            hits = tally[T_HITS]
            if hits:
                tally[T_HITS] = 0
                counts = tally[3]
                for slot in tally[T_SLOTS]:
                    counts[slot] += hits
                sums = tally[4]
                sums[0] += tally[1] * hits
                sums[1] += tally[2] * hits
        waiting.clear()

    def _count(self, where: Any, client: Any, data: bytes, q: Query | None, reply: bytes | None,
               elapsed: float | None, forwarded: bool) -> None:
        """`observe`'s full path: one packet counted slot by slot (`elapsed` None: not timed); a reused
        query object gets its tally here."""
        if reply is None and q is None:
            self.dropped += 1
            errors.log("dropped", logging.WARNING, "dropped an unreadable packet from %s (%d bytes)", client_text(client), len(data))
            return
        if forwarded:
            zone = ROOT
            plugin = 1 if type(reply) is bytes else 2  # "forward"; our own errors are a LocalReply (bytes subclass)
        elif reply is not None and reply[2] & AA:
            zone = self._single_zone or self._zone(q)
            plugin = 0  # "kubernetes"
        else:
            zone = self._zone(q)
            plugin = 2  # "": written by the server
        by_zone = self._series.get(where)
        if by_zone is None:
            by_zone = self._series[where] = {}
        series = by_zone.get(zone)
        if series is None:
            series = by_zone[zone] = _Series()
        counts, sums = series.counts, series.sums
        if q is not None:
            counts[TYPE_SLOT[q.qtype]] += 1
            if q.do:
                counts[DO] += 1
        else:
            counts[REQ_SIZE - 1] += 1  # "other"
        size = len(data)
        counts[REQ_SLOT[size] if size < 65536 else RESP_SIZE - 1] += 1  # (DNS messages never exceed 65535)
        sums[0] += size
        if elapsed is not None:
            counts[DURATION + _bisect(DURATION_BUCKETS, elapsed)] += 1
            sums[2] += elapsed
        if reply is None:
            self.dropped += 1
            return
        code = reply[3] & 0x0F
        if not code and q is not None and q.edns_version and not forwarded:
            code = BADVERS  # the resolver's BADVERS: extended rcode in the OPT record
        counts[RESPONSES + code * 3 + plugin] += 1
        rsize = len(reply)
        counts[RESP_SLOT[rsize] if rsize < 65536 else DURATION - 1] += 1
        sums[1] += rsize
        if code == 1 and not forwarded:
            errors.log("malformed", logging.WARNING, "malformed query from %s (%d bytes): FORMERR", client_text(client), len(data))
        elif q is not None and q.tally is not ONCE and not forwarded and size < 65536 and rsize < 65536:
            stamp = self._stamps.get(where)
            if stamp is None:
                stamp = self._stamps[where] = (where, self)
            q.tally = [stamp, size, rsize, counts, sums, TYPE_SLOT[q.qtype], DO if q.do else SCRATCH,  # type: ignore[union-attr]
                       REQ_SLOT[size], RESPONSES + code * 3 + plugin, RESP_SLOT[rsize], 0]

    def _zone(self, q: Query | None) -> str:
        """The served zone containing the question as the table matches it, else `.`."""
        if q is None or self._zone_of is None:
            return ROOT
        zwire = self._zone_of(q.lname)
        return ROOT if zwire is None else self._zone_labels[zwire]

    # ----------------------------------------------------------------- forwarding

    def proxy_observe(self, to: str, rcode: int, seconds: float) -> None:
        """One upstream exchange that got a reply (CoreDNS observes only those)."""
        key = (to, RCODE_NAMES.get(rcode) or str(rcode))
        hist = self.proxy_duration.get(key)
        if hist is None:
            hist = self.proxy_duration[key] = _Hist(PROXY_BUCKETS)
        hist.observe(seconds)

    def mismatched_reply(self, reason: str) -> None:
        """An upstream socket got a reply that does not answer the query (RFC 5452): dropped."""
        self.mismatched[reason] = self.mismatched.get(reason, 0) + 1

    def healthcheck_failed(self, to: str) -> None:
        self.healthcheck_failures[to] += 1

    def transfer(self, kind: str, result: str) -> None:
        """One zone transfer request and what it got (transfer.Transfers)."""
        self.transfers.labels(kind, result).inc()

    def ixfr_fallback(self, reason: str) -> None:
        """One IXFR answered with the whole zone, and why (journal.Journal.since)."""
        self.ixfr_fallbacks.labels(reason).inc()

    def notified(self, result: str) -> None:
        """One NOTIFY sent, or how one ended (notify.Notifier)."""
        self.notifies.labels(result).inc()

    def panic(self) -> None:
        """A bug surfaced on the query path (CoreDNS counts recovered panics)."""
        self.panics.inc()

    # ----------------------------------------------------------------- sources

    def programmed(self, key: tuple[str, str], trigger: str | None, headless: bool) -> None:
        """A service's new answers are live: observe the time since its change was triggered."""
        if trigger is None:
            return
        try:
            at = dt.datetime.fromisoformat(trigger.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return
        self.programming.labels("headless_with_selector" if headless else "cluster_ip").observe(max(0.0, time.time() - at))

    def programmed_since(self, started: float, headless: bool) -> None:
        """Programming latency from an event's arrival (no trigger-time annotation)."""
        self.programming.labels("headless_with_selector" if headless else "cluster_ip").observe(max(0.0, time.monotonic() - started))

    def stamped(self, kind: str, stamp: str) -> None:
        """A change the API dated `stamp` (RFC 3339) is served now: observe the time since, by kind."""
        try:
            at = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return
        self.api_programming.labels(kind).observe(max(0.0, time.time() - at))

    def rejected(self, reason: str) -> None:
        self.rejects[reason] += 1

    def sync_confirmed(self) -> None:
        """The source found its state current now (manifests: a poll read every file as it is on disk)."""
        self.last_sync = time.monotonic()

    # ----------------------------------------------------------------- scrape

    def collect(self) -> Iterable:
        yield from self._collect_dns()
        yield from self._collect_forward()
        yield from self._collect_mcsdns()
        for collector in self.extra_collectors:
            yield from collector.collect()

    def _merged(self) -> dict[tuple[str, str, str, str], _Series]:
        """(server, zone, proto, family) -> series summed over listeners (a copy: the loop keeps counting)."""
        self.fold()
        out: dict[tuple[str, str, str, str], _Series] = {}
        for where, by_zone in list(self._series.items()):
            for zone, s in list(by_zone.items()):
                key = (where.server, zone, where.proto, "2" if where.family == 2 else "1")
                m = out.get(key)
                if m is None:
                    m = out[key] = _Series()
                m.add(s)
        return out

    def _collect_dns(self) -> Iterable:
        merged = self._merged()
        labels = ["server", "zone", "view"]
        req = CounterMetricFamily("coredns_dns_requests", "Counter of DNS requests made per zone, protocol and family.",
                                  labels=labels + ["proto", "family", "type"])
        resp = CounterMetricFamily("coredns_dns_responses", "Counter of response status codes.", labels=labels + ["rcode", "plugin"])
        do = CounterMetricFamily("coredns_dns_do_requests", "Counter of DNS requests with DO bit set per zone.", labels=labels)
        dur = HistogramMetricFamily("coredns_dns_request_duration_seconds", "Histogram of the time (in seconds) each request took per zone.", labels=labels)
        req_size = HistogramMetricFamily("coredns_dns_request_size_bytes", "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol.", labels=labels + ["proto"])
        resp_size = HistogramMetricFamily("coredns_dns_response_size_bytes", "Size of the returned response in bytes.", labels=labels + ["proto"])
        # Per (server, zone) sums for the families without proto/family labels.
        per_zone: dict[tuple[str, str], _Series] = {}
        sized: dict[tuple[str, str, str], tuple[_Hist, _Hist]] = {}
        for (server, zone, proto, family), s in sorted(merged.items()):
            for qtype, n in sorted(s.request_counts().items()):
                req.add_metric([server, zone, VIEW, proto, family, qtype], n)
            z = per_zone.get((server, zone))
            if z is None:
                z = per_zone[(server, zone)] = _Series()
            z.add(s)
            pair = sized.setdefault((server, zone, proto), (_Hist(SIZE_BUCKETS), _Hist(SIZE_BUCKETS)))
            pair[0].add(s.req_size)
            pair[1].add(s.resp_size)
        for (server, zone), z in sorted(per_zone.items()):
            base = [server, zone, VIEW]
            for rcode, plugin, n in z.response_counts():
                resp.add_metric(base + [rcode, plugin], n)
            do.add_metric(base, z.do)
            dur.add_metric(base, z.duration.buckets(), z.duration.sum)
        for (server, zone, proto), (rq, rs) in sorted(sized.items()):
            req_size.add_metric([server, zone, VIEW, proto], rq.buckets(), rq.sum)
            resp_size.add_metric([server, zone, VIEW, proto], rs.buckets(), rs.sum)
        yield from (req, resp, do, dur, req_size, resp_size)
        yield self._plugins_enabled()

    def _plugins_enabled(self) -> GaugeMetricFamily:
        """coredns_plugin_enabled: what a CoreDNS with the equivalent Corefile would report."""
        fam = GaugeMetricFamily("coredns_plugin_enabled", "A metric that indicates whether a plugin is enabled on per server and zone basis.",
                                labels=["server", "zone", "view", "name"])
        views = self.views
        if views is None:
            return fam
        for server in views.servers():
            for _, zone in self._zones:
                fam.add_metric([server, zone, VIEW, "kubernetes"], 1)
            if views.forwarder is not None:
                fam.add_metric([server, ROOT, VIEW, "forward"], 1)
        return fam

    def _collect_forward(self) -> Iterable:
        dur = HistogramMetricFamily("coredns_proxy_request_duration_seconds", "Histogram of the time each request took.",
                                    labels=["proxy_name", "to", "rcode"])
        for (to, rcode), hist in sorted(self.proxy_duration.items()):
            dur.add_metric([PROXY_NAME, to, rcode], hist.buckets(), hist.sum)
        yield dur
        hc = CounterMetricFamily("coredns_proxy_healthcheck_failures", "Counter of the number of failed healthchecks.",
                                 labels=["proxy_name", "to"])
        for to, n in sorted(self.healthcheck_failures.items()):
            hc.add_metric([PROXY_NAME, to], n)
        yield hc
        broken = CounterMetricFamily("coredns_forward_healthcheck_broken", "Counter of the number of complete failures of the healthchecks.")
        broken.add_metric([], self.healthcheck_broken)
        yield broken
        rejects = CounterMetricFamily("coredns_forward_max_concurrent_rejects", "Counter of the number of queries rejected because the concurrent queries were at maximum.")
        rejects.add_metric([], self.max_concurrent_rejects)
        yield rejects
        forwarder = self.views.forwarder if self.views is not None else None
        if forwarder is not None:
            up = GaugeMetricFamily("mcsdns_forward_upstream_up", "1 while an upstream is considered healthy, 0 while it is marked down.", labels=["to"])
            for upstream in forwarder.upstreams:
                up.add_metric([upstream.label], 0 if upstream.down else 1)
            yield up
            inflight = GaugeMetricFamily("mcsdns_forward_inflight", "Forwarded queries waiting for an upstream.")
            inflight.add_metric([], forwarder.inflight)
            yield inflight
            mismatched = CounterMetricFamily("mcsdns_forward_mismatched_replies",
                                             "Upstream replies dropped because they do not answer the query sent, by reason.",
                                             labels=["reason"])
            for reason, n in self.mismatched.items():
                mismatched.add_metric([reason], n)
            yield mismatched

    def _collect_mcsdns(self) -> Iterable:
        dropped = CounterMetricFamily("mcsdns_dropped_packets", "Packets dropped without a reply (no readable header, or a response).")
        dropped.add_metric([], self.dropped)
        yield dropped
        rej = CounterMetricFamily("mcsdns_objects_rejected", "Objects rejected at ingest, and parts of served objects left out (DNS cannot represent them), by reason.", labels=["reason"])
        for reason, n in sorted(self.rejects.items()):
            rej.add_metric([reason], n)
        yield rej
        restarts = CounterMetricFamily("mcsdns_watch_restarts", "Watch streams restarted, by resource.", labels=["resource"])
        for res, n in sorted(self.watch_restarts.items()):
            restarts.add_metric([res], n)
        yield restarts
        relists = CounterMetricFamily("mcsdns_relists", "Full lists of a resource (initial, 410 Gone, resync).", labels=["resource"])
        for res, n in sorted(self.relists.items()):
            relists.add_metric([res], n)
        yield relists
        up = GaugeMetricFamily("mcsdns_watch_up", "1 while the watch of a resource is connected.", labels=["resource"])
        for res, ok in sorted(self.watch_up.items()):
            up.add_metric([res], 1 if ok else 0)
        yield up
        if self.last_sync is not None:
            since = GaugeMetricFamily("mcsdns_seconds_since_last_sync",
                                      "Seconds since the source last confirmed its state: from the API a completed list, "
                                      "a watch (re)started or a bookmark; from manifests a poll (every second) that "
                                      "found every file read and valid as it is on disk.")
            since.add_metric([], time.monotonic() - self.last_sync)
            yield since
        if self.views is not None:
            serial = GaugeMetricFamily("mcsdns_zone_serial", "The SOA serial the zones are served with: the Unix "
                                       "time in milliseconds of the last change, modulo 2^32.")
            serial.add_metric([], self.views.table.soa_serial)
            yield serial
            if self.views.tcp is not None:
                yield from self._collect_tcp(self.views.tcp)
            yield from self._collect_table(self.views)
        if self.journal is not None:
            depth = GaugeMetricFamily("mcsdns_ixfr_journal_changes", "Changes held in the IXFR journal (one per serial).")
            depth.add_metric([], len(self.journal.entries))
            yield depth
            size = GaugeMetricFamily("mcsdns_ixfr_journal_bytes", "Wire size of the records held in the IXFR journal "
                                     "(bounded by --ixfr-journal-bytes).")
            size.add_metric([], self.journal.bytes)
            yield size
        if self.transfers_now is not None:
            now = GaugeMetricFamily("mcsdns_transfers_in_progress", "Zone transfers (and replies to TSIG-signed "
                                    "queries) being written now over TCP; at --max-transfers a new request is REFUSED, "
                                    "counted in mcsdns_transfers_total{result=\"busy\"}.")
            now.add_metric([], self.transfers_now.active)
            yield now
            cap = GaugeMetricFamily("mcsdns_transfers_max", "The --max-transfers limit: zone transfers written at once.")
            cap.add_metric([], self.transfers_now.max_transfers)
            yield cap

    def _collect_tcp(self, tcp: TcpView) -> Iterable:
        conns = GaugeMetricFamily("mcsdns_tcp_connections", "DNS-over-TCP connections open.")
        conns.add_metric([], len(tcp))
        yield conns
        closed = CounterMetricFamily("mcsdns_tcp_connections_closed", "DNS-over-TCP connections the server closed, by "
                                     "reason: evicted (table full), per_source, first_query_timeout, idle_timeout, "
                                     "not_reading, max_queries, garbage.", labels=["reason"])
        for reason, n in tcp.closed.items():
            closed.add_metric([reason], n)
        yield closed

    def _collect_table(self, views: Views) -> Iterable:
        """Table and store sizes, read from the live objects at scrape time (no gauges to keep in step)."""
        table = views.table
        objs = GaugeMetricFamily("mcsdns_objects", "Objects known, by kind.", labels=["kind"])
        for kind, n in views.object_counts().items():
            objs.add_metric([kind], n)
        yield objs
        answers = GaugeMetricFamily("mcsdns_compiled_answers", "Answers (name, type) compiled into the record table.")
        answers.add_metric([], len(table.answers))
        yield answers
        names = GaugeMetricFamily("mcsdns_compiled_names", "Distinct names with compiled answers.")
        names.add_metric([], len({key[:-4] for key in list(table.answers)}))  # key = wire name + type + class
        yield names
        services = GaugeMetricFamily("mcsdns_compiled_services", "Services with compiled answers.")
        services.add_metric([], len(table.owned))
        yield services
        behind = GaugeMetricFamily("mcsdns_services_behind", "Services the initial sync left to compile while serving "
                                   "(each is compiled when first asked, the rest between queries); 0 once all are.")
        behind.add_metric([], len(table.behind))
        yield behind
        synced = GaugeMetricFamily("mcsdns_synced", "1 when every watched resource completed its initial list.")
        synced.add_metric([], 1 if table.synced else 0)
        yield synced
        gen = GaugeMetricFamily("mcsdns_table_generation", "Record table generation (changes applied).")
        gen.add_metric([], table.generation)
        yield gen
        if views.import_conditions is not None:
            conditions = GaugeMetricFamily(
                "mcsdns_serviceimport_conditions",
                "ServiceImports by the type, status and reason of their status.conditions, as the MCS controller wrote "
                "them (a type or reason mcs-api does not define counts as other); they never change an answer.",
                labels=["type", "status", "reason"])
            for (type_, status, reason), n in sorted(views.import_conditions().items()):
                conditions.add_metric([type_, status, reason], n)
            yield conditions


def _zone_label(zwire: bytes) -> str:
    labels = []
    i = 0
    while i < len(zwire) and zwire[i]:
        labels.append(zwire[i + 1 : i + 1 + zwire[i]].decode("latin-1"))
        i += zwire[i] + 1
    return ".".join(labels) + "."

