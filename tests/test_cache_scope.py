"""A change drops the cached replies it made wrong, and only those (no sockets).

The resolver keeps its packet caches across a table generation, dropping the answers of the
services the change touched and every reply that is not one service's answer (`Resolver.catch_up`).
Each test here changes objects under a resolver whose caches hold replies to every question of
the contract (exact, letter-cased, with EDNS), then checks every reply against a resolver that has
cached nothing: a stale reply anywhere fails it.
"""

from __future__ import annotations

import copy
import random

import dns.message
import pytest

from mcsdns.objects import convert
from mcsdns.serve.loadbalance import RoundRobinResolver
from mcsdns.serve.resolve import Resolver
from mcsdns.zone.table import CHANGE_LOG
from testsupport.cases import MAIN
from testsupport.inprocess import build_resolver
from test_resolve_lanes import edns_query, mixed_case, objects_of_contract, plain_query

QTYPES = (1, 28, 33, 6, 16)  # A AAAA SRV SOA TXT
EXTRA = ("nothere.testns.svc.clusterset.local", "svcnew.testns.svc.clusterset.local",
         "ep1a.cluster1.svc1.testns.svc.clusterset.local", "ep9.cluster1.svc1.testns.svc.clusterset.local",
         "testns.svc.clusterset.local", "clusterset.local")


def packets() -> list[bytes]:
    rng = random.Random(7)
    names = list(dict.fromkeys([c.qname.rstrip(".") for c in MAIN] + list(EXTRA)))
    out = []
    for name in names:
        for qtype in QTYPES:
            out += [plain_query(name, qtype), plain_query(mixed_case(name, rng), qtype), edns_query(name, qtype),
                    edns_query(mixed_case(name, rng), qtype)]
    return out


PACKETS = packets()


def records(wire: bytes) -> tuple:
    """A reply as sets of records per section, with its header but not its ID: what --loadbalance
    may reorder (the order within an answer set) left out."""
    m = dns.message.from_wire(wire)
    sections = tuple(frozenset((r.name, r.rdtype, r.ttl, tuple(sorted(x.to_text() for x in r))) for r in s)
                     for s in (m.question, m.answer, m.authority, m.additional))
    return m.flags, m.rcode(), m.question[0].name.to_text(), sections


def assert_fresh(r: Resolver, ordered: bool = True) -> None:
    """Every packet, asked twice (the second a hit if the first was cached), gets what a resolver made
    now (which has cached nothing from before the change) gives it."""
    fresh = type(r)(r.table)
    for packet in PACKETS:
        want = fresh.handle(packet)
        for _ in range(2):
            got = r.handle(packet)
            if ordered:
                assert got == want, dns.message.from_wire(packet).question
            elif got != want:  # (the same records, rotated)
                assert records(got) == records(want), dns.message.from_wire(packet).question


def build(objects: list[dict], resolver: type[Resolver] = Resolver) -> Resolver:
    made = build_resolver(objects=objects, namespaces=frozenset({"testns"}), ttl=5, synced=True)
    return made if resolver is Resolver else resolver(made.table)


def mutations(objects: list[dict], rng: random.Random):
    """An endless series of changes to the contract's objects in testns: readiness and addresses of
    endpoints, an import's IPs and ports, deletions, re-creations, a new service."""
    live = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["metadata"].get("namespace") == "testns"}
    gone: dict = {}
    while True:
        kind_name = rng.choice(sorted(live))
        obj = copy.deepcopy(live[kind_name])
        roll = rng.random()
        if roll < 0.15:
            del live[kind_name]
            gone[kind_name] = obj
            yield "delete", obj
            continue
        if roll < 0.25 and gone:
            key = rng.choice(sorted(gone))
            live[key] = gone.pop(key)
            yield "apply", live[key]
            continue
        if roll < 0.3:
            obj["metadata"]["name"] = "svcnew" if obj["kind"] == "ServiceImport" else "svcnew-c1"
            if obj["kind"] == "EndpointSlice":
                obj["metadata"]["labels"]["multicluster.kubernetes.io/service-name"] = "svcnew"
            live[(obj["kind"], obj["metadata"]["name"])] = obj
            yield "apply", obj
            continue
        if obj["kind"] == "EndpointSlice":
            for endpoint in obj.get("endpoints") or []:
                if rng.random() < 0.5:
                    endpoint.setdefault("conditions", {})["ready"] = not endpoint.get("conditions", {}).get("ready", True)
                if rng.random() < 0.3 and obj.get("addressType") == "IPv4":
                    endpoint["addresses"] = [f"172.0.{rng.randrange(256)}.{rng.randrange(1, 255)}"]
        elif obj["kind"] == "ServiceImport":
            spec = obj["spec"]
            if spec.get("ips") and rng.random() < 0.6:
                spec["ips"] = [f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}"]
            elif spec.get("ports"):
                spec["ports"][0]["port"] = rng.randrange(1, 65536)
        live[kind_name] = obj
        yield "apply", obj


def change(r: Resolver, what: str, obj: dict) -> None:
    store = r.table.store
    if what == "delete":
        store.delete(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
    else:
        store.apply(convert(obj))


@pytest.mark.parametrize("resolver_class", [Resolver, RoundRobinResolver], ids=["default", "loadbalance"])
def test_no_cached_reply_outlives_a_change_that_makes_it_wrong(resolver_class):
    objects = objects_of_contract()
    r = build(objects, resolver_class)
    rng = random.Random(50)
    steps = mutations(objects, rng)
    assert_fresh(r, ordered=resolver_class is Resolver)
    for _ in range(40):
        for _ in range(rng.choice((1, 1, 2, 3))):  # some changes land with no query between them
            change(r, *next(steps))
        if rng.random() < 0.1:
            r.table.set_serial(r.table.serial + 1000)  # (a --workers worker takes its supervisor's serial)
        assert_fresh(r, ordered=resolver_class is Resolver)


def test_a_change_keeps_the_cached_answers_of_the_services_it_left_alone():
    objects = objects_of_contract()
    r = build(objects)
    assert_fresh(r)
    svc1_a = plain_query("svc1.testns.svc.clusterset.local", 1)
    svc1_srv = plain_query("_http._tcp.svc1.testns.svc.clusterset.local", 33)
    folded = plain_query("SVC1.testns.svc.clusterset.local", 1)
    missing = plain_query("nothere.testns.svc.clusterset.local", 1)
    for packet in (svc1_a, svc1_srv, folded, missing, missing):
        r.handle(packet)
    assert svc1_a[2:] in r._packets and svc1_srv[2:] in r._packets and missing[2:] in r._packets
    folded_key = folded[2:].lower()
    assert folded_key in r._folded

    # Another service's readiness flips: svc1's answers stay, the NXDOMAIN (which holds the serial) goes.
    slice_ = next(o for o in objects if o["kind"] == "EndpointSlice" and o["metadata"]["name"] == "hdls1-c1-v4")
    conditions = slice_["endpoints"][0].setdefault("conditions", {})
    conditions["ready"] = not conditions.get("ready", True)
    r.table.store.apply(convert(slice_))
    soa_before = dns.message.from_wire(r.handle(missing)).authority[0][0].serial
    assert svc1_a[2:] in r._packets and svc1_srv[2:] in r._packets and folded_key in r._folded
    assert soa_before == r.table.soa_serial

    # svc1 itself changes: its answers go, and the next ones are the new ones.
    imp = next(o for o in objects if o["kind"] == "ServiceImport" and o["metadata"]["name"] == "svc1")
    imp["spec"]["ips"] = ["10.9.9.9"]
    r.table.store.apply(convert(imp))
    assert r.handle(svc1_a) == Resolver(r.table).handle(svc1_a)
    assert [x.address for x in dns.message.from_wire(r.handle(svc1_a)).answer[0]] == ["10.9.9.9"]
    assert svc1_srv[2:] not in r._packets and folded_key not in r._folded


def test_a_resolver_further_behind_than_the_log_starts_over():
    objects = objects_of_contract()
    r = build(objects)
    assert_fresh(r)
    assert r._packets
    for serial in range(CHANGE_LOG + 1):
        r.table.set_serial(r.table.serial + 1)
    r.handle(plain_query("clusterset.local", 6))
    assert len(r._packets) + len(r._folded) == 1
    assert_fresh(r)


def test_a_namespace_change_starts_the_caches_over():
    objects = objects_of_contract()
    r = build(objects)
    assert_fresh(r)
    r.table.store.delete("Namespace", "", "testns")
    r.handle(plain_query("clusterset.local", 6))
    assert len(r._packets) + len(r._folded) == 1
    assert_fresh(r)
    assert dns.message.from_wire(r.handle(plain_query("svc1.testns.svc.clusterset.local", 1))).rcode() == 3
