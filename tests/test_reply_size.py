"""Answers larger than any reply: what is compiled, and what a client gets over TCP and UDP.

A headless service of 1000 endpoints x 100 named ports has 100,000 SRV records for its name and
2000 records (84 KB) for each `_name._proto` name, more than a DNS message (65535 bytes) holds.
The table compiles only what a reply can carry plus one record (compiler.REPLY_RECORDS_MAX,
wire.Renderer.render); these tests hold the replies to what they were with everything compiled:
the records in order up to the last that fits, TC set, over real sockets. And every compiled
body, shared or cut or not, is the one a fresh rendering of `answer()` gives for its name.
"""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rdatatype
import pytest
import yaml

from mcsdns.zone import compiler
from mcsdns.zone.wire import MAX_TCP, Renderer
from testsupport.mcsdnsserver import McsdnsServer, exchange
from test_compile_cost import NS_ADDRESSES, make_table, varied_services

Z = "clusterset.local."
ENDPOINTS, PORTS = 1000, 100


def address(i: int) -> str:
    return f"10.30.{i // 250}.{i % 250 + 1}"


def wide_objects() -> list[dict]:
    ports = [{"name": f"p{i}", "protocol": "TCP", "port": 1000 + i} for i in range(PORTS)]
    labels = {"multicluster.kubernetes.io/service-name": "wide", "multicluster.kubernetes.io/source-cluster": "c1"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}},
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
         "metadata": {"name": "wide", "namespace": "big"}, "spec": {"type": "Headless", "ports": ports}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
         "metadata": {"name": "wide-1", "namespace": "big", "labels": labels},
         "endpoints": [{"addresses": [address(i)], "hostname": f"pod-{i}"} for i in range(ENDPOINTS)], "ports": ports},
    ]  # fmt: skip


def target(i: int) -> str:
    return f"pod-{i}.c1.wide.big.svc.{Z}"


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide") / "wide.yaml"
    path.write_text(yaml.safe_dump_all(wide_objects()))
    with McsdnsServer("--manifests", str(path)) as s:
        yield s


def ask_tcp(server: McsdnsServer, name: str, qtype: str, **kw) -> tuple[bytes, dns.message.Message]:
    wire = exchange(server, dns.message.make_query(name, qtype, **kw).to_wire(), tcp=True)
    return wire, dns.message.from_wire(wire)


def srv_pairs(reply: dns.message.Message) -> list[tuple[str, int]]:
    return [(rd.target.to_text(), rd.port) for rrset in reply.answer if rrset.rdtype == dns.rdatatype.SRV for rd in rrset]


def test_service_srv_over_tcp_is_the_leading_records_that_fit_with_tc(wide):
    """100,000 SRV records: the reply holds those that fit in 65535 bytes, in entry order, and TC."""
    wire, reply = ask_tcp(wide, f"wide.big.svc.{Z}", "SRV", use_edns=False)
    assert reply.flags & dns.flags.TC and len(wire) <= MAX_TCP
    expected = [(target(i), 1000 + p) for i in range(ENDPOINTS) for p in range(PORTS)]
    got = srv_pairs(reply)
    assert got == expected[: len(got)] and not reply.additional
    # Nothing more fits: the next SRV record is 2 (owner) + 10 + 6 + its target, spelled out whole.
    following = dns.name.from_text(expected[len(got)][0])
    assert len(wire) + 2 + 10 + 6 + len(following.to_wire()) > MAX_TCP
    assert {rd.weight for rrset in reply.answer for rd in rrset} == {1}  # 100 // 100,000 entries, at least 1


def test_port_name_srv_over_tcp_keeps_answers_and_the_glue_that_fits(wide):
    """A `_name._proto` name: its 1000 SRV records all fit, then glue in order until the message is full."""
    wire, reply = ask_tcp(wide, f"_p42._tcp.wide.big.svc.{Z}", "SRV", use_edns=False)
    assert reply.flags & dns.flags.TC and len(wire) <= MAX_TCP
    assert srv_pairs(reply) == [(target(i), 1042) for i in range(ENDPOINTS)]
    glue = [(rrset.name.to_text(), rd.address) for rrset in reply.additional for rd in rrset]
    assert glue and glue == [(target(i), address(i)) for i in range(len(glue))]
    assert len(wire) > MAX_TCP - 100  # cut where the next glue record (<= 100 bytes here) no longer fits


def test_udp_replies_are_the_same_leading_records(wide):
    """UDP (512 bytes, or the EDNS size) cuts the same record list earlier, with TC."""
    for name in (f"wide.big.svc.{Z}", f"_p7._tcp.wide.big.svc.{Z}"):
        _, full = ask_tcp(wide, name, "SRV", use_edns=False)
        for kw in ({"use_edns": False}, {"use_edns": 0, "payload": 1232}, {"use_edns": 0, "payload": 4096}):
            q = dns.message.make_query(name, "SRV", **kw)
            reply = dns.query.udp(q, "127.0.0.1", port=wide.dns_port, timeout=5, raise_on_truncation=False)
            assert reply.flags & dns.flags.TC
            got = srv_pairs(reply)
            assert got and got == srv_pairs(full)[: len(got)]


def test_port_name_addresses_are_whole(wide):
    """Address answers are never cut at compile time (16 KB here: all 1000 in one TCP reply)."""
    for name in (f"wide.big.svc.{Z}", f"_p0._tcp.wide.big.svc.{Z}", f"_p99._tcp.wide.big.svc.{Z}"):
        wire, reply = ask_tcp(wide, name, "A", use_edns=False)
        assert not reply.flags & dns.flags.TC
        assert [rd.address for rrset in reply.answer for rd in rrset] == [address(i) for i in range(ENDPOINTS)]


def long_named_service() -> list[dict]:
    """A headless service in a 63-byte namespace whose longest targets pass 255 bytes with the zone."""
    ns, svc, cluster = "n" * 63, "s" * 63, "c" * 63
    ports = [{"name": "http", "protocol": "TCP", "port": 80}]
    labels = {"multicluster.kubernetes.io/service-name": svc, "multicluster.kubernetes.io/source-cluster": cluster}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
         "metadata": {"name": svc, "namespace": ns}, "spec": {"type": "Headless", "ports": ports}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
         "metadata": {"name": "long-1", "namespace": ns, "labels": labels}, "ports": ports,
         "endpoints": [{"addresses": ["10.40.0.1"], "hostname": "h" * 63}, {"addresses": ["10.40.0.2"], "hostname": "h"},
                       {"addresses": ["10.40.0.3"]}]},
    ]  # fmt: skip


def _labels(wire: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(wire):
        out.append(wire[i + 1 : i + 1 + wire[i]])
        i += wire[i] + 1
    return out


def test_compiled_bodies_are_fresh_renderings_of_answer():
    """Every compiled body (addresses shared between names, derived bytes cached, SRV cut, names not
    checked where none can be too long) is byte for byte what rendering `answer()` for its name alone gives."""
    table = make_table(*varied_services(), *long_named_service())
    assert len(table.owned[("n" * 63, "s" * 63)]) == 6  # A, AAAA, SRV of the service and of _http._tcp
    compared = 0
    for key, keys in table.owned.items():
        for k in keys:
            lname, qtype = k[:-4], int.from_bytes(k[-4:-2], "big")
            zwire = table.zone_of(lname)
            labels = tuple(label.decode() for label in _labels(lname[: len(lname) - len(zwire)]))
            ans = compiler.answer(labels, qtype, table, table.ttl, NS_ADDRESSES)
            fresh = Renderer(lname, len(zwire)).render(ans, min(table.ttl, 300), table.ttl, table.serial & 0xFFFFFFFF)
            assert table.answers[k] == fresh, (key, k)
            compared += 1
    assert compared > 150  # every compiled name of every service, in both namespaces
