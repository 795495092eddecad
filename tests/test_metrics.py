"""/metrics after real traffic: CoreDNS's families, labels and buckets, and mcsdns's own.

One server (forwarding to Knot) takes a known mix of queries; the scrape must
count exactly those, under the label values a CoreDNS dashboard queries.
The counting itself is checked in-process: plain integer bumps, no memory kept
per query. Its CPU cost per packet is a benchmark's figure, not a test's:
`python -m benchmarks.metrics_cost`.
"""

from __future__ import annotations

import socket
import time
import tracemalloc

import dns.message
import dns.rcode
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from testsupport.mcsdnsserver import ROOT, McsdnsServer
from upstreams import ForwardingServer, Knot

from mcsdns.metrics import DURATION, DURATION_BUCKETS, FOLD_AT, PROGRAMMING_BUCKETS, SCRATCH, SIZE_BUCKETS, Metrics, Views
from mcsdns.store import Store
from mcsdns.zone.table import Table, TableConfig
from mcsdns.serve.transport import Listener
from mcsdns.zone.wire import ONCE, parse_query

Z = "clusterset.local."
DURATION_LE = [0.00025 * 2**k for k in range(16)]
SIZE_LE = [0, 100, 200, 300, 400, 511, 1023, 2047, 4095, 8291, 16e3, 32e3, 48e3, 64e3]
PROGRAMMING_LE = [0.001 * 2**k for k in range(20)]

# Label names of each CoreDNS family (plugin/metrics/vars/vars.go, plugin/pkg/proxy/metrics.go,
# plugin/forward/metrics.go): what dashboards written for CoreDNS group and filter by.
COREDNS_LABELS = {
    "coredns_dns_requests_total": {"server", "zone", "view", "proto", "family", "type"},
    "coredns_dns_responses_total": {"server", "zone", "view", "rcode", "plugin"},
    "coredns_dns_do_requests_total": {"server", "zone", "view"},
    "coredns_dns_request_duration_seconds_bucket": {"server", "zone", "view", "le"},
    "coredns_dns_request_size_bytes_bucket": {"server", "zone", "view", "proto", "le"},
    "coredns_dns_response_size_bytes_bucket": {"server", "zone", "view", "proto", "le"},
    "coredns_proxy_request_duration_seconds_bucket": {"proxy_name", "to", "rcode", "le"},
    "coredns_plugin_enabled": {"server", "zone", "view", "name"},
    "coredns_build_info": {"version", "revision", "goversion"},
    "coredns_panics_total": set(),
    "coredns_forward_healthcheck_broken_total": set(),
    "coredns_forward_max_concurrent_rejects_total": set(),
}

INVALID_IMPORT = """
---
apiVersion: multicluster.x-k8s.io/v1beta1
kind: ServiceImport
metadata: {name: broken.name, namespace: demo}
spec: {type: ClusterSetIP, ports: [{port: 80, protocol: TCP}]}
"""


def scrape(server: ForwardingServer) -> dict[str, list]:
    """Sample name -> [(labels, value)] from one scrape."""
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(server.http("/metrics")[1]):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def value(samples: dict[str, list], metric: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels` (0 when none)."""
    return sum(v for lab, v in samples.get(metric, []) if all(lab.get(k) == want for k, want in labels.items()))


def les(samples: dict[str, list], metric: str, **labels: str) -> list[float]:
    return [float(lab["le"]) for lab, _ in samples[metric] if all(lab.get(k) == v for k, v in labels.items()) and lab["le"] != "+Inf"]


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """A server, a known mix of queries, and one scrape of the result."""
    tmp = tmp_path_factory.mktemp("metrics")
    manifests = tmp / "clusterset.yaml"
    manifests.write_text((ROOT / "mcsdns/examples/clusterset.yaml").read_text() + INVALID_IMPORT)
    with Knot(tmp) as knot, ForwardingServer("--manifests", str(manifests), "--upstream", knot.addr) as s:
        s.http("/metrics")  # the readiness probes of start() are counted too: measure from here
        before = scrape(s)
        for _ in range(3):
            s.query("web.demo.svc." + Z, "A")  # udp, A, NOERROR
        s.query("web.demo.svc." + Z, "A", want_dnssec=True)  # + DO bit
        s.query("nothere.demo.svc." + Z, "A")  # NXDOMAIN, kubernetes
        for _ in range(2):
            s.query("web.demo.svc." + Z, "AAAA", tcp=True)  # tcp, AAAA
        s.query("db.demo.svc." + Z, "SRV")  # SRV
        s.query(Z, "AXFR", tcp=True)  # REFUSED, written by the server
        for _ in range(2):
            s.query("www.example.test.", "A")  # forwarded to Knot: NOERROR, plugin forward
        s.query("nothere.example.test.", "MX")  # forwarded: NXDOMAIN
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(2)
            bad = dns.message.make_query("x.example.", "A").to_wire()[:14]  # header fine, question cut
            sock.sendto(bad, s.addr)
            assert dns.message.from_wire(sock.recv(512), question_only=True).rcode() == dns.rcode.FORMERR
            sock.sendto(b"\x01\x02\x03", s.addr)  # no header: dropped
        yield s, knot, before, scrape(s)


def delta(traffic, metric: str, **labels: str) -> float:
    _, _, before, after = traffic
    return value(after, metric, **labels) - value(before, metric, **labels)


def test_requests_by_zone_proto_family_and_type(traffic):
    s = traffic[0]
    server = f"dns://127.0.0.1:{s.dns_port}"
    common = dict(server=server, view="", family="1")
    assert delta(traffic, "coredns_dns_requests_total", zone=Z, proto="udp", type="A", **common) == 5
    assert delta(traffic, "coredns_dns_requests_total", zone=Z, proto="udp", type="SRV", **common) == 1
    assert delta(traffic, "coredns_dns_requests_total", zone=Z, proto="tcp", type="AAAA", **common) == 2
    assert delta(traffic, "coredns_dns_requests_total", zone=Z, proto="tcp", type="AXFR", **common) == 1
    assert delta(traffic, "coredns_dns_requests_total", zone=".", proto="udp", type="A", **common) == 2
    assert delta(traffic, "coredns_dns_requests_total", zone=".", proto="udp", type="MX", **common) == 1
    assert delta(traffic, "coredns_dns_requests_total", zone=".", proto="udp", type="other", **common) == 1  # the FORMERR
    assert delta(traffic, "coredns_dns_do_requests_total", zone=Z, server=server) == 1


def test_responses_say_which_plugin_wrote_them(traffic):
    assert delta(traffic, "coredns_dns_responses_total", zone=Z, rcode="NOERROR", plugin="kubernetes") == 7
    assert delta(traffic, "coredns_dns_responses_total", zone=Z, rcode="NXDOMAIN", plugin="kubernetes") == 1
    assert delta(traffic, "coredns_dns_responses_total", zone=Z, rcode="REFUSED", plugin="") == 1
    assert delta(traffic, "coredns_dns_responses_total", zone=".", rcode="NOERROR", plugin="forward") == 2
    assert delta(traffic, "coredns_dns_responses_total", zone=".", rcode="NXDOMAIN", plugin="forward") == 1
    assert delta(traffic, "coredns_dns_responses_total", zone=".", rcode="FORMERR", plugin="") == 1
    assert delta(traffic, "mcsdns_dropped_packets_total") == 1


def test_histograms_count_every_reply_in_coredns_buckets(traffic):
    after = traffic[3]
    assert les(after, "coredns_dns_request_duration_seconds_bucket", zone=Z) == pytest.approx(DURATION_LE)
    assert les(after, "coredns_dns_request_size_bytes_bucket", zone=Z, proto="udp") == SIZE_LE
    assert les(after, "coredns_dns_response_size_bytes_bucket", zone=Z, proto="tcp") == SIZE_LE
    assert les(after, "coredns_proxy_request_duration_seconds_bucket", rcode="NOERROR") == pytest.approx(DURATION_LE)
    assert delta(traffic, "coredns_dns_request_duration_seconds_count", zone=Z) == 9
    assert delta(traffic, "coredns_dns_request_duration_seconds_count", zone=".") == 4
    assert delta(traffic, "coredns_dns_request_size_bytes_count", zone=Z, proto="tcp") == 3
    assert delta(traffic, "coredns_dns_response_size_bytes_count", zone=Z, proto="udp") == 6
    # Every reply here is small: all in the buckets up to 511 bytes; the +Inf bucket equals the count.
    assert delta(traffic, "coredns_dns_response_size_bytes_bucket", zone=Z, proto="udp", le="511") == 6
    assert delta(traffic, "coredns_dns_response_size_bytes_bucket", zone=Z, proto="udp", le="+Inf") == 6
    assert delta(traffic, "coredns_dns_request_duration_seconds_bucket", zone=Z, le="+Inf") == 9


def test_forwarded_queries_are_timed_per_upstream_and_rcode(traffic):
    knot = traffic[1]
    to = dict(proxy_name="forward", to=knot.addr)
    assert delta(traffic, "coredns_proxy_request_duration_seconds_count", rcode="NOERROR", **to) == 2
    assert delta(traffic, "coredns_proxy_request_duration_seconds_count", rcode="NXDOMAIN", **to) == 1
    assert delta(traffic, "coredns_proxy_request_duration_seconds_sum", **to) > 0
    after = traffic[3]
    assert value(after, "coredns_forward_max_concurrent_rejects_total") == 0
    assert value(after, "coredns_forward_healthcheck_broken_total") == 0
    assert value(after, "mcsdns_forward_upstream_up", to=knot.addr) == 1


def test_coredns_families_have_coredns_label_names(traffic):
    after = traffic[3]
    for name, labels in COREDNS_LABELS.items():
        assert name in after, name
        for got, _ in after[name]:
            assert set(got) == labels, (name, got)
    assert value(after, "coredns_build_info") == 1
    assert value(after, "coredns_panics_total") == 0
    server = f"dns://127.0.0.1:{traffic[0].dns_port}"
    assert value(after, "coredns_plugin_enabled", server=server, zone=Z, name="kubernetes") == 1
    assert value(after, "coredns_plugin_enabled", server=server, zone=".", name="forward") == 1
    assert value(after, "process_resident_memory_bytes") > 0


def test_mcsdns_families_describe_the_table_and_the_source(traffic):
    after = traffic[3]
    assert value(after, "mcsdns_objects", kind="ServiceImport") == 2
    assert value(after, "mcsdns_objects", kind="EndpointSlice") == 3
    assert value(after, "mcsdns_objects", kind="Namespace") == 1
    assert value(after, "mcsdns_objects_rejected_total") == 1
    assert value(after, "mcsdns_synced") == 1
    names, answers = value(after, "mcsdns_compiled_names"), value(after, "mcsdns_compiled_answers")
    assert 0 < names <= answers
    assert value(after, "mcsdns_compiled_services") == 2
    assert value(after, "mcsdns_table_generation") >= 1


def test_metric_names_follow_the_conventions(traffic):
    """coredns_* as CoreDNS names them, our own under mcsdns_*, counters end in _total, and no
    `*_created` series anywhere (CoreDNS has none: a dashboard summing a family by regex must not
    pick up timestamps)."""
    text = traffic[0].http("/metrics")[1]
    for family in text_string_to_metric_families(text):
        assert family.name.split("_", 1)[0] in ("coredns", "mcsdns", "process"), family.name
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
    assert "# TYPE coredns_dns_request_duration_seconds histogram" in text
    assert "coredns_panics_total 0.0" in text and "coredns_kubernetes_dns_programming_duration_seconds" in text
    series = [line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert [name for name in series if name.endswith("_created")] == []
    assert "_created" not in text


def test_seconds_since_last_sync_is_exported_for_manifests(traffic):
    """The manifests source confirms its state at every poll (each second) that reads every file as
    it is on disk, as the family's help text says."""
    server = traffic[0]
    for _ in range(3):
        since = value(scrape(server), "mcsdns_seconds_since_last_sync")
        assert "mcsdns_seconds_since_last_sync" in scrape(server) and 0 <= since < 2.5, since
        time.sleep(1.2)


def test_a_broken_manifest_edit_lets_seconds_since_last_sync_grow(tmp_path):
    manifests = tmp_path / "clusterset.yaml"
    manifests.write_text((ROOT / "mcsdns/examples/clusterset.yaml").read_text())
    with McsdnsServer("--manifests", str(manifests)) as s:
        assert value(scrape(s), "mcsdns_seconds_since_last_sync") < 2.5
        manifests.write_text("kind: [unclosed\n")  # the last good state stays in service
        time.sleep(4)
        assert value(scrape(s), "mcsdns_seconds_since_last_sync") > 2.5
        assert s.query("web.demo.svc." + Z, "A").answer  # still answering from the last good state


def test_every_exported_family_is_in_the_generated_reference(traffic):
    """docs/metrics.md is generated from the declarations (python -m mcsdns.admin.metrics_doc docs/metrics.md),
    and lists every family a running server exports: none can go undocumented."""
    from mcsdns.admin import metrics_doc

    reference = (ROOT / "docs" / "metrics.md").read_text()
    assert metrics_doc.table() in reference, "docs/metrics.md is stale: python -m mcsdns.admin.metrics_doc docs/metrics.md"
    documented = {f.name: f for f in metrics_doc.declared()}
    for family in text_string_to_metric_families(traffic[0].http("/metrics")[1]):
        name = family.name + "_total" if family.type == "counter" else family.name
        assert name in documented, f"{name} is exported but not in docs/metrics.md"
        assert documented[name].kind == family.type, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= set(documented[name].labels), (name, sample.labels)


# --------------------------------------------------------------------------- in-process: cost and buckets


def _query(qname: str, qtype: str = "A", **kw) -> bytes:
    return dns.message.make_query(qname, qtype, **kw).to_wire()


def test_missing_names_of_one_shape_count_under_their_own_zone():
    """Two zones of one length: missing names of one shape in each (`Resolver._absent_child` shares a
    query object per shape) are counted under their own zone, exactly as parsing each packet would."""
    from testsupport.inprocess import build_resolver

    zones = ("clusterset.local", "clusterset.other")
    resolver = build_resolver(manifests=[ROOT / "tests" / "fixtures" / "contract.yaml"], zones=zones, synced=True)
    where = Listener("dns://127.0.0.1:53", "udp", 1)
    tallied, full = (Metrics(CollectorRegistry(), Views(resolver.table, lambda: {}, lambda: [])) for _ in range(2))
    for _ in range(2):
        for label in ("x", "y", "z"):
            for zone in zones:
                wire = _query(f"{label}.svc1.testns.svc.{zone}.")
                reply, q = resolver.resolve(wire, False)
                assert dns.message.from_wire(reply).rcode() == dns.rcode.NXDOMAIN
                tallied.observe(where, None, wire, q, reply, 0.0, False)
                full.observe(where, None, wire, parse_query(wire), reply, 0.0, False)
    tallied.fold()  # (the hits cache hits left on their tallies, as a scrape adds them)
    got, want = tallied._series[where], full._series[where]
    assert set(want) == {"clusterset.local.", "clusterset.other."}
    assert got.keys() == want.keys()
    for zone in want:
        assert got[zone].counts[:SCRATCH] == want[zone].counts[:SCRATCH]
        assert got[zone].sums == want[zone].sums


def test_programming_latency_buckets_are_corednss():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.programmed_since(time.monotonic() - 0.003, headless=True)
    metrics.programmed(("demo", "web"), "2020-01-01T00:00:00Z", headless=False)  # triggered long ago: +Inf
    got: dict[str, list] = {}
    for family in registry.collect():
        if family.name == "coredns_kubernetes_dns_programming_duration_seconds":
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    got.setdefault(s.labels["service_kind"], []).append((s.labels["le"], s.value))
    assert [float(le) for le, _ in got["headless_with_selector"][:-1]] == pytest.approx(PROGRAMMING_LE)
    assert dict(got["headless_with_selector"])["0.004"] == 1 and dict(got["headless_with_selector"])["0.002"] == 0
    assert dict(got["cluster_ip"])["+Inf"] == 1 and dict(got["cluster_ip"])["524.288"] == 0
    assert list(DURATION_BUCKETS) == pytest.approx(DURATION_LE) and list(SIZE_BUCKETS) == SIZE_LE
    assert list(PROGRAMMING_BUCKETS) == pytest.approx(PROGRAMMING_LE)


def test_observe_counts_with_plain_integers_and_keeps_no_memory_per_query():
    registry = CollectorRegistry()
    store = Store()
    table = Table(TableConfig(("clusterset.local",), 5, None, ("127.0.0.1",)), store)
    metrics = Metrics(registry, Views(table, store.counts, lambda: ["dns://127.0.0.1:53"]))
    where = Listener("dns://127.0.0.1:53", "udp", 1)
    wire = _query("web.demo.svc." + Z, want_dnssec=True)
    q = parse_query(wire)
    reply = bytes([wire[0], wire[1], 0x85, 0x00]) + wire[4:]  # QR AA RD, NOERROR
    client = ("127.0.0.1", 5353)
    for _ in range(100):  # warm up: the series objects exist from here on
        metrics.observe(where, client, wire, q, reply, time.perf_counter(), False)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(20000):
            metrics.observe(where, client, wire, q, reply, time.perf_counter(), False)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 4096, grown  # counters, not records
    labels = {"server": "dns://127.0.0.1:53", "zone": Z, "view": ""}
    assert registry.get_sample_value("coredns_dns_requests_total", {**labels, "proto": "udp", "family": "1", "type": "A"}) == 20100
    assert registry.get_sample_value("coredns_dns_do_requests_total", labels) == 20100
    assert registry.get_sample_value("coredns_dns_responses_total", {**labels, "rcode": "NOERROR", "plugin": "kubernetes"}) == 20100
    metrics.observe(where, client, wire + bytes(70000), q, reply, 0.0, False)  # larger than DNS allows: +Inf, no error
    size = {**labels, "proto": "udp"}
    assert registry.get_sample_value("coredns_dns_request_size_bytes_bucket", {**size, "le": "64000"}) == 20100
    assert registry.get_sample_value("coredns_dns_request_size_bytes_bucket", {**size, "le": "+Inf"}) == 20101


def test_cache_hits_count_exactly_as_their_first_reply():
    """A query object the resolver's caches return again carries its counter slots (`Query.tally`):
    every hit, over two listeners and two Metrics, counts what the full path counts for it."""
    import dataclasses

    from testsupport.inprocess import build_resolver

    resolver = build_resolver(manifests=[ROOT / "tests" / "fixtures" / "contract.yaml"], zones=("clusterset.local",),
                              synced=True)
    wires = [_query("svc1.testns.svc." + Z), _query("SVC1.TestNS.svc." + Z),  # exact and folded cache
             _query("_http._tcp.svc1.testns.svc." + Z, "SRV", want_dnssec=True), _query("gone.testns.svc." + Z),
             _query("x.svc1.testns.svc." + Z, "AAAA"), _query("svc1.testns.svc." + Z, use_edns=1),
             *(_query(f"{c}.svc1.testns.svc." + Z, use_edns=0) for c in "yzY")]  # missing names of one shape: one query object
    listeners = [Listener("dns://127.0.0.1:53", "udp", 1), Listener("dns://[::1]:53", "udp", 2)]
    tallied, full = (Metrics(CollectorRegistry(), Views(resolver.table, lambda: {}, lambda: [])) for _ in range(2))
    hits = 0
    for where in listeners + listeners:  # a tally is per listener: the second listener replaces the first's
        for _ in range(3):
            for wire in wires:
                reply, q = resolver.resolve(wire, False)
                hits += type(q.tally) is list and q.tally[0][0] is where  # counted by the precomputed slots
                tallied.observe(where, None, wire, q, reply, 0.0, False)
                full.observe(where, None, wire, dataclasses.replace(q, tally=ONCE), reply, 0.0, False)
    assert hits >= 2 * len(wires) * len(listeners)  # every round after a listener's first
    tallied.fold()  # (the hits cache hits left on their tallies, as a scrape adds them)
    for where in listeners:
        got, want = tallied._series[where], full._series[where]
        assert got.keys() == want.keys()
        for zone in want:
            assert got[zone].counts[:SCRATCH] == want[zone].counts[:SCRATCH]  # (the scratch slot: read by nothing)
            assert got[zone].sums == want[zone].sums


def test_a_batch_observed_at_once_counts_what_each_packet_counts():
    """`observe_batch` (the batched UDP path's one call per batch) counts every packet as `observe` counts
    it alone: cache hits by their tallies' hits, the rest slot by slot, unreadable packets as dropped, a
    forwarded one (data None) not at all; each packet gets one duration, the batch's."""
    import dataclasses

    from testsupport.inprocess import build_resolver

    resolver = build_resolver(manifests=[ROOT / "tests" / "fixtures" / "contract.yaml"], zones=("clusterset.local",),
                              synced=True)
    wires = [_query("svc1.testns.svc." + Z), _query("SVC1.TestNS.svc." + Z), _query("gone.testns.svc." + Z),
             _query("_http._tcp.svc1.testns.svc." + Z, "SRV", want_dnssec=True), b"\x00\x01junk",
             *(_query(f"{c}.svc1.testns.svc." + Z, use_edns=0) for c in "yzY")]
    where = Listener("dns://127.0.0.1:53", "udp", 1)
    batched, alone = (Metrics(CollectorRegistry(), Views(resolver.table, lambda: {}, lambda: [])) for _ in range(2))
    clients = [("127.0.0.1", 5353)] * (len(wires) + 1)
    for _ in range(4):
        datas, queries, replies = [], [], []
        for wire in wires:
            reply, q = resolver.resolve(wire, False)
            datas.append(wire)
            queries.append(q)
            replies.append(reply)
            alone.observe(where, clients[0], wire, None if q is None else dataclasses.replace(q, tally=ONCE), reply,
                          time.perf_counter(), False)
        datas.append(None)  # a forwarded datagram: observed when its reply comes, not here
        queries.append(None)
        replies.append(None)
        batched.observe_batch(where, clients, datas, queries, replies, len(datas), time.perf_counter())
    assert sum(type(q.tally) is list for q in queries if q is not None) >= 4  # the cached ones went by their tallies
    batched.fold()
    alone.fold()
    got, want = batched._series[where], alone._series[where]
    assert got.keys() == want.keys()
    for zone in want:
        ends = DURATION, DURATION + len(DURATION_BUCKETS) + 1
        assert got[zone].counts[: ends[0]] == want[zone].counts[: ends[0]]
        assert got[zone].counts[ends[1] : SCRATCH] == want[zone].counts[ends[1] : SCRATCH]
        assert sum(got[zone].counts[ends[0] : ends[1]]) == sum(want[zone].counts[ends[0] : ends[1]])
        assert got[zone].sums[:2] == want[zone].sums[:2]
    assert batched.dropped == alone.dropped == 4  # the junk packet, each round


@pytest.mark.parametrize("balanced", [False, True], ids=["plain", "round_robin"])
def test_a_reused_query_object_always_comes_with_the_same_sizes(balanced):
    """What lets a cache hit's count skip comparing sizes (`Metrics.observe`): every time the resolver
    returns a query object again (its tally is not ONCE: exact and folded cache hits, missing names of
    one shape, rotated answers), the packet and the reply have the sizes they had the first time.
    Seeded mixed traffic: every compiled name and missing ones in random letter case and IDs, many
    types, with and without EDNS (sizes down to 512 bytes, which truncates, DO, a version-1 OPT, an
    option), RD and CD."""
    import random

    import dns.edns
    import dns.flags
    import dns.name

    from mcsdns.serve.loadbalance import RoundRobinResolver
    from mcsdns.serve.resolve import Resolver
    from testsupport.inprocess import build_table
    from testsupport.objects import headless_service

    many = [{"addresses": [f"10.31.{i // 200}.{i % 200 + 1}"], "hostname": f"m-{i}"} for i in range(80)]
    table = build_table([ROOT / "tests" / "fixtures" / "contract.yaml"],
                        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lb"}},
                         *headless_service("lb", "many", many)], zones=("clusterset.local",), synced=True)
    resolver = (RoundRobinResolver if balanced else Resolver)(table)
    names = sorted({dns.name.from_wire(key, 0)[0].to_text() for key in table.answers})
    assert len(names) > 15
    names += [f"{'x' * n}.{svc}.svc.{Z}" for n in (1, 2, 7, 30) for svc in ("svc1.testns", "many.lb", "nope.testns")]
    names += [Z, "local.", "example.org."]
    rng = random.Random(7)

    def spelled(name: str) -> str:
        return "".join(c.upper() if c.isalpha() and rng.random() < 0.3 else c for c in name)

    questions = []
    for name in names:
        for qtype in ("A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY", "PTR", "HTTPS"):
            edns = rng.choice([None, None, (0, 512), (0, 1232), (0, 4096), (0, 65535), (1, 1232), "option"])
            questions.append((name, qtype, edns, rng.random() < 0.5, rng.random() < 0.2, rng.random() < 0.3))
    first: dict[int, list] = {}
    for _ in range(12):
        rng.shuffle(questions)
        for name, qtype, edns, do, cd, folded in questions:
            if edns is None:
                message = dns.message.make_query(spelled(name) if folded else name, qtype, use_edns=False)
            elif edns == "option":
                message = dns.message.make_query(name, qtype, use_edns=0, options=[dns.edns.GenericOption(65001, b"x")])
            else:
                message = dns.message.make_query(spelled(name) if folded else name, qtype, use_edns=edns[0],
                                                 payload=edns[1], want_dnssec=do)
            if cd:
                message.flags |= dns.flags.CD
            message.id = rng.randrange(65536)
            wire = message.to_wire()
            reply, q = resolver.resolve(wire, False)
            if q is None or q.tally is ONCE or type(reply) is not bytes:
                continue
            seen = first.setdefault(id(q), [q, len(wire), len(reply), 0])  # (q kept: its id stays its own)
            assert seen[0] is q
            if seen[1:3] != [len(wire), len(reply)]:
                pytest.fail(f"{name} {qtype} {edns}: a reused query object came with {len(wire)}/{len(reply)} bytes,"
                            f" first with {seen[1]}/{seen[2]}")
            seen[3] += 1
    returned = sorted(seen[3] for seen in first.values())
    assert len(returned) > 200 and returned[len(returned) // 2] >= 5  # most objects came back again and again
    assert sum(returned) > 0.8 * 12 * len(questions)  # and most packets were answered with one of them


def test_hits_waiting_on_tallies_are_bounded_without_a_scrape():
    """Nobody may ever scrape: the tallies with hits waiting (each keeps its query object alive) are added
    to their series once FOLD_AT of them wait, so they cannot pile up over the process's life."""
    from testsupport.inprocess import build_resolver

    resolver = build_resolver(manifests=[ROOT / "tests" / "fixtures" / "contract.yaml"], zones=("clusterset.local",),
                              synced=True)
    where = Listener("dns://127.0.0.1:53", "udp", 1)
    registry = CollectorRegistry()
    metrics = Metrics(registry, Views(resolver.table, lambda: {}, lambda: []))
    for i in range(FOLD_AT + 10):
        wire = _query(f"n{i}.nope.svc." + Z)
        for _ in range(3):  # a name asked again becomes a cache hit with its own tally
            reply, q = resolver.resolve(wire, False)
            metrics.observe(where, None, wire, q, reply, 0.0, False)
    assert len(metrics._tallies) < FOLD_AT
    labels = {"server": "dns://127.0.0.1:53", "zone": Z, "view": ""}
    assert registry.get_sample_value("coredns_dns_responses_total",
                                     {**labels, "rcode": "NXDOMAIN", "plugin": "kubernetes"}) == 3 * (FOLD_AT + 10)
