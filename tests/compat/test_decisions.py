"""The decision list refuses every mcsdns reply but the one each decision prescribes.

No servers: replies are built as the suite's reader builds them. For each
decision, the right mcsdns reply is explained, and wrong ones -- SERVFAIL, a
wrong address, a missing SOA, no reply at all -- are not. Silence is never
equal, not even to silence.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from .compare import NO_REPLY, Reply, differences
from .decisions import DECISIONS, Context, explain, map_twin
from .dnsclient import UDP_EDNS, Ask
from .generator import CLUSTERLESS, NON_IP_ADDRESS, NON_IP_IMPORT_IP, NON_SRV_PORT

Z = "clusterset.local."
SOA = f"{Z} 5 IN SOA ns.dns.{Z} hostmaster.{Z} SERIAL 7200 1800 86400 5"
FLAGS = frozenset({"QR", "AA", "RD"})
EDNS = (0, 1232, False, ())


def reply(rcode: str = "NOERROR", answer=(), authority=(), additional=(), edns=EDNS) -> Reply:
    return Reply(rcode, FLAGS, frozenset(answer), frozenset(authority), frozenset(additional), edns)


NODATA = reply(authority=[SOA])
NXDOMAIN = reply("NXDOMAIN", authority=[SOA])
SERVFAIL = reply("SERVFAIL", authority=[SOA])


def wrong_replies(right: Reply) -> dict[str, Reply]:
    """The usual ways to be wrong, each derived from the right reply."""
    out = {"SERVFAIL": SERVFAIL, "no reply": NO_REPLY}
    if any(" IN A " in line for line in right.answer | right.additional):
        def bump(lines):
            return frozenset(line.rsplit(" ", 1)[0] + " 10.255.255.254" if " IN A " in line else line for line in lines)
        out["a wrong address"] = replace(right, answer=bump(right.answer), additional=bump(right.additional))
    if right.authority:
        out["a missing SOA"] = replace(right, authority=frozenset())
    return out


def check(ctx: Context, right: Reply, decision: str) -> None:
    assert explain(ctx, right) == decision
    for what, wrong in wrong_replies(right).items():
        assert explain(ctx, wrong) is None, f"{decision}: {what} accepted"


def ctx(form: str, qname: str, qtype: str, coredns: Reply, *, tags=frozenset(), twin: Reply | None = None,
        options=(), transport=UDP_EDNS) -> Context:
    ask = Ask(qname, qtype, transport, 1232 if transport == UDP_EDNS else 0, False, options)
    return Context(form, frozenset(tags), ask, coredns, twin, "127.0.0.1")


# --------------------------------------------------------------------------- ns-address (decision 7)


def test_ns_address_apex_ns_must_name_ns_dns_with_the_advertised_glue() -> None:
    c = ctx("apex", "ClusterSet.local.", "NS", NODATA)
    right = reply(answer=[f"{Z} 5 IN NS ns.dns.ClusterSet.local."], additional=[f"ns.dns.{Z} 5 IN A 127.0.0.1"])
    check(c, right, "ns-address")
    assert explain(c, replace(right, answer=frozenset({f"{Z} 5 IN NS ns.example."}))) is None
    assert explain(c, replace(right, additional=frozenset())) is None  # no glue


def test_ns_address_ns_dns_a_is_the_advertised_address() -> None:
    for qname, coredns in ((f"ns.dns.{Z}", NODATA), ("ns.dns.CLUSTERSET.local.", NXDOMAIN)):
        check(ctx("ns.dns", qname, "A", coredns), reply(answer=[f"ns.dns.{Z} 5 IN A 127.0.0.1"]), "ns-address")


def test_ns_address_other_types_in_mixed_case_are_nodata_with_the_soa() -> None:
    c = ctx("ns.dns", "ns.dns.CLUSTERSET.local.", "AAAA", NXDOMAIN)
    check(c, NODATA, "ns-address")
    # In lower case CoreDNS already says NODATA: nothing for the decision to explain.
    assert explain(ctx("ns.dns", f"ns.dns.{Z}", "AAAA", NODATA), NXDOMAIN) is None


# --------------------------------------------------------------------------- clusterless-slice (decision 4)


def test_clusterless_srv_is_the_twins_reply_even_when_coredns_is_silent() -> None:
    twin = reply(answer=[f"mixed.ns.svc.{Z} 5 IN SRV 0 100 80 m0.east.mixed.ns.svc.{Z}"],
                 additional=[f"m0.east.mixed.ns.svc.{Z} 5 IN A 10.0.0.1"])
    c = ctx("service", f"mixed.ns.svc.{Z}", "SRV", NO_REPLY, tags={CLUSTERLESS}, twin=twin)
    check(c, twin, "clusterless-slice")
    # Without the twin's reply nothing can be expected: CoreDNS's silence explains nothing.
    assert explain(replace(c, twin=None), twin) is None
    assert explain(replace(c, twin=NO_REPLY), twin) is None


def test_clusterless_addresses_of_the_service_must_equal_coredns() -> None:
    coredns = reply(answer=[f"mixed.ns.svc.{Z} 5 IN A 10.0.0.{i}" for i in (1, 2, 3)])
    twin = reply(answer=[f"mixed.ns.svc.{Z} 5 IN A 10.0.0.1"])
    c = ctx("service", f"mixed.ns.svc.{Z}", "A", coredns, tags={CLUSTERLESS}, twin=twin)
    assert explain(c, twin) is None  # the clusterless addresses count (as in CoreDNS)
    assert not differences(coredns, coredns)


def test_clusterless_host_name_without_cluster_is_nxdomain_with_soa() -> None:
    coredns = reply(answer=[f"m1.mixed.ns.svc.{Z} 5 IN A 10.0.0.2"])
    c = ctx("endpoint-no-cluster", f"m1.mixed.ns.svc.{Z}", "A", coredns, tags={CLUSTERLESS}, twin=NXDOMAIN)
    check(c, NXDOMAIN, "clusterless-slice")
    assert explain(c, NODATA) is None


# --------------------------------------------------------------------------- non-ip-address (decision 5)


def test_non_ip_endpoint_address_is_the_twins_reply() -> None:
    coredns = reply(answer=[f"fqdn.ns.svc.{Z} 5 IN CNAME db.example.com.", f"fqdn.ns.svc.{Z} 5 IN A 10.0.0.7"])
    twin = reply(answer=[f"fqdn.ns.svc.{Z} 5 IN A 10.0.0.7"])
    check(ctx("service", f"fqdn.ns.svc.{Z}", "A", coredns, tags={NON_IP_ADDRESS}, twin=twin), twin, "non-ip-address")


# --------------------------------------------------------------------------- non-ip-import-ip (decision 12)


def test_non_ip_import_ip_is_left_out_alone() -> None:
    coredns = reply(answer=[f"badip.ns.svc.{Z} 5 IN CNAME not-an-ip."])
    check(ctx("service", f"badip.ns.svc.{Z}", "A", coredns, tags={NON_IP_IMPORT_IP}, twin=NODATA), NODATA,
          "non-ip-import-ip")
    twin = reply(answer=[f"badip2.ns.svc.{Z} 5 IN A 10.96.0.1"])
    coredns2 = reply(answer=[f"badip2.ns.svc.{Z} 5 IN CNAME not-an-ip.", f"badip2.ns.svc.{Z} 5 IN A 10.96.0.1"])
    check(ctx("service", f"badip2.ns.svc.{Z}", "A", coredns2, tags={NON_IP_IMPORT_IP}, twin=twin), twin,
          "non-ip-import-ip")


# --------------------------------------------------------------------------- non-srv-port (decision 12)


def test_non_srv_port_loses_its_srv_records_and_names_only() -> None:
    icmp = f"icmp.ns.svc.{Z}"
    coredns = reply(answer=[f"{icmp} 5 IN SRV 0 50 80 {icmp}", f"{icmp} 5 IN SRV 0 50 7 {icmp}"],
                    additional=[f"{icmp} 5 IN A 10.96.0.9"])
    right = reply(answer=[f"{icmp} 5 IN SRV 0 50 80 {icmp}"], additional=[f"{icmp} 5 IN A 10.96.0.9"])
    check(ctx("service", icmp, "SRV", coredns, tags={NON_SRV_PORT}), right, "non-srv-port")
    assert explain(ctx("service", icmp, "SRV", coredns, tags={NON_SRV_PORT}),
                   replace(right, answer=frozenset({f"{icmp} 5 IN SRV 0 100 80 {icmp}"}))) is None  # weights kept
    named = reply(answer=[f"_ping._icmp.{icmp} 5 IN SRV 0 100 7 {icmp}"], additional=[f"{icmp} 5 IN A 10.96.0.9"])
    check(ctx("port-proto", f"_ping._icmp.{icmp}", "SRV", named, tags={NON_SRV_PORT}), NXDOMAIN, "non-srv-port")
    a = reply(answer=[f"_ping._icmp.{icmp} 5 IN A 10.96.0.9"])
    check(ctx("port-proto", f"_ping._icmp.{icmp}", "A", a, tags={NON_SRV_PORT}), NXDOMAIN, "non-srv-port")
    # The addresses of the service stay CoreDNS's.
    addr = reply(answer=[f"{icmp} 5 IN A 10.96.0.9"])
    assert explain(ctx("service", icmp, "A", addr, tags={NON_SRV_PORT}), NODATA) is None


def test_twin_replies_are_mapped_back_to_the_service() -> None:
    twin = reply(answer=[f"mixed-twin.ns.svc.{Z} 5 IN SRV 0 100 80 m0.east.mixed-twin.ns.svc.ClusterSet.Local."],
                 additional=[f"m0.east.mixed-twin.ns.svc.{Z} 5 IN A 10.0.0.1"])
    mapped = map_twin(twin, "mixed-twin", "mixed", "ns")
    assert mapped.answer == {f"mixed.ns.svc.{Z} 5 IN SRV 0 100 80 m0.east.mixed.ns.svc.ClusterSet.Local."}
    assert mapped.additional == {f"m0.east.mixed.ns.svc.{Z} 5 IN A 10.0.0.1"}


# --------------------------------------------------------------------------- edns-options


def test_edns_options_only_the_echoed_options_may_be_missing() -> None:
    nsid = ((3, b""),)
    coredns = replace(reply(answer=[f"svc1.ns.svc.{Z} 5 IN A 10.0.0.1"]), edns=(0, 1232, False, ((3, ""),)))
    right = replace(coredns, edns=(0, 1232, False, ()))
    check(ctx("service", f"svc1.ns.svc.{Z}", "A", coredns, options=nsid), right, "edns-options")
    assert explain(ctx("service", f"svc1.ns.svc.{Z}", "A", coredns, options=nsid), replace(right, edns=(0, 512, False, ()))) is None
    # An option the query did not carry is not the decision's.
    assert explain(ctx("service", f"svc1.ns.svc.{Z}", "A", coredns), right) is None


# --------------------------------------------------------------------------- silence and combinations


def test_silence_is_never_equal() -> None:
    assert differences(NO_REPLY, NO_REPLY) == ["reply"]
    assert differences(NODATA, NO_REPLY) == ["reply"]
    for decision_tags in (frozenset(), {CLUSTERLESS}, {NON_IP_ADDRESS}, {NON_IP_IMPORT_IP}):
        c = ctx("service", f"x.ns.svc.{Z}", "SRV", NO_REPLY, tags=decision_tags, twin=NODATA)
        assert explain(c, NO_REPLY) is None


def test_a_decision_that_applies_but_expects_what_coredns_said_explains_nothing() -> None:
    c = ctx("service", f"mixed.ns.svc.{Z}", "SRV", NODATA, tags={CLUSTERLESS}, twin=NODATA)
    assert explain(c, NXDOMAIN) is None


def test_two_decisions_compose() -> None:
    twin = replace(NXDOMAIN, edns=(0, 1232, False, ((3, ""),)))
    coredns = replace(reply(answer=[f"m1.mixed.ns.svc.{Z} 5 IN A 10.0.0.2"]), edns=(0, 1232, False, ((3, ""),)))
    c = ctx("endpoint-no-cluster", f"m1.mixed.ns.svc.{Z}", "A", coredns, tags={CLUSTERLESS}, twin=twin,
            options=((3, b""),))
    assert explain(c, NXDOMAIN) == "clusterless-slice+edns-options"
    assert explain(c, twin) is None  # the options echoed: not what mcsdns does


@pytest.mark.parametrize("decision", DECISIONS, ids=lambda d: d.id)
def test_every_decision_names_its_contract_source(decision) -> None:
    assert decision.contract and decision.title
