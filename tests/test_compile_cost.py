"""Compiling a service lists its entries once and groups them by name (compiler.service_entries).

These tests hold the grouped compile to what `answer()` says name by name, and check the
answers of services with many ports. They are not timed: the speed figures come from a
script that prints them (docs/reliability.md, Known limits), never from a unit test.
"""

from __future__ import annotations

import dns.message
import dns.rcode
import dns.rdatatype
import pytest

from mcsdns.zone import compiler
from mcsdns.objects import Address, EndpointSlice, Port, ServiceImport
from mcsdns.serve.resolve import Resolver
from mcsdns.zone.table import Table
from testsupport.inprocess import NS_ADDRESSES, ask, build_table
from testsupport.objects import endpoint_slice, namespace, service_import

pytestmark = pytest.mark.slow  # compiles services of thousands of endpoints

Z = "clusterset.local."
PROTOCOLS = ("TCP", "UDP", "SCTP")


def make_table(*objects, namespaces=None) -> Table:
    return build_table(objects=[namespace("ns"), namespace("other"), *objects], namespaces=namespaces, synced=True)


def varied_services() -> list:
    """Services whose names group differently: repeated numbers and names, protocols, families, clusters."""
    mixed_ports = [
        {"name": "http", "protocol": "TCP", "port": 80}, {"name": "http", "protocol": "UDP", "port": 80},
        {"name": "dns", "protocol": "UDP", "port": 53}, {"name": "dns", "protocol": "TCP", "port": 53},
        {"name": "sctp", "protocol": "SCTP", "port": 9}, {"port": 8080}, {"name": "noproto", "port": 81},
        {"name": "again", "protocol": "TCP", "port": 80}, {"name": "p" * 63, "protocol": "TCP", "port": 63},
    ] + [{"name": f"n{i}", "protocol": PROTOCOLS[i % 3], "port": 1000 + i % 4} for i in range(20)]  # fmt: skip
    objs: list = [service_import("ns", "h", [], headless=True, ports=[]), service_import("ns", "c", ["10.100.0.1", "fd00::100"], ports=mixed_ports)]
    n = 0
    for cluster in ("c1", "c2", "a.b", None):
        for family, ports in (("IPv4", mixed_ports), ("IPv6", mixed_ports[:5]), ("IPv4", [])):
            endpoints = []
            for e in range(6):
                n += 1
                address = f"10.1.{n // 250}.{n % 250}" if family == "IPv4" else f"fd00::{n:x}"
                ep: dict = {"addresses": [address]}
                if e % 3 == 0:
                    ep["hostname"] = "dup" if e == 3 else f"host{e}"
                if e == 5:
                    ep["conditions"] = {"ready": False}
                endpoints.append(ep)
            objs.append(endpoint_slice("ns", f"h-{n}", "h", cluster, endpoints, ports=ports, address_type=family))
    objs += [
        endpoint_slice("ns", "c-1", "c", "c1", [{"addresses": ["10.7.0.1"], "hostname": "e1"}], ports=mixed_ports[:2]),
        service_import("ns", "noips", [], ports=mixed_ports[:3]),
        service_import("ns", "noports", ["10.100.0.3"], ports=[]),
        service_import("ns", "unready", [], headless=True, ports=[]),
        endpoint_slice("ns", "unready-1", "unready", "c1", [{"addresses": ["10.8.0.1"], "conditions": {"ready": False}}], ports=mixed_ports[:1]),
        service_import("other", "hidden", ["10.200.0.1"], ports=mixed_ports[:1]),
        # Built directly: port names and protocols in mixed case share a `_name._proto` name.
        ServiceImport("ns", "raw", True, (), ()),
        EndpointSlice("ns", "raw-1", "raw", "C1", (Address("10.51.0.1", False, "A1"), Address("fd00::51", True, "b")),
                      (Port(80, "HTTP", "TCP"), Port(81, "http", "tcp"), Port(82, "Http", "Tcp"), Port(83, "http", "UDP"))),
    ]  # fmt: skip
    return objs


def test_compile_service_gives_what_answer_gives_for_every_name():
    for namespaces in (None, frozenset({"ns"})):
        table = make_table(*varied_services(), namespaces=namespaces)
        for key in table.store.imports:
            svc = table.service(*key)
            expected = [
                (labels, qtype, compiler.answer(labels, qtype, table, 5, NS_ADDRESSES))
                for labels in compiler.service_names(svc)
                for qtype in compiler.COMPILED_TYPES
            ]
            assert list(compiler.compile_service(svc, table, 5, NS_ADDRESSES)) == expected, key
            without_endpoints = [e for e in expected if not compiler.parse(e[0]).endpoint]
            assert list(compiler.compile_service(svc, table, 5, NS_ADDRESSES, endpoint_names=False)) == without_endpoints, key


def pairwise_srv_records(entries: list[compiler.Entry], ttl: int) -> tuple[tuple, tuple]:
    """What `compiler.srv_records` computes, by its definition: each (target, port) pair's SRV record and
    each (target, address) pair's glue once, in entry order, records past REPLY_RECORDS_MAX left out."""
    counted = [e for e in entries if e.srv]
    weight = max(1, 100 // len(counted)) if counted else 0
    answers: list = []
    extra: list = []
    for e in counted:
        if e.port == -1:
            continue
        srv = compiler.Record(None, compiler.SRV, ttl, (compiler.REMOTE_PRIORITY if e.remote else compiler.LOCAL_PRIORITY, weight, e.port, e.target))
        if all(r.data[2:] != srv.data[2:] for r in answers):
            if len(answers) == compiler.REPLY_RECORDS_MAX:
                break
            answers.append(srv)
        glue = compiler.Record(e.target, compiler.AAAA if e.v6 else compiler.A, ttl, e.ip)
        if glue not in extra:
            extra.append(glue)
    return tuple(answers), tuple(extra[: compiler.REPLY_RECORDS_MAX - len(answers)])


def test_srv_records_keep_each_pair_once_as_their_definition_says():
    """`srv_records` tracks the pairs it has seen without building one per entry; every group of the
    varied services (targets in several slices, numbers repeated, local and remote clusters) and one
    past REPLY_RECORDS_MAX (80 endpoints x 60 ports) gives what the pairwise definition gives."""
    ports = [{"name": f"p{i}", "protocol": "TCP", "port": 1000 + i % 58} for i in range(60)]
    wide = [service_import("ns", "wide", [], headless=True, ports=[])] + [
        endpoint_slice("ns", f"wide-{c}", "wide", c, [{"addresses": [f"10.{k}.1.{i + 1}"], "hostname": f"h{i % 38}"}
                                                       for i in range(40)], ports=ports)
        for k, c in enumerate(("c1", "c2"))
    ]  # fmt: skip
    checked = cut = 0
    for local_cluster in (None, "c2"):
        table = build_table(objects=[namespace("ns"), *varied_services(), *wide], synced=True, local_cluster=local_cluster)
        for key in table.store.imports:
            svc = table.service(*key)
            (bare, _), by_port = compiler.service_entries(svc)
            for entries in [bare, *(group for group, _ in by_port.values()), *compiler.endpoint_entries(svc).values()]:
                glue: compiler.Glue = {}
                answers, _ = compiler.srv_records(entries, 5, glue)
                cut += len(answers) == compiler.REPLY_RECORDS_MAX
                assert compiler.srv_records(entries, 5, glue) == pairwise_srv_records(entries, 5), key
                assert compiler.srv_records(entries, 5, glue) == pairwise_srv_records(entries, 5), key  # glue shared
                checked += len(entries)
    assert checked > 2 * 80 * 60 and cut == 2  # the wide service's name, with and without --local-cluster


def records(section, rdtype: int) -> list:
    return [rd for rrset in section if rrset.rdtype == rdtype for rd in rrset]


def test_headless_with_many_endpoints_and_named_ports():
    """200 endpoints in two clusters x 40 named ports (TCP/UDP/SCTP, numbers repeated): each `_name._proto`
    holds its own port's 200 targets, the service name all (target, port) pairs."""
    ports = [{"name": f"p{i}", "protocol": PROTOCOLS[i % 3], "port": 1000 + i % 7} for i in range(40)]
    objs = [service_import("ns", "big", [], headless=True, ports=[])]
    for c in ("c1", "c2"):
        endpoints = [{"addresses": [f"10.{1 if c == 'c1' else 2}.0.{i + 1}"], "hostname": f"h{i}"} for i in range(100)]
        objs.append(endpoint_slice("ns", f"big-{c}", "big", c, endpoints, ports=ports))
    table = make_table(*objs)
    resolver = Resolver(table)
    addresses = {f"10.{k}.0.{i + 1}" for k in (1, 2) for i in range(100)}
    targets = {f"h{i}.{c}.big.ns.svc.{Z}" for c in ("c1", "c2") for i in range(100)}
    # A, AAAA (NODATA: no IPv6) and SRV for the service name and each of its 40 port names.
    assert len(table.owned[("ns", "big")]) == 3 * 41
    for i, port in enumerate(ports):
        name = f"_p{i}._{port['protocol'].lower()}.big.ns.svc.{Z}"
        srv = ask(resolver, name, "SRV", tcp=True)
        assert srv.rcode() == dns.rcode.NOERROR
        answers = records(srv.answer, dns.rdatatype.SRV)
        assert {rd.target.to_text() for rd in answers} == targets and len(answers) == 200
        assert {(rd.port, rd.weight, rd.priority) for rd in answers} == {(port["port"], 1, 0)}
        assert {rd.address for rd in records(srv.additional, dns.rdatatype.A)} == addresses
        a = ask(resolver, name, "A", tcp=True)
        assert sorted(rd.address for rd in records(a.answer, dns.rdatatype.A)) == sorted(addresses)
        assert ask(resolver, name, "AAAA", tcp=True).rcode() == dns.rcode.NOERROR  # exists, no IPv6: NODATA
        wrong = f"_p{i}._{PROTOCOLS[(i + 1) % 3].lower()}.big.ns.svc.{Z}"
        assert ask(resolver, wrong, "SRV", tcp=True).rcode() == dns.rcode.NXDOMAIN
    # The service name's SRV: every (target, port) pair once (too many for one message: checked before rendering).
    svc = table.service("ns", "big")
    ((_, _, bare_srv),) = [r for r in compiler.compile_service(svc, table, 5, NS_ADDRESSES, endpoint_names=False)
                                   if r[0] == ("big", "ns", "svc") and r[1] == compiler.SRV]  # fmt: skip
    pairs = [(".".join(rec.data[3]), rec.data[2]) for rec in bare_srv.answer]
    assert len(pairs) == len(set(pairs)) == 200 * 7
    assert {rec.data[1] for rec in bare_srv.answer} == {1}
    assert len(bare_srv.additional) == 200


def test_clustersetip_with_a_thousand_named_ports():
    """1000 named ports, dual stack, numbers repeated across names and protocols (D16 at scale)."""
    ports = [{"name": f"p{i}", "protocol": PROTOCOLS[i % 3], "port": 1 + i % 250} for i in range(1000)]
    table = make_table(service_import("ns", "wide", ["10.9.0.1", "fd00::9"], ports=ports))
    resolver = Resolver(table)
    assert len(table.owned[("ns", "wide")]) == 3 * 1001  # A, AAAA and SRV for the service and each port name
    for i in (0, 1, 2, 249, 250, 998, 999):
        port = ports[i]
        name = f"_p{i}._{port['protocol'].lower()}.wide.ns.svc.{Z}"
        srv = ask(resolver, name, "SRV", tcp=True)
        assert [(rd.port, rd.weight, rd.target.to_text()) for rd in records(srv.answer, dns.rdatatype.SRV)] == [
            (port["port"], 50, f"wide.ns.svc.{Z}")
        ]
        assert [rd.address for rd in records(ask(resolver, name, "A", tcp=True).answer, dns.rdatatype.A)] == ["10.9.0.1"]
        assert [rd.address for rd in records(ask(resolver, name, "AAAA", tcp=True).answer, dns.rdatatype.AAAA)] == ["fd00::9"]
    bare = ask(resolver, f"wide.ns.svc.{Z}", "SRV", tcp=True)
    answers = records(bare.answer, dns.rdatatype.SRV)
    assert sorted(rd.port for rd in answers) == list(range(1, 251))  # one per number, whatever its names
    assert {rd.weight for rd in answers} == {1}  # 100 // 2000 entries, at least 1
    assert ask(resolver, f"_p1._tcp.wide.ns.svc.{Z}", "SRV", tcp=True).rcode() == dns.rcode.NXDOMAIN  # p1 is UDP
