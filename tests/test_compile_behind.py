"""The server answers from the sync on, before every service is compiled (no sockets).

A server's table (`Table.defer`, as `App` sets it) compiles at the sync only what it must and leaves
the other services `behind`: `compile_behind` compiles them between queries, and a question that
reaches one of them first compiles it (`Table.catch_up`). These tests hold every reply given while
services are behind to the reply of a table compiled whole at the sync, byte for byte, in any order
of questions and slices, through changes; and the table left when all is compiled to that table.
The last one asks a real server over UDP and TCP while it compiles 50,000 imports.
"""

from __future__ import annotations

import random

import dns.message
import dns.rcode

import pytest

from mcsdns.serve.resolve import Resolver
from testsupport.inprocess import build_resolver
from testsupport.mcsdnsserver import samples
from test_resolve_lanes import CHILD_TYPES, absent_children, contract_questions, edns_query, mixed_case, plain_query
from test_zone import FIXTURES

MANIFESTS = [FIXTURES / "contract.yaml"]
OPTIONS = dict(namespaces=frozenset({"testns"}), ttl=5)


def pair() -> tuple[Resolver, Resolver]:
    """(a table compiled whole at the sync, a deferred one with every service behind), one SOA serial."""
    whole = build_resolver(MANIFESTS, **OPTIONS)
    deferred = build_resolver(MANIFESTS, defer=True, **OPTIONS)
    deferred.table.set_serial(whole.table.serial)
    return whole, deferred


def questions(table) -> list[tuple[str, int]]:
    """The contract's questions, names one label below each service (the flood's shape), services that
    do not exist, per-endpoint names, port names: every name the deferred table could get wrong."""
    names = [name for name, _ in contract_questions()] + absent_children(table)
    return [(name, qtype) for name in dict.fromkeys(names) for qtype in (1, 28, 33, 6, 16, 255)]


def test_the_sync_leaves_services_behind_and_the_lanes_wait():
    whole, deferred = pair()
    table = deferred.table
    assert table.synced and not table.settled
    assert table.behind == set(table.store.imports) > set(whole.table.owned), "nothing compiled at the sync"
    assert not table.owned and not table.children
    generation = table.generation
    while table.compile_behind(0):  # one service per slice
        assert table.behind and not table.settled
    assert table.settled and table.generation == generation + 1  # the resolver then takes its lanes again
    assert table.answers == whole.table.answers
    assert table.owned == whole.table.owned and table.children == whole.table.children


def test_every_reply_while_services_are_behind_is_the_whole_tables():
    """Questions in random order and letter case, plain and with EDNS, with slices compiled between
    them: each reply is byte for byte the one the table compiled whole gives."""
    for seed in range(5):
        rng = random.Random(seed)
        whole, deferred = pair()
        asked = questions(whole.table)
        rng.shuffle(asked)
        caught = 0
        for i, (name, qtype) in enumerate(asked):
            spelled = mixed_case(name, rng) if rng.random() < 0.5 else name
            qid = rng.randrange(65536)
            for packet in (plain_query(spelled, qtype, qid), edns_query(spelled, qtype)):
                behind = len(deferred.table.behind)
                assert deferred.handle(packet) == Resolver(whole.table).handle(packet), (seed, spelled, qtype)
                caught += behind - len(deferred.table.behind)
            if rng.random() < 0.02:
                deferred.table.compile_behind(0)
        assert caught, "no question caught a service up: the test asked nothing behind"
        while deferred.table.compile_behind(0):
            pass
        for name, qtype in asked:  # and after: the lanes are back
            packet = plain_query(name, qtype)
            assert deferred.handle(packet) == Resolver(whole.table).handle(packet), (name, qtype)


def test_a_flood_of_absent_children_catches_each_service_up_once():
    """Names one label below a behind service are NXDOMAIN from the first (CoreDNS's answer), and the
    first compiles the service: the rest take the compiled indexes."""
    whole, deferred = pair()
    table = deferred.table
    for name in absent_children(whole.table):
        for qtype in CHILD_TYPES:
            packet = plain_query(name, qtype)
            assert deferred.handle(packet) == Resolver(whole.table).handle(packet), (name, qtype)
    assert not table.behind  # every service had a name asked: all caught up, none compiled by a slice
    assert table.owned == whole.table.owned


def test_changes_while_services_are_behind():
    """A service deleted, one changed and one added before their turn: compiled by the change, gone
    from `behind`, and every reply the whole table's after the same changes."""
    whole, deferred = pair()
    behind = sorted(deferred.table.behind)
    assert len(behind) >= 3
    gone, changed = behind[0], behind[1]
    for r in (whole, deferred):
        store = r.table.store
        store.delete("ServiceImport", *gone)
        imp = store.imports[changed]
        store.apply(imp.__class__(imp.namespace, imp.name, imp.headless, ("10.99.0.1",), imp.ports))
        r.table.set_serial(12345)
    assert gone not in deferred.table.behind and changed not in deferred.table.behind
    assert changed in deferred.table.owned and gone not in deferred.table.owned
    for name, qtype in questions(whole.table) + [(f"{gone[1]}.{gone[0]}.svc.clusterset.local", 1)]:
        packet = plain_query(name, qtype)
        assert deferred.handle(packet) == Resolver(whole.table).handle(packet), (name, qtype)
    reply = dns.message.from_wire(deferred.handle(plain_query(f"x.{gone[1]}.{gone[0]}.svc.clusterset.local", 1)))
    assert reply.rcode() == dns.rcode.NXDOMAIN
    while deferred.table.compile_behind(0):
        pass
    assert deferred.table.owned.keys() == whole.table.owned.keys()


def test_the_sync_tells_its_owner_what_it_left():
    """`on_behind` is called once, at the sync, when services are left (the App then compiles them: at
    start-up once listening, or at once for a sync that comes after it), and not when nothing is."""
    from test_resolve_lanes import objects_of_contract
    from testsupport.inprocess import KINDS, build_table

    calls = []
    table = build_table(objects=objects_of_contract(), defer=True, **OPTIONS)
    table.on_behind = lambda: calls.append(set(table.behind))
    assert not table.synced and not calls
    for kind in KINDS:
        table.store.mark_synced(kind)
    assert calls == [set(table.store.imports)] and table.behind
    empty = build_table(defer=True, **OPTIONS)
    empty.on_behind = lambda: calls.append("empty")
    for kind in KINDS:
        empty.store.mark_synced(kind)
    assert empty.settled and calls[-1] != "empty"


def test_reverse_zones_compile_everything_at_the_sync():
    """--reverse-cidr: PTR questions name an address, not a service to catch up: nothing is deferred."""
    r = build_resolver(MANIFESTS, defer=True, reverse_cidrs=("10.0.0.0/8",), **OPTIONS)
    assert r.table.settled and r.table.owned


def metrics(server, *names: str) -> list[float]:
    """Samples' values from one scrape of the server's /metrics."""
    status, text = server.http("/metrics")
    assert status == 200
    return [next(value for got, value in samples(text, name) if not got) for name in names]


def metric(server, name: str) -> float:
    """One sample's value from the server's /metrics."""
    return metrics(server, name)[0]


@pytest.mark.slow
def test_a_server_answers_over_sockets_while_it_compiles(tmp_path):
    """A real server from a manifests file of 50,000 imports: questions asked as soon as it answers, while
    most services are not compiled yet (its metrics say so), get exactly the bytes the same questions get
    once everything is compiled; the last import's address among them. (At 20,000 the compile after the
    sync took 0.66 s on an idle machine, which the start-up probe and the 24 exchanges missed 3 times in 4.)"""
    from benchmarks.dataset import Spec, headless_name, svc_name, vip4, write_manifests
    from testsupport.mcsdnsserver import McsdnsServer, exchange
    from testsupport.polling import eventually

    spec = Spec(imports=50000, headless=(10, 100, 1000))
    manifests = write_manifests(spec, tmp_path / "set.json")
    last = spec.imports - 1
    names = [(svc_name(spec, last), t) for t in ("A", "AAAA", "SRV", "TXT")]
    names += [(f"_http._tcp.{svc_name(spec, last - 1)}", "SRV"), (f"x.{svc_name(spec, last - 2)}", "A"),
              (f"pod-0.east.{svc_name(spec, last - 3)}", "A"), (svc_name(spec, 123), "A"),
              (svc_name(spec, spec.imports + 5), "A"), (f"pod-5.east.{headless_name(100)}", "A"),
              (headless_name(1000), "A"), (headless_name(10), "SRV")]
    packets = []
    for i, (name, qtype) in enumerate(names):
        q = dns.message.make_query(name, qtype, use_edns=0, payload=1232)
        q.id = i
        packets.append(q.to_wire())
    server = McsdnsServer("--manifests", str(manifests))
    server.start(timeout=180)
    try:
        during = [exchange(server, packet, tcp) for packet in packets for tcp in (False, True)]
        # Services compile in the manifests' order, these last; a question compiles its own first. Fewer
        # than all but the 4 asked about compiled by now: they were all behind when asked.
        total = spec.imports + len(spec.headless)
        compiled, behind = metrics(server, "mcsdns_compiled_services", "mcsdns_services_behind")
        assert compiled <= total - 5, f"{compiled} of {total} services compiled already: the questions missed the window"
        assert compiled + behind == total  # one scrape: each service is either compiled or behind
        first = dns.message.from_wire(during[0])
        assert first.rcode() == dns.rcode.NOERROR and vip4(last) in first.answer[0].to_text()
        assert dns.message.from_wire(during[2 * 5]).rcode() == dns.rcode.NXDOMAIN  # a child of a service: none
        assert dns.message.from_wire(during[2 * 8]).rcode() == dns.rcode.NXDOMAIN  # no such import
        eventually(lambda: metric(server, "mcsdns_compiled_services") == total or None, timeout=60)
        assert metric(server, "mcsdns_services_behind") == 0
        after = [exchange(server, packet, tcp) for packet in packets for tcp in (False, True)]
        for i, (a, b) in enumerate(zip(during, after)):
            assert a == b, (names[i // 2], "tcp" if i % 2 else "udp")
    finally:
        server.stop()
