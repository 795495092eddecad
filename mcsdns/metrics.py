"""Every metric, on an injected registry, under CoreDNS's names (contract section 5).

The query path only bumps plain integers (`observe`); a custom collector
turns them into Prometheus families at scrape time. That keeps counting off
the hot path's budget, and lets tests build a fresh registry and read values
back with `registry.get_sample_value`.
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
import platform
import struct
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from . import __version__

if TYPE_CHECKING:
    from .app import App

log = logging.getLogger(__name__)

# CoreDNS plugin/metrics/vars: duration buckets 0.00025 * 2^k (16), size buckets as listed.
DURATION_BUCKETS = tuple(0.00025 * 2**k for k in range(16))
SIZE_BUCKETS = (0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3)
PROGRAMMING_BUCKETS = tuple(0.001 * 2**k for k in range(20))  # plugin/kubernetes/metrics.go
HEALTH_BUCKETS = (0.00025, 0.0025, 0.025, 0.25, 2.5)

# The qtype label values CoreDNS keeps; everything else is "other".
QTYPE_NAMES = {
    1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA", 33: "SRV",
    43: "DS", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 50: "NSEC3", 64: "SVCB", 65: "HTTPS",
    251: "IXFR", 252: "AXFR", 255: "ANY",
}  # fmt: skip
RCODE_NAMES = {
    0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
    6: "YXDOMAIN", 7: "YXRRSET", 8: "NXRRSET", 9: "NOTAUTH", 10: "NOTZONE",
}  # fmt: skip

ZONE = "."  # CoreDNS labels requests with the server block's zone; ours is the root block
VIEW = ""


class _Hist:
    """A histogram kept as plain bucket counts; rendered at scrape time."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, count in zip(self.bounds, self.counts):
            acc += count
            out.append((_fmt(bound), acc))
        out.append(("+Inf", acc + self.counts[-1]))
        return out


def _fmt(bound: float) -> str:
    return repr(float(bound)) if not float(bound).is_integer() else f"{float(bound):.1f}"


class Metrics(Collector):
    """Counts from the query path and the sources, published on scrape."""

    def __init__(self, registry: CollectorRegistry, app: "App | None" = None, server: str = "dns://:5353") -> None:
        self.app = app
        self.server = server
        self.requests: dict[tuple[str, str, str], int] = defaultdict(int)  # (proto, family, type)
        self.responses: dict[str, int] = defaultdict(int)  # rcode name
        self.responses_plugin: dict[tuple[str, str], int] = defaultdict(int)  # (rcode, plugin)
        self.do_requests = 0
        self.duration = _Hist(DURATION_BUCKETS)
        self.req_size = {"udp": _Hist(SIZE_BUCKETS), "tcp": _Hist(SIZE_BUCKETS)}
        self.resp_size = {"udp": _Hist(SIZE_BUCKETS), "tcp": _Hist(SIZE_BUCKETS)}
        self.dropped = 0
        self.rejects: dict[str, int] = defaultdict(int)  # objects rejected, by reason
        self.panics = Counter("coredns_panics_total", "A metrics that counts the number of panics.", registry=registry)
        self.programming = Histogram(
            "coredns_kubernetes_dns_programming_duration_seconds",
            "Histogram of the time (in seconds) it took to program a dns instance.",
            ["service_kind"],
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

    # ----------------------------------------------------------------- hot path

    def observe(self, proto: str, family: int, query: bytes, reply: bytes | None, started: float) -> None:
        """Count one query and its reply (None: dropped). Cheap: integer and list bumps only."""
        if reply is None and len(query) < 12:
            self.dropped += 1
            return
        qtype = "other"
        if len(query) >= 17:
            end = query.find(b"\x00", 12)
            if end > 0 and end + 3 <= len(query):
                (code,) = struct.unpack_from(">H", query, end + 1)
                qtype = QTYPE_NAMES.get(code, "other")
        self.requests[(proto, "2" if family == 2 else "1", qtype)] += 1
        self.req_size[proto].observe(len(query))
        if len(query) >= 12 and query.find(b"\x00\x00\x29", 12) > 0 and _do_bit(query):
            self.do_requests += 1
        if reply is not None:
            rcode = RCODE_NAMES.get(reply[3] & 0x0F, str(reply[3] & 0x0F))
            self.responses[rcode] += 1
            self.resp_size[proto].observe(len(reply))
        else:
            self.dropped += 1
        if started:
            self.duration.observe(time.perf_counter() - started)

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

    def rejected(self, reason: str) -> None:
        self.rejects[reason] += 1

    # ----------------------------------------------------------------- scrape

    def collect(self) -> Iterable:
        labels = ["server", "zone", "view"]
        base = [self.server, ZONE, VIEW]
        req = CounterMetricFamily("coredns_dns_requests_total", "Counter of DNS requests made per zone, protocol and family.", labels=labels + ["proto", "family", "type"])
        for (proto, family, qtype), n in sorted(self.requests.items()):
            req.add_metric(base + [proto, family, qtype], n)
        yield req
        resp = CounterMetricFamily("coredns_dns_responses_total", "Counter of response status codes.", labels=labels + ["rcode", "plugin"])
        for rcode, n in sorted(self.responses.items()):
            resp.add_metric(base + [rcode, "kubernetes"], n)
        yield resp
        do = CounterMetricFamily("coredns_dns_do_requests_total", "Counter of DNS requests with DO bit set per zone.", labels=labels)
        do.add_metric(base, self.do_requests)
        yield do
        dur = HistogramMetricFamily("coredns_dns_request_duration_seconds", "Histogram of the time (in seconds) each request took per zone.", labels=labels)
        dur.add_metric(base, self.duration.buckets(), self.duration.sum)
        yield dur
        for name, hists, text in (
            ("coredns_dns_request_size_bytes", self.req_size, "Size of the EDNS0 UDP buffer in bytes (64K for TCP) per zone and protocol."),
            ("coredns_dns_response_size_bytes", self.resp_size, "Size of the returned response in bytes."),
        ):
            fam = HistogramMetricFamily(name, text, labels=labels + ["proto"])
            for proto, h in hists.items():
                fam.add_metric(base + [proto], h.buckets(), h.sum)
            yield fam
        yield from self._collect_mcsdns()

    def _collect_mcsdns(self) -> Iterable:
        dropped = CounterMetricFamily("mcsdns_dropped_packets_total", "Packets dropped without a reply (no readable header).")
        dropped.add_metric([], self.dropped)
        yield dropped
        rej = CounterMetricFamily("mcsdns_objects_rejected_total", "Objects rejected at ingest, by reason.", labels=["reason"])
        for reason, n in sorted(self.rejects.items()):
            rej.add_metric([reason], n)
        yield rej
        app = self.app
        if app is None:
            return
        table, store = app.table, app.store
        objs = GaugeMetricFamily("mcsdns_objects", "Objects known, by kind.", labels=["kind"])
        for kind, n in store.counts().items():
            objs.add_metric([kind], n)
        yield objs
        answers = GaugeMetricFamily("mcsdns_compiled_answers", "Answers compiled into the record table.")
        answers.add_metric([], len(table.answers))
        yield answers
        services = GaugeMetricFamily("mcsdns_compiled_services", "Services with compiled answers.")
        services.add_metric([], len(table.owned))
        yield services
        synced = GaugeMetricFamily("mcsdns_synced", "1 when every watched resource completed its initial list.")
        synced.add_metric([], 1 if table.synced else 0)
        yield synced
        gen = GaugeMetricFamily("mcsdns_table_generation", "Record table generation (changes applied).")
        gen.add_metric([], table.generation)
        yield gen
        restarts = CounterMetricFamily("mcsdns_watch_restarts_total", "Watch streams restarted, by resource.", labels=["resource"])
        for res, n in sorted(self.watch_restarts.items()):
            restarts.add_metric([res], n)
        yield restarts
        relists = CounterMetricFamily("mcsdns_relists_total", "Full lists of a resource (initial, 410 Gone, resync).", labels=["resource"])
        for res, n in sorted(self.relists.items()):
            relists.add_metric([res], n)
        yield relists
        up = GaugeMetricFamily("mcsdns_watch_up", "1 while the watch of a resource is connected.", labels=["resource"])
        for res, ok in sorted(self.watch_up.items()):
            up.add_metric([res], 1 if ok else 0)
        yield up
        if self.last_sync is not None:
            since = GaugeMetricFamily("mcsdns_seconds_since_last_sync", "Seconds since the source last confirmed the state with the API or files.")
            since.add_metric([], time.monotonic() - self.last_sync)
            yield since


def _do_bit(query: bytes) -> bool:
    at = query.rfind(b"\x00\x00\x29")
    return at > 0 and at + 7 <= len(query) and bool(query[at + 7] & 0x80)
