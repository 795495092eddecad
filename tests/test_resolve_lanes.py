"""The resolver's short cuts give exactly the replies of its full path (no sockets).

Three short cuts keep queries that no packet cache can help cheap (issue: off-cache speed):
the compiled lane (a plain query whose lower-cased question is a compiled key skips the parse),
the case-folded packet cache (every letter case of a plain query shares one entry), and
`Table.absent` (names that cannot exist, told from their shape, get the shared NXDOMAIN body
without the zone logic). Each is checked here against the path it short-cuts.
"""

from __future__ import annotations

import random
import struct

import dns.message
import dns.rcode
import pytest

from testsupport.cases import MAIN
from mcsdns.zone import compiler
from mcsdns.objects import InvalidObject, convert
from mcsdns.serve.resolve import Forward, Resolver
from mcsdns.zone.wire import split_labels
from testsupport.inprocess import build_resolver
from test_zone import FIXTURES, build

QTYPES = (1, 28, 33, 16, 2, 6, 12, 15, 65, 99)  # A AAAA SRV TXT NS SOA PTR MX HTTPS SPF


def wire_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\x00"


def plain_query(name: str, qtype: int, qid: int = 0x1234, flags: int = 0x0100) -> bytes:
    """One question, no other record: what stub resolvers and dnsperf send."""
    return struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 0) + wire_name(name) + struct.pack(">HH", qtype, 1)


def mixed_case(name: str, rng: random.Random) -> str:
    return "".join(ch.upper() if rng.random() < 0.5 else ch for ch in name)


def full_path(resolver: Resolver, packet: bytes) -> bytes:
    """The reply by the full path: a trailing byte after the question keeps the packet out of the
    compiled lane (its lower-cased tail is no compiled key) and out of every cache, while the reply
    (header, the question up to its end, the answer) is the same one the packet must get."""
    return Resolver(resolver.table).handle(packet + b"\x00")


def assert_plain_queries_as_full_path(r: Resolver, resolver: Resolver, names: list[str], qtypes) -> None:
    """Every plain query of `names` x `qtypes` gets from `r` the full path's reply."""
    for name in names:
        for qtype in qtypes:
            packet = plain_query(name, qtype)
            assert r.handle(packet) == full_path(resolver, packet), (name, qtype)


@pytest.fixture(scope="module")
def resolver() -> Resolver:
    return build()


def contract_questions() -> list[tuple[str, int]]:
    seen = dict.fromkeys((c.qname, q) for c in MAIN for q in (1, 28, 33))
    return list(seen)


def test_compiled_lane_and_folded_cache_match_the_full_path(resolver):
    """Every contract name, in several letter cases, with RD and CD in every combination: the
    first reply (compiled lane or full path), a repeat (a cache hit) and the same name in another
    case (a folded-cache hit, or a miss where the reply spells the zone) are byte for byte the
    replies of the full path, question case included."""
    rng = random.Random(7)
    fresh = Resolver(resolver.table)
    lanes_hit = 0
    for name, qtype in contract_questions():
        for flags in (0x0000, 0x0100, 0x0010, 0x0110, 0x0130):
            for _ in range(3):
                packet = plain_query(mixed_case(name, rng), qtype, rng.randrange(65536), flags)
                expected = full_path(resolver, packet)
                assert fresh.handle(packet) == expected
                assert fresh.handle(packet) == expected  # the cached reply
                if resolver.table.answers.get(packet[12:].lower()) is not None:
                    lanes_hit += 1
    assert lanes_hit > 100  # the compiled lane was really taken


def test_folded_cache_keeps_the_zone_spelling_of_srv_targets(resolver):
    """An SRV target spells the zone as the query does: a new spelling of the zone gets its own
    reply, never the one cached for another spelling."""
    name = "hdls1.testns.svc.clusterset.local"
    r = Resolver(resolver.table)
    first = r.handle(plain_query(name.replace("hdls1", "HDLS1"), 33))
    other = plain_query(name.replace("clusterset", "ClusterSet"), 33)
    second = r.handle(other)
    assert second == full_path(resolver, other)
    targets = [rd.target.to_text() for rrset in dns.message.from_wire(second).answer for rd in rrset]
    assert targets and all("ClusterSet.local." in t for t in targets)
    assert first != second


def test_every_lane_returns_the_query_it_answered_and_keeps_none(resolver):
    """`resolve` returns, beside the reply, the query the observers (metrics, query log) label it
    by, from every lane: compiled, packet cache, folded cache, full parse, absent name, forward,
    and None for a packet it could not read. Once it has returned, no query is left on the resolver
    outside its caches (the transport used to read one left behind)."""
    name = "svc1.testns.svc.clusterset.local"
    r = Resolver(resolver.table, forwarding=True)
    edns = dns.message.make_query(name, "AAAA", use_edns=0, want_dnssec=True).to_wire()
    packets = [plain_query(name, 1), plain_query(name, 1, qid=7),  # compiled lane, then the packet cache
               plain_query(name.upper(), 33), plain_query(name.upper(), 33, qid=9),  # folded cache
               edns, plain_query("a1b2c3." + name, 1), plain_query("example.org", 1)]  # parse, absent, forward
    for packet in packets:
        reply, q = r.resolve(packet)
        want = dns.message.from_wire(packet)
        assert q is not None and (q.qtype, q.edns) == (want.question[0].rdtype, want.edns >= 0), packet
        assert q.lname == wire_name(want.question[0].name.to_text().lower())
        if isinstance(reply, Forward):
            assert q.lname == wire_name("example.org") and reply.query is q  # the very query beside it
        else:
            assert reply == full_path(resolver, packet), packet
        assert not [k for k, v in vars(r).items() if v is q], "a query left on the resolver"
    garbage = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07"  # a question that ends too soon
    reply, q = r.resolve(garbage)
    assert q is None and dns.message.from_wire(reply, question_only=True).rcode() == dns.rcode.FORMERR
    assert r.resolve(b"\x12\x34") == (None, None)  # no header: dropped


def test_absent_names_get_what_the_zone_logic_says(resolver):
    """`Table.absent` says yes only where `compiler.answer` gives NXDOMAIN for every type but SOA,
    and says yes for the shapes a random-subdomain flood uses."""
    table = resolver.table
    zwire = table.zones[0]
    rng = random.Random(11)
    services = [c.qname.rstrip(".") for c in MAIN if c.qname.count(".") == 5 and ".svc." in c.qname]
    names = ["clusterset.local", "svc.clusterset.local", "pod.clusterset.local", "dns-version.clusterset.local",
             "ns.dns.clusterset.local", "x.ns.dns.clusterset.local", "testns.svc.clusterset.local",
             "nons.svc.clusterset.local", "a.b.pod.clusterset.local", "x.clusterset.local",
             "a.b.c.d.e.f.svc.clusterset.local", "nosvc.testns.svc.clusterset.local",
             "x.nosvc.testns.svc.clusterset.local", "a.b.nosvc.testns.svc.clusterset.local",
             "svc1.nons.svc.clusterset.local"]
    names += [c.qname.rstrip(".") for c in MAIN]
    for svc in services:
        names += [f"{rng.getrandbits(32):x}.{svc}", f"_{rng.getrandbits(20):x}.{svc}", f"x._tcp.{svc}",
                  f"_http._tcp.{svc}", f"a.b.c.{svc}", f"pod-0.cluster1.{svc}", f"x.y.{svc}"]
    decided = 0
    for name in names:
        lname = wire_name(name.lower())
        if not lname.endswith(zwire):
            continue
        labels = split_labels(lname[: len(lname) - len(zwire)])
        if not table.absent(lname, len(zwire)):
            continue
        decided += 1
        for qtype in QTYPES:
            if qtype == compiler.SOA:
                continue
            ans = compiler.answer(labels, qtype, table, table.ttl, table.config.ns_addresses)
            assert ans == compiler.NAME_ERROR, (name, qtype, ans)
    assert decided >= len(services) * 3  # random hosts, bad ports' shapes and deep names, at least
    # And over real packets: the same replies as the full path, SOA (NODATA) included.
    assert_plain_queries_as_full_path(Resolver(table), resolver, names, QTYPES)


@pytest.mark.parametrize("labels", [{"multicluster.kubernetes.io/source-cluster": ""}, {}])
def test_no_slice_has_an_empty_cluster_id(labels):
    """CoreDNS reads `<host>.<svc>.<ns>.svc.Z` as an endpoint of cluster "": `absent` calls every such
    name absent because no stored slice has that cluster id (an empty label is refused or read as
    missing, a missing one is None)."""
    labels = {"multicluster.kubernetes.io/service-name": "s", **labels}
    raw = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
           "metadata": {"name": "s-1", "namespace": "ns", "labels": labels},
           "endpoints": [{"addresses": ["10.0.0.1"], "hostname": "h"}], "ports": []}
    try:
        sl = convert(raw)
    except InvalidObject:
        return
    assert sl.cluster != ""


def test_no_compiled_key_has_a_letter_in_its_type_or_class(resolver):
    """What makes the compiled lane's proof hold (resolve._PLAIN): lower() leaves a compiled key's
    type and class alone, so a packet whose lower-cased question is a key asks exactly that."""
    for key in resolver.table.answers:
        assert key[-4:].lower() == key[-4:] and key[-4:].upper() == key[-4:], key


def edns_query(name: str, qtype: int, payload: int = 4096, do: bool = False, version: int = 0, options: bytes = b"",
               qid: int = 0x1234, flags: int = 0x0100, qclass: int = 1) -> bytes:
    """One question and an OPT record after it, as `dnsperf -e` (no options), dig (a cookie) or glibc send."""
    opt = b"\x00" + struct.pack(">HHBBHH", 41, payload, 0, version, 0x8000 if do else 0, len(options)) + options
    return (struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 1) + wire_name(name) + struct.pack(">HH", qtype, qclass)
            + opt)


OPTS = [dict(), dict(payload=512), dict(payload=1232, do=True), dict(payload=100), dict(payload=65535, do=True),
        dict(version=1), dict(options=b"\x00\x0a\x00\x08" + b"cookie!!")]  # small, DO, BADVERS, a cookie


def test_edns_queries_share_the_folded_cache_and_the_lane(resolver):
    """Queries with an OPT record: in any letter case, with any size, DO bit, version or options,
    RD and CD in every combination, the first reply (the EDNS lane or the full path), a repeat
    (cache hit) and other letter cases (folded-cache hits) are the full path's, byte for byte."""
    rng = random.Random(5)
    fresh = Resolver(resolver.table)
    folded_hits = 0
    for name, qtype in contract_questions():
        for opt in OPTS:
            for flags in (0x0000, 0x0100, 0x0110):
                for _ in range(2):
                    packet = edns_query(mixed_case(name, rng), qtype, qid=rng.randrange(65536), flags=flags, **opt)
                    expected = full_path(resolver, packet)
                    before = len(fresh._folded)
                    assert fresh.handle(packet) == expected, (name, qtype, opt)
                    assert fresh.handle(packet) == expected
                    folded_hits += len(fresh._folded) == before
    assert fresh._folded and folded_hits > 100  # EDNS queries were folded and hit


def test_srv_replies_fold_across_zone_spellings(resolver):
    """An SRV reply spells the zone as the query does: one folded entry serves every spelling of
    name and zone, with and without EDNS, truncated (512 bytes) or not, each byte for byte the
    full path's, and its targets spell the zone as that query did."""
    rng = random.Random(9)
    srv = [name for name, qtype in contract_questions() if qtype == 33]
    r = Resolver(resolver.table)
    truncated = hits = 0
    for name in srv:
        for make in (lambda n: plain_query(n, 33, rng.randrange(65536)),
                     lambda n: edns_query(n, 33, qid=rng.randrange(65536)),
                     lambda n: edns_query(n, 33, payload=512, do=True)):
            for _ in range(4):
                spelled = mixed_case(name, rng)
                packet = make(spelled)
                before = len(r._folded)
                reply = r.handle(packet)
                hits += len(r._folded) == before
                assert reply == full_path(resolver, packet), spelled
                truncated += bool(reply[2] & 0x02)
                message = dns.message.from_wire(reply)
                zone = spelled.rstrip(".").split(".")[-2:]
                for rrset in message.answer:
                    for rd in rrset:
                        if rd.rdtype == 33:
                            assert rd.target.to_text().endswith(".".join(zone) + "."), (spelled, rd)
    srv_entries = [entry for entry in r._folded.values() if entry[2] is not None]
    assert srv_entries and hits > len(srv), "SRV replies were not folded across spellings"
    assert truncated  # a reply cut to 512 bytes keeps only the zone spellings of the records it kept


def absent_children(table) -> list[str]:
    """Names one label below each compiled service (the random-subdomain flood's shape), in odd labels
    too, and services that are not compiled: a missing one in the same namespace, the same one in
    another namespace (exposed or not, existing or not), and the compiled service itself."""
    rng = random.Random(3)
    out = []
    for parent in table.children:
        name = ".".join(split_labels(parent))
        service, namespace, rest = name.split(".", 2)
        out += [f"{rng.getrandbits(40):x}.{name}", f"_http.{name}", f"*.{name}", f"{'a' * 63}.{name}",
                f"pod-0.{name}", f"Z{rng.getrandbits(20):x}.{name}", name,
                f"x{rng.getrandbits(40):x}.{namespace}.{rest}", f"{service}.{service}.{rest}", f"{service}.nons.{rest}",
                f"{service}.{'b' * 63}.{rest}", f"_{service}.{namespace}.{rest}"]
    zone = ".".join(split_labels(next(iter(table.children)))).split(".", 3)[3]
    hidden = [f"{name}.{namespace}.svc.{zone}" for namespace, name in table.store.imports if (namespace, name) not in table.owned]
    return out + hidden + [f"x.{name}" for name in hidden]


def absent_services(table) -> list[str]:
    """Of `absent_children`, the names the raw-question lane must answer: not a compiled service."""
    compiled = {".".join(split_labels(parent)) for parent in table.children}
    return [name for name in absent_children(table)
            if name.lower() not in compiled and (name.lower().split(".", 1)[1] in compiled or name.count(".") == 4)]


CHILD_TYPES = QTYPES + (252, 251, 255, 0x0041, 0x4100)  # AXFR IXFR ANY, and types with a letter byte


def test_absent_child_lane_matches_the_full_path(resolver):
    """A name one label below a compiled service: every type (SOA: NODATA; AXFR/IXFR: REFUSED),
    classes IN, CH and ANY, plain and with EDNS (sizes, DO, BADVERS, options), RD/CD, any letter
    case: the reply is the full path's, byte for byte, and the lane was taken for most."""
    table = resolver.table
    assert table.children, "no compiled service"
    rng = random.Random(4)
    r = Resolver(table)
    for name in absent_children(table):
        for qtype in CHILD_TYPES:
            spelled = mixed_case(name, rng) if rng.random() < 0.5 else name
            packets = [plain_query(spelled, qtype, rng.randrange(65536), rng.choice((0, 0x0100, 0x0110)))]
            packets += [edns_query(spelled, qtype, **rng.choice(OPTS))]
            packets += [edns_query(spelled, qtype, qclass=rng.choice((3, 255)))]
            for packet in packets:
                assert r.handle(packet) == full_path(resolver, packet), (spelled, qtype, packet)
    for name in absent_services(table):
        reply, q = Resolver(table).resolve(plain_query(name, 1))
        assert q.lname == wire_name(name.lower()) and q.qtype == 1
        assert dns.message.from_wire(reply).rcode() == dns.rcode.NXDOMAIN


def test_absent_child_lane_skips_the_parse(resolver, monkeypatch):
    """The lane is really taken: child names of compiled services and names of services not
    compiled, plain or with EDNS, are answered without `parse_query` (which the full path runs for
    every packet)."""
    import mcsdns.serve.resolve as resolve_module

    calls = []
    real = resolve_module.parse_query
    monkeypatch.setattr(resolve_module, "parse_query", lambda data: calls.append(data) or real(data))
    names = absent_services(resolver.table)
    assert len(names) > 10 * len(resolver.table.children)
    for name in names:
        Resolver(resolver.table).resolve(plain_query(name, 1))
        Resolver(resolver.table).resolve(edns_query(name, 28, do=True))
    assert not calls, calls[:3]
    Resolver(resolver.table).resolve(plain_query("a.b." + name, 1))  # two labels below: the full path
    assert calls


LONG_ZONE = f"{'z' * 60}.{'y' * 60}.{'x' * 50}.example"  # 182 bytes: a 63-byte label below a service is too long


@pytest.mark.parametrize("zones,reverse", [(("clusterset.local", "example.org"), ()),
                                           (("clusterset.local", "svc.clusterset.local"), ()),
                                           (("clusterset.local",), ("10.0.0.0/8",)),
                                           (("clusterset.local", LONG_ZONE), ())])
def test_absent_child_lane_with_other_zones(zones, reverse):
    """Several zones, a zone nested in another (`zone_of` picks the inner one: the outer one has no
    lane), reverse zones, a zone so long that some child names pass 255 bytes (FORMERR): every
    child name still gets the full path's reply."""
    resolver = build_resolver([FIXTURES / "contract.yaml"], namespaces=frozenset({"testns"}), ttl=5, zones=zones,
                              reverse_cidrs=reverse)
    table = resolver.table
    if len(zones) == 2 and zones[1].endswith(zones[0]):
        assert not any(p.endswith(wire_name(zones[0])) and not p.endswith(wire_name(zones[1]))
                       for p in table.children)
    else:
        assert {p[-len(wire_name(z)):] for p in table.children for z in zones if p.endswith(wire_name(z))}
    r = Resolver(table)
    names = absent_children(table)
    names += [n.replace("clusterset.local", z) for n in absent_children(build().table) for z in zones]
    assert_plain_queries_as_full_path(r, resolver, names, (1, 28, 33, 6, 16))


def test_absent_child_lane_under_dns_sd():
    """--dns-sd: names below a service that DNS-SD browsing answers get the zone logic's reply."""
    from mcsdns.zone.dnssd import DnsSd

    resolver = build()
    table = resolver.table
    table.dnssd = DnsSd(table)
    table.dnssd.full()
    r = Resolver(table)
    names = absent_children(table) + [".".join(split_labels(k[:-4])) for k in table.answers]
    assert_plain_queries_as_full_path(r, resolver, names, (1, 12, 33, 16, 6))


def test_children_index_follows_the_services():
    """`Table.children` holds exactly the compiled services' names, through changes and deletions."""
    resolver = build()
    table = resolver.table

    def expected() -> set[bytes]:
        return {wire_name(f"{svc}.{ns}.svc.clusterset.local") for ns, svc in table.owned}

    assert set(table.children) == expected() and table.children
    for namespace, name in list(table.owned)[:3]:
        table.store.delete("ServiceImport", namespace, name)
        assert (namespace, name) not in table.owned
        assert set(table.children) == expected()
    assert table.children


def objects_of_contract() -> list[dict]:
    import yaml

    return [doc for doc in yaml.safe_load_all((FIXTURES / "contract.yaml").read_text()) if doc]


def test_lanes_before_sync_give_the_full_path():
    """Before the sources sync nothing is compiled and NXDOMAIN is SERVFAIL: no lane answers."""
    resolver = build_resolver(objects=objects_of_contract(), zones=("clusterset.local",), namespaces=frozenset({"testns"}),
                              ttl=5)
    table = resolver.table
    assert not table.synced
    r = Resolver(table)
    for name in absent_services(build().table):
        for packet in (plain_query(name, 1), edns_query(name, 1)):
            assert r.handle(packet) == full_path(resolver, packet)
            assert dns.message.from_wire(r.handle(packet)).rcode() == dns.rcode.SERVFAIL


def test_names_that_cannot_exist_are_cached_on_second_sight_only(resolver):
    """A flood of unique missing names fills no packet cache; a missing name asked again (an NXDOMAIN
    mix, search-path expansions) is cached from its second query on; every reply is the full path's."""
    table = resolver.table
    r = Resolver(table)
    names = absent_services(table) + [f"a.b.c.{name}" for name in absent_services(table)]  # lane and `absent`
    for name in names:
        packet = plain_query(name, 1)
        assert r.handle(packet) == full_path(resolver, packet)
    assert not r._packets and not r._folded
    rng = random.Random(2)
    for name in names:
        spelled = mixed_case(name, rng)
        for make in (lambda i: plain_query(name, 1, i), lambda i: edns_query(spelled, 28, qid=i)):
            packets = [make(qid) for qid in (1, 2, 3)]
            assert [r.handle(packet) for packet in packets] == [full_path(resolver, packet) for packet in packets]
    assert len(r._packets) + len(r._folded) >= len(names)


def test_a_flood_of_unique_missing_names_caches_nothing_and_its_sightings_stay_bounded(resolver, monkeypatch):
    """More unique missing names than the sightings table has slots: none enters a cache and the
    table keeps its size; a name asked twice in a row is cached at its second sight all the same, a
    table change forgets the sightings, and every reply is the full path's."""
    import mcsdns.serve.resolve as resolve_module

    monkeypatch.setattr(resolve_module, "SIGHTED_SLOTS", 64)
    table = resolver.table
    r = Resolver(table)
    services = sorted(".".join(split_labels(parent)) for parent in table.children)  # a random-subdomain flood
    flood = [f"x{i}.{services[i % len(services)]}" for i in range(1000)]
    for i, name in enumerate(flood):
        packet = plain_query(name, 1, qid=i)
        assert r.handle(packet) == full_path(resolver, packet)
    assert not r._packets and not r._folded
    assert len(r._sighted) == 64
    again = plain_query(flood[0], 1, qid=7)
    r.handle(again)
    assert not r._packets  # seen once since the flood
    assert r.handle(again) == full_path(resolver, again)
    assert again[2:] in r._packets  # its second sight
    other = plain_query(flood[1], 1, qid=7)
    r.handle(other)
    r.flush()
    assert r.handle(other) == full_path(resolver, other)
    assert other[2:] not in r._packets  # the sighting before the flush is forgotten


def test_missing_names_that_share_sightings_slots_asked_in_turn_are_all_cached(resolver, monkeypatch):
    """Three names whose keys share a pair of slots in the sightings table, asked in turn (a query
    file played in a loop): each reaches its second sight and is cached, and every reply is the full
    path's. When a note always replaced the last in one slot, names on that slot wiped each other's
    notes for good and were never cached (16% of the benchmark's nxdomain mix)."""
    import mcsdns.serve.resolve as resolve_module

    monkeypatch.setattr(resolve_module, "SIGHTED_SLOTS", 64)
    table = resolver.table
    services = sorted(".".join(split_labels(parent)) for parent in table.children)
    by_pair: dict[int, list[bytes]] = {}
    for i in range(5000):  # 32 pairs: three names on one turn up within the first hundred or so
        packet = plain_query(f"gone{i}.{services[i % len(services)]}", 1)
        names = by_pair.setdefault(hash(packet[2:]) & 62, [])
        names.append(packet)
        if len(names) == 3:
            break
    assert len(names) == 3
    r = Resolver(table)
    for turn in range(64):  # plenty: until all are cached, each turn caches one with odds of at least 1/2
        for packet in names:
            assert r.handle(packet) == full_path(resolver, packet)
    assert all(packet[2:] in r._packets for packet in names)
    assert not any(r._sighted)  # each note was taken back when its name was cached


def test_missing_names_of_one_shape_share_one_prebuilt_reply(resolver, monkeypatch):
    """A random-subdomain flood builds nothing per query: unique names below a service, in any letter
    case, with one label length, the same flags and OPT record, make one `_absent` entry and share
    one query object, and every reply is still the full path's, byte for byte (its own ID and
    question). A new OPT size per packet (a new shape each) keeps the entries bounded."""
    import mcsdns.serve.resolve as resolve_module

    monkeypatch.setattr(resolve_module, "ABSENT_SHAPES", 16)
    table = resolver.table
    service = sorted(".".join(split_labels(parent)) for parent in table.children)[0]
    rng = random.Random(5)
    r = Resolver(table)
    for make in (lambda name, i: plain_query(name, 1, i), lambda name, i: edns_query(name, 28, do=True, qid=i)):
        queries = set()
        for i in range(200):
            name = "".join(rng.choice("abcdefXYZ0123") for _ in range(12)) + "." + mixed_case(service, rng)
            packet = make(name, i)
            reply, q = r.resolve(packet)
            assert reply == full_path(resolver, packet), name
            queries.add(id(q))
        assert not r._packets and not r._folded  # (each name seen once)
        assert len(queries) == 1
    assert len(r._absent) == 2
    r.flush()
    assert not r._absent
    for size in range(1232, 1332):
        packet = edns_query(f"flood{size}." + service, 1, payload=size)
        assert r.handle(packet) == full_path(resolver, packet)
        assert len(r._absent) <= 16


def test_mutated_packets_get_the_replies_of_the_path_without_lanes(resolver, monkeypatch):
    """Bytes flipped, cut or added anywhere in plain and EDNS queries for compiled, missing and SRV
    names: each reply (and a repeat, and the packet in another letter case) is the one the resolver
    gives with its raw-question lanes and case-folded cache switched off (no packet shape matches
    `_PLAIN` or `_ONE_OPT` there): the parse decides, as before any lane existed."""
    import mcsdns.serve.resolve as resolve_module

    table = resolver.table
    rng = random.Random(13)
    names = [name for name, _ in contract_questions()][:20] + absent_services(table)[:40]
    seeds = []
    for name in names:
        for qtype in (1, 28, 33, 6, 16):
            seeds += [plain_query(mixed_case(name, rng), qtype), edns_query(mixed_case(name, rng), qtype, **rng.choice(OPTS))]

    def mutate(packet: bytes) -> bytes:
        data = bytearray(packet)
        for _ in range(rng.randint(1, 3)):
            if len(data) < 4:
                break
            roll = rng.random()
            at = rng.randrange(2, len(data))
            if roll < 0.5:
                data[at] = rng.choice((0, 1, 0x29, 0x41, 0x5A, 0x61, 0x80, 0xC0, 0xFF, rng.randrange(256)))
            elif roll < 0.75:
                del data[at:]
            else:
                data[at:at] = bytes([rng.randrange(256)])
        return bytes(data)

    packets = [mutate(seed) for seed in seeds for _ in range(4)] + seeds
    fast = Resolver(table)
    got = [[fast.handle(p), fast.handle(p), fast.handle(p.swapcase())] for p in packets]
    monkeypatch.setattr(resolve_module, "_PLAIN", b"no packet has these counts")
    monkeypatch.setattr(resolve_module, "_ONE_OPT", b"no packet has these counts")
    slow = Resolver(table)
    for packet, replies in zip(packets, got):
        assert replies == [slow.handle(packet), slow.handle(packet), slow.handle(packet.swapcase())], packet
