"""The zone logic without sockets: the contract's tables through Resolver.handle,
and the entries model (weights, de-duplication, readiness) through compiler.answer.
"""

from __future__ import annotations

import dns.flags
import dns.message
import dns.rcode
import pytest

from testsupport.cases import MAIN, Z, check, make_query
from mcsdns.zone import compiler
from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.store import Changes, Store
from testsupport.inprocess import ask, build_resolver, build_table
from testsupport.objects import MCS, endpoint_slice, namespace, service_import
from testsupport.mcsdnsserver import FIXTURES


def build(paths=None, namespaces=frozenset({"testns"}), ttl=5, zones=("clusterset.local",)) -> Resolver:
    return build_resolver(paths or [FIXTURES / "contract.yaml"], namespaces=namespaces, ttl=ttl, zones=zones)


@pytest.fixture(scope="module")
def resolver() -> Resolver:
    return build()


@pytest.mark.parametrize("c", MAIN, ids=lambda c: c.id)
def test_contract_table(resolver, c):
    reply = ask(resolver, make_query(c))
    check(c, reply)


@pytest.mark.parametrize("c", MAIN, ids=lambda c: c.id)
def test_contract_table_without_edns_and_in_random_case(resolver, c):
    """The same answers for a mixed-case question without EDNS; the question's case is echoed."""
    mixed = "".join(ch.upper() if i % 2 else ch for i, ch in enumerate(c.qname))
    q = dns.message.make_query(mixed, c.qtype, use_edns=False)
    wire = resolver.handle(q.to_wire(), False)
    reply = dns.message.from_wire(wire)
    assert reply.question[0].name.to_text() == mixed
    if not (reply.flags & dns.flags.TC):
        check(c, reply)
    for rrset in reply.answer:
        assert rrset.name.to_text() == mixed  # owner names echo the query exactly


def test_srv_target_keeps_query_zone_case(resolver):
    """handler_case_test: object names lower case, zone in the query's case (case 57)."""
    q = dns.message.make_query("_HtTp._TcP.sVc1.TeStNs.SvC.cLuStErSeT.LoCaL.", "SRV")
    reply = ask(resolver, q)
    (srv,) = reply.answer[0]
    assert srv.target.to_text() == "svc1.testns.svc.cLuStErSeT.LoCaL."
    assert reply.additional[0].name.to_text().lower() == "svc1.testns.svc.clusterset.local."


def test_nxdomain_soa_echoes_zone_case(resolver):
    """Case 55: SOA owner and mname in the query's case."""
    reply = ask(resolver, dns.message.make_query("not-a-service.testns.svc.ClUsTeRsEt.lOcAl.", "A"))
    assert reply.rcode() == dns.rcode.NXDOMAIN
    soa = reply.authority[0]
    assert soa.name.to_text() == "ClUsTeRsEt.lOcAl."
    assert soa[0].mname.to_text() == "ns.dns.ClUsTeRsEt.lOcAl."


def test_apex_soa_in_mixed_case(resolver):
    reply = ask(resolver, dns.message.make_query("ClusterSet.local.", "SOA"))
    assert reply.answer[0].name.to_text() == "ClusterSet.local."
    assert reply.answer[0][0].mname.to_text() == "ns.dns.ClusterSet.local."


def test_header_flags_and_edns(resolver):
    q = dns.message.make_query("svc1.testns.svc." + Z, "A", use_edns=0, want_dnssec=True, payload=4000)
    q.flags |= dns.flags.CD
    reply = ask(resolver, q)
    assert reply.id == q.id
    assert reply.flags & dns.flags.QR and reply.flags & dns.flags.AA and reply.flags & dns.flags.RD
    assert reply.flags & dns.flags.CD and not reply.flags & dns.flags.RA
    assert reply.edns == 0 and reply.payload == 4000 and reply.ednsflags & dns.flags.DO


def test_no_edns_no_opt(resolver):
    q = dns.message.make_query("svc1.testns.svc." + Z, "A", use_edns=False)
    q.flags &= ~dns.flags.RD
    reply = ask(resolver, q)
    assert reply.edns == -1 and not reply.flags & dns.flags.RD


def test_badvers(resolver):
    q = dns.message.make_query("svc1.testns.svc." + Z, "A", use_edns=1)
    reply = ask(resolver, q)
    assert reply.rcode() == dns.rcode.BADVERS


@pytest.mark.parametrize("qtype", ["AXFR", "IXFR"])
def test_transfers_refused(resolver, qtype):
    reply = ask(resolver, dns.message.make_query(Z, qtype))
    assert reply.rcode() == dns.rcode.REFUSED and not reply.authority


def test_other_class_refused(resolver):
    reply = ask(resolver, dns.message.make_query("svc1.testns.svc." + Z, "A", rdclass="CH"))
    assert reply.rcode() == dns.rcode.REFUSED


def test_out_of_zone_refused_without_upstream(resolver):
    reply = ask(resolver, dns.message.make_query("example.com.", "A"))
    assert reply.rcode() == dns.rcode.REFUSED


def test_not_synced_turns_nxdomain_into_servfail():
    table = build_table(objects=[namespace("testns"), service_import("testns", "svc1", ["10.0.0.1"])])
    store = table.store
    store.mark_synced("Namespace")  # ServiceImport and EndpointSlice lists not done yet
    resolver = Resolver(table)
    reply = ask(resolver, dns.message.make_query("svc0.testns.svc." + Z, "A"))
    assert reply.rcode() == dns.rcode.SERVFAIL and reply.authority  # case 48: SERVFAIL + SOA
    reply = ask(resolver, dns.message.make_query("svc1.testns.svc." + Z, "A"))
    assert reply.rcode() == dns.rcode.NOERROR and reply.answer  # positive answers are served
    for kind in ("ServiceImport", "EndpointSlice"):
        store.mark_synced(kind)
    assert ask(resolver, dns.message.make_query("svc0.testns.svc." + Z, "A")).rcode() == dns.rcode.NXDOMAIN


def test_a_synced_store_stays_synced():
    """The resolver's caches fill only once synced and a hit is not checked again (resolve.py): that
    holds because no later list or worker state takes a kind back out of `synced`."""
    table = build_table(objects=[namespace("testns")])
    store = table.store
    copy = Store()
    copy.take_state(store.state_of(Changes()))  # a worker's copy, before the sync
    assert not store.synced_all and not copy.synced_all
    for kind in ("Namespace", "ServiceImport", "EndpointSlice"):
        store.mark_synced(kind)
        store.mark_synced(kind)  # (a relist completes again)
    assert store.synced_all
    copy.take_state(store.state_of(Changes()))
    assert copy.synced_all
    copy.take_state({**store.state_of(Changes()), "synced": {"Namespace"}})  # an older state arriving late
    assert copy.synced_all and store.synced_all


def test_ttl_option():
    """D27: `ttl 30` makes every record TTL 30 and the SOA header TTL 30; 3600 caps the SOA header at 300."""
    for ttl, soa_ttl in ((30, 30), (3600, 300), (0, 0)):
        r = build(ttl=ttl)
        reply = ask(r, dns.message.make_query("svc1.testns.svc." + Z, "A"))
        assert reply.answer[0].ttl == ttl
        neg = ask(r, dns.message.make_query("svc0.testns.svc." + Z, "A"))
        assert neg.authority[0].ttl == soa_ttl and neg.authority[0][0].minimum == ttl
        txt = ask(r, dns.message.make_query("dns-version." + Z, "TXT"))
        assert txt.answer[0].ttl == 28800


def test_namespaces_unrestricted():
    """Case 46 and 30 without the option: every existing namespace is served."""
    r = build(namespaces=None)
    assert ask(r, dns.message.make_query("kubedns.kube-system.svc." + Z, "A")).answer[0][0].address == "10.0.0.10"
    assert ask(r, dns.message.make_query("svc1.unexposedns.svc." + Z, "A")).answer[0][0].address == "10.0.0.2"
    assert ask(r, dns.message.make_query("foo.svc." + Z, "NS")).rcode() == dns.rcode.NOERROR
    assert ask(r, dns.message.make_query("svc1.nsnoexist.svc." + Z, "A")).rcode() == dns.rcode.NXDOMAIN
    reply = ask(r, dns.message.make_query("_dns._udp.kubedns.kube-system.svc." + Z, "SRV"))
    assert reply.answer[0][0].port == 53 and reply.answer[0][0].weight == 100


def test_several_zones():
    r = build(zones=("clusterset.local", "mcs.example"))
    for z in ("clusterset.local.", "mcs.example."):
        reply = ask(r, dns.message.make_query("_http._tcp.svc1.testns.svc." + z, "SRV"))
        assert reply.answer[0][0].target.to_text() == "svc1.testns.svc." + z


# --------------------------------------------------------------------------- entries model, pure


class View:
    """A ZoneView over literal objects."""

    def __init__(self, *raw: dict, namespaces=("ns",)) -> None:
        self.store = Store()
        for ns in namespaces:
            self.store.apply(convert(namespace(ns)))
        for obj in raw:
            self.store.apply(convert(obj))

    def namespace_exposed(self, namespace: str) -> bool:
        return namespace in self.store.namespaces

    def service(self, namespace: str, name: str):
        imp = self.store.imports.get((namespace, name))
        return imp and compiler.Service(imp, self.store.service_slices((namespace, name)))


def si(name, type_="ClusterSetIP", ips=(), ports=({"name": "http", "protocol": "TCP", "port": 80},)):
    return service_import("ns", name, list(ips), headless=type_ == "Headless", ports=list(ports), api_version=f"{MCS}/v1alpha1")


def eps(name, svc, cluster, endpoints, ports=({"name": "http", "protocol": "TCP", "port": 80},)):
    return endpoint_slice("ns", name, svc, cluster or None, endpoints, ports=list(ports))


def answer(view, name: str, qtype: int) -> compiler.Answer:
    return compiler.answer(tuple(name.split(".")), qtype, view, 5, ("127.0.0.1",))


def test_d11_clustersetip_without_ips_is_nodata_but_txt_nxdomain():
    v = View(si("s"))
    for t in (compiler.A, compiler.AAAA, compiler.SRV):
        assert answer(v, "s.ns.svc", t) == compiler.NODATA
    assert answer(v, "s.ns.svc", compiler.TXT).nxdomain


def test_d12_clustersetip_with_empty_ports_is_nxdomain():
    v = View(si("s", ips=["10.0.0.1"], ports=[]))
    assert answer(v, "s.ns.svc", compiler.A).nxdomain


def test_d13_headless_without_ready_endpoints_is_nxdomain():
    v = View(si("h", "Headless"), eps("h-1", "h", "c1", [{"addresses": ["10.1.0.1"], "conditions": {"ready": False}}]))
    assert answer(v, "h.ns.svc", compiler.A).nxdomain
    assert View(si("h", "Headless")) and answer(View(si("h", "Headless")), "h.ns.svc", compiler.A).nxdomain


def test_d14_ready_unset_counts_terminating_unready_does_not():
    v = View(
        si("h", "Headless"),
        eps("h-1", "h", "c1", [
            {"addresses": ["10.1.0.1"]},
            {"addresses": ["10.1.0.2"], "conditions": {"ready": False, "serving": True, "terminating": True}},
            {"addresses": ["10.1.0.3"], "conditions": {"ready": True, "terminating": True}},
        ]),
    )  # fmt: skip
    assert {r.data for r in answer(v, "h.ns.svc", compiler.A).answer} == {"10.1.0.1", "10.1.0.3"}


def test_d15_two_clusters_union_and_weights():
    v = View(
        si("h", "Headless"),
        eps("h-a", "h", "a", [{"addresses": ["10.1.0.1"], "hostname": "h0"}]),
        eps("h-b", "h", "b", [{"addresses": ["10.2.0.1"], "hostname": "h0"}]),
    )
    assert {r.data for r in answer(v, "h.ns.svc", compiler.A).answer} == {"10.1.0.1", "10.2.0.1"}
    srv = answer(v, "h.ns.svc", compiler.SRV)
    assert {r.data for r in srv.answer} == {(0, 50, 80, ("h0", "a", "h", "ns", "svc")), (0, 50, 80, ("h0", "b", "h", "ns", "svc"))}
    assert answer(v, "h0.b.h.ns.svc", compiler.A).answer[0].data == "10.2.0.1"


def test_d16_tcp_and_udp_on_one_port_make_one_srv():
    ports = [{"name": "tcp", "protocol": "TCP", "port": 42}, {"name": "udp", "protocol": "UDP", "port": 42}]
    v4 = answer(View(si("hello", ips=["10.0.0.1"], ports=ports)), "hello.ns.svc", compiler.SRV)
    assert [r.data for r in v4.answer] == [(0, 50, 42, ("hello", "ns", "svc"))]
    dual = answer(View(si("hello", ips=["10.0.0.1", "fd00::1"], ports=ports)), "hello.ns.svc", compiler.SRV)
    assert [r.data for r in dual.answer] == [(0, 25, 42, ("hello", "ns", "svc"))]
    assert {r.rtype for r in dual.additional} == {compiler.A, compiler.AAAA}


def test_srv_weights_follow_entry_count():
    for n, w in ((1, 100), (2, 50), (3, 33), (6, 16), (101, 1), (150, 1)):
        v = View(si("h", "Headless"), eps("h-1", "h", "c", [{"addresses": [f"10.0.{i // 250}.{i % 250 + 1}"]} for i in range(n)]))
        weights = {r.data[1] for r in answer(v, "h.ns.svc", compiler.SRV).answer}
        assert weights == {w}


def test_decision4_slice_without_cluster_label():
    """Addresses count for the service name; no per-endpoint names and no SRV from them."""
    v = View(si("h", "Headless"), eps("h-x", "h", None, [{"addresses": ["10.9.0.1"], "hostname": "x"}]))
    assert answer(v, "h.ns.svc", compiler.A).answer[0].data == "10.9.0.1"
    assert answer(v, "h.ns.svc", compiler.SRV) == compiler.NODATA
    assert answer(v, "x.h.ns.svc", compiler.A).nxdomain


def test_ipv6_hostname_gets_zero_suffix():
    v = View(si("h", "Headless"), eps("h-6", "h", "c", [{"addresses": ["2001:db8::"]}]))
    v.store.apply(convert(eps("h-6", "h", "c", [{"addresses": ["2001:db8::"]}])))
    srv = answer(v, "h.ns.svc", compiler.SRV)
    assert srv.answer[0].data[3][0] == "2001-db8--0"
    assert answer(v, "2001-db8--0.c.h.ns.svc", compiler.AAAA).answer[0].data == "2001:db8::"


def test_port_filter_is_case_insensitive_and_protocol_must_match():
    v = View(si("s", ips=["10.0.0.1"], ports=[{"name": "http", "protocol": "TCP", "port": 80}, {"name": "dns", "port": 53}]))
    assert answer(v, "_HTTP._TCP.s.ns.svc".lower(), compiler.SRV).answer
    assert answer(v, "_dns._tcp.s.ns.svc", compiler.SRV).nxdomain  # empty protocol never matches _tcp
    assert [r.data[2] for r in answer(v, "s.ns.svc", compiler.SRV).answer] == [80, 53]  # bare SRV: unnamed/any protocol too


def test_non_ip_addresses_are_ignored():
    v = View(si("h", "Headless"), eps("h-1", "h", "c", [{"addresses": ["db.example.com"]}, {"addresses": ["10.0.0.7"]}]))
    assert [r.data for r in answer(v, "h.ns.svc", compiler.A).answer] == ["10.0.0.7"]
