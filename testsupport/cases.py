"""The contract's query tables (sections 6.2-6.4) as data, shared by the in-process
and the real-socket tests.

Each case is a query and the expected reply written as zone-file lines:
`owner ttl TYPE rdata`. Records are compared as sets (order is unspecified);
`soa=True` means the authority section must hold exactly the zone SOA
(serial ignored). Fixture: tests/fixtures/contract.yaml served with
`--namespaces testns`, cluster id `cluster1`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dns.message
import dns.rcode
import dns.rdatatype

Z = "clusterset.local."
C = "cluster1"


@dataclass(frozen=True)
class Case:
    id: str
    qname: str
    qtype: str
    rcode: str = "NOERROR"
    answer: tuple[str, ...] = ()
    additional: tuple[str, ...] = ()
    soa: bool = False


def _z(text: str) -> str:
    return text.replace("Z", Z).replace("{C}", C)


def case(id: str, qname: str, qtype: str, rcode: str = "NOERROR", answer=(), additional=(), soa=False) -> Case:
    return Case(id, _z(qname), qtype, rcode, tuple(_z(a) for a in answer), tuple(_z(a) for a in additional), soa)


HDLS_TARGETS = ["172-0-0-2", "172-0-0-3", "5678-abcd--1", "5678-abcd--2", "dup-name"]
# The Additional section of every hdls1 SRV answer (cases 37 and D10): one address record per
# (target, address), so `dup-name` carries two.
HDLS_GLUE = [
    "172-0-0-2.{C}.hdls1.testns.svc.Z 5 A 172.0.0.2",
    "172-0-0-3.{C}.hdls1.testns.svc.Z 5 A 172.0.0.3",
    "5678-abcd--1.{C}.hdls1.testns.svc.Z 5 AAAA 5678:abcd::1",
    "5678-abcd--2.{C}.hdls1.testns.svc.Z 5 AAAA 5678:abcd::2",
    "dup-name.{C}.hdls1.testns.svc.Z 5 A 172.0.0.4",
    "dup-name.{C}.hdls1.testns.svc.Z 5 A 172.0.0.5",
]

MAIN = [
    case("1", "svc1.testns.svc.Z", "A", answer=["svc1.testns.svc.Z 5 A 10.0.0.1"]),
    case("2", "svcempty.testns.svc.Z", "A", answer=["svcempty.testns.svc.Z 5 A 10.0.0.1"]),
    case("3", "svc1.testns.svc.Z", "SRV", answer=["svc1.testns.svc.Z 5 SRV 0 100 80 svc1.testns.svc.Z"],
         additional=["svc1.testns.svc.Z 5 A 10.0.0.1"]),
    case("4", "svcempty.testns.svc.Z", "SRV", answer=["svcempty.testns.svc.Z 5 SRV 0 100 80 svcempty.testns.svc.Z"],
         additional=["svcempty.testns.svc.Z 5 A 10.0.0.1"]),
    case("5", "svc6.testns.svc.Z", "SRV", answer=["svc6.testns.svc.Z 5 SRV 0 100 80 svc6.testns.svc.Z"],
         additional=["svc6.testns.svc.Z 5 AAAA 1234:abcd::1"]),
    case("6", "_http._tcp.svc1.testns.svc.Z", "SRV", answer=["_http._tcp.svc1.testns.svc.Z 5 SRV 0 100 80 svc1.testns.svc.Z"],
         additional=["svc1.testns.svc.Z 5 A 10.0.0.1"]),
    case("7", "_http._tcp.svcempty.testns.svc.Z", "SRV",
         answer=["_http._tcp.svcempty.testns.svc.Z 5 SRV 0 100 80 svcempty.testns.svc.Z"],
         additional=["svcempty.testns.svc.Z 5 A 10.0.0.1"]),
    case("8", "hdls1.testns.svc.Z", "A", answer=[f"hdls1.testns.svc.Z 5 A 172.0.0.{i}" for i in (2, 3, 4, 5)]),
    case("9", "hdlsprtls.testns.svc.Z", "A", answer=["hdlsprtls.testns.svc.Z 5 A 172.0.0.20"]),
    case("10", "svc1.testns.svc.Z", "AAAA", soa=True),
    case("11", "svc0.testns.svc.Z", "AAAA", "NXDOMAIN", soa=True),
    case("12", "svc0.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("13", "svc0.svc-nons.svc.Z", "A", "NXDOMAIN", soa=True),
    case("14", "dns-version.Z", "TXT", answer=['dns-version.Z 28800 TXT "1.1.0"']),
    case("15", "svc1.testns.svc.Z", "TXT", soa=True),
    case("16", "svc0.svc-nons.svc.Z", "TXT", "NXDOMAIN", soa=True),
    case("17", "bogusendpoint.hdls1.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("18", "bogusendpoint.svc0.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("19", "bogusendpoint.{C}.hdls1.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("20", "bogusendpoint.{C}.svc0.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("21", "svc6.testns.svc.Z", "AAAA", answer=["svc6.testns.svc.Z 5 AAAA 1234:abcd::1"]),
    case("22", "_http._tcp.svc6.testns.svc.Z", "SRV", answer=["_http._tcp.svc6.testns.svc.Z 5 SRV 0 100 80 svc6.testns.svc.Z"],
         additional=["svc6.testns.svc.Z 5 AAAA 1234:abcd::1"]),
    case("23", "hdls1.testns.svc.Z", "AAAA", answer=["hdls1.testns.svc.Z 5 AAAA 5678:abcd::1", "hdls1.testns.svc.Z 5 AAAA 5678:abcd::2"]),
    case("24", "svc.Z", "A", soa=True),
    case("25", "pod.Z", "A", soa=True),
    case("26", "testns.svc.Z", "A", soa=True),
    case("27", "svc.Z", "NS", soa=True),
    case("28", "testns.svc.Z", "NS", soa=True),
    case("29", "foo.Z", "NS", "NXDOMAIN", soa=True),
    case("30", "foo.svc.Z", "NS", "NXDOMAIN", soa=True),
    case("31", "svc-dual-stack.testns.svc.Z", "A", answer=["svc-dual-stack.testns.svc.Z 5 A 10.0.0.3"]),
    case("32", "svc-dual-stack.testns.svc.Z", "AAAA", answer=["svc-dual-stack.testns.svc.Z 5 AAAA 10::3"]),
    case("33", "svc-dual-stack.testns.svc.Z", "SRV",
         answer=["svc-dual-stack.testns.svc.Z 5 SRV 0 50 80 svc-dual-stack.testns.svc.Z"],
         additional=["svc-dual-stack.testns.svc.Z 5 A 10.0.0.3", "svc-dual-stack.testns.svc.Z 5 AAAA 10::3"]),
    case("34", "svc1.testns.svc.Z", "SOA", soa=True),
    case("35", "endpoint.external.testns.svc.Z", "CNAME", "NXDOMAIN", soa=True),
    case("36", "subdomain.subdomain.external.testns.svc.Z", "CNAME", "NXDOMAIN", soa=True),
    case("37", "_http._tcp.hdls1.testns.svc.Z", "SRV",
         answer=[f"_http._tcp.hdls1.testns.svc.Z 5 SRV 0 16 80 {t}.{{C}}.hdls1.testns.svc.Z" for t in HDLS_TARGETS],
         additional=HDLS_GLUE),
    case("38", "5678-abcd--2.{C}.hdls1.testns.svc.Z", "AAAA", answer=["5678-abcd--2.{C}.hdls1.testns.svc.Z 5 AAAA 5678:abcd::2"]),
    case("39", "5678-abcd--1.{C}.hdls1.testns.svc.Z", "AAAA", answer=["5678-abcd--1.{C}.hdls1.testns.svc.Z 5 AAAA 5678:abcd::1"]),
    case("40", "172-0-0-20.{C}.hdlsprtls.testns.svc.Z", "A", answer=["172-0-0-20.{C}.hdlsprtls.testns.svc.Z 5 A 172.0.0.20"]),
    case("41", "5678-abcd--1.hdls1.testns.svc.Z", "AAAA", "NXDOMAIN", soa=True),
    case("42", "{C}.hdls1.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("43", "172-0-0-2.{C}.hdls1.testns.svc.Z", "A", answer=["172-0-0-2.{C}.hdls1.testns.svc.Z 5 A 172.0.0.2"]),
    case("44", "172-0-0-3.{C}.hdls1.testns.svc.Z", "A", answer=["172-0-0-3.{C}.hdls1.testns.svc.Z 5 A 172.0.0.3"]),
    case("45", "dup-name.{C}.hdls1.testns.svc.Z", "A",
         answer=["dup-name.{C}.hdls1.testns.svc.Z 5 A 172.0.0.4", "dup-name.{C}.hdls1.testns.svc.Z 5 A 172.0.0.5"]),
    # 6.3: namespaces, apex, case handling, backend-level.
    case("47", "svc1.nsnoexist.svc.Z", "A", "NXDOMAIN", soa=True),
    case("49", "Z", "SOA", answer=["Z 5 SOA ns.dns.Z hostmaster.Z 0 7200 1800 86400 5"]),
    case("50", "Z", "HINFO", soa=True),
    case("51", "Z", "NS", answer=["Z 5 NS ns.dns.Z"], additional=["ns.dns.Z 5 A 127.0.0.1"]),
    case("52", "Z", "A", soa=True),
    case("53", "Z", "AAAA", soa=True),
    case("54", "Z", "SRV", soa=True),
    case("61", "ep1a.{C}.svc1.testns.svc.Z", "A", answer=["ep1a.{C}.svc1.testns.svc.Z 5 A 172.0.0.1"]),
    # 6.4 derived cases.
    case("D1", "ns.dns.Z", "A", answer=["ns.dns.Z 5 A 127.0.0.1"]),
    case("D2a", "Z", "TXT", "NXDOMAIN", soa=True),
    case("D2b", "svc.Z", "TXT", "NXDOMAIN", soa=True),
    case("D2c", "testns.svc.Z", "TXT", "NXDOMAIN", soa=True),
    case("D3", "dns-version.Z", "A", "NXDOMAIN", soa=True),
    case("D4a", "svc1.testns.svc.Z", "ANY", soa=True),
    case("D4b", "svc1.testns.svc.Z", "HTTPS", soa=True),
    case("D4c", "svc1.testns.svc.Z", "CAA", soa=True),
    case("D4d", "svc0.testns.svc.Z", "ANY", "NXDOMAIN", soa=True),
    case("D5", "svc0.testns.svc.Z", "SOA", soa=True),
    case("D6a", "_https._tcp.svc1.testns.svc.Z", "SRV", "NXDOMAIN", soa=True),
    case("D6b", "_http._udp.svc1.testns.svc.Z", "SRV", "NXDOMAIN", soa=True),
    case("D7", "_http._tcp.svc1.testns.svc.Z", "A", answer=["_http._tcp.svc1.testns.svc.Z 5 A 10.0.0.1"]),
    case("D8", "hdlsprtls.testns.svc.Z", "SRV", soa=True),
    case("D9", "dup-name.{C}.hdls1.testns.svc.Z", "SRV",
         answer=["dup-name.{C}.hdls1.testns.svc.Z 5 SRV 0 50 80 dup-name.{C}.hdls1.testns.svc.Z"],
         additional=["dup-name.{C}.hdls1.testns.svc.Z 5 A 172.0.0.4", "dup-name.{C}.hdls1.testns.svc.Z 5 A 172.0.0.5"]),
    case("D10", "hdls1.testns.svc.Z", "SRV",
         answer=[f"hdls1.testns.svc.Z 5 SRV 0 16 80 {t}.{{C}}.hdls1.testns.svc.Z" for t in HDLS_TARGETS],
         additional=HDLS_GLUE),
    case("D18", "host.name.registry.hdls1.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("D19", "*.testns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("D22", "1-2-3-4.testns.pod.Z", "A", "NXDOMAIN", soa=True),
    case("D23", "svc1.unexposedns.svc.Z", "A", "NXDOMAIN", soa=True),
    case("kubedns-ns", "kubedns.kube-system.svc.Z", "A", "NXDOMAIN", soa=True),  # kube-system not in --namespaces
    # The fixture's imports spell protocols as CoreDNS's handler_test does (`tcp`): `_tcp` matches them
    # (strings.EqualFold), another protocol does not.
    case("lc-proto-dual", "_http._tcp.svc-dual-stack.testns.svc.Z", "SRV",
         answer=["_http._tcp.svc-dual-stack.testns.svc.Z 5 SRV 0 50 80 svc-dual-stack.testns.svc.Z"],
         additional=["svc-dual-stack.testns.svc.Z 5 A 10.0.0.3", "svc-dual-stack.testns.svc.Z 5 AAAA 10::3"]),
    case("lc-proto-other", "_http._sctp.svc6.testns.svc.Z", "SRV", "NXDOMAIN", soa=True),
    case("port-wildcard", "_._tcp.svc1.testns.svc.Z", "SRV", answer=["_._tcp.svc1.testns.svc.Z 5 SRV 0 100 80 svc1.testns.svc.Z"],
         additional=["svc1.testns.svc.Z 5 A 10.0.0.1"]),
]


def make_query(c: Case, *, edns: bool = True, want_dnssec: bool = False) -> dns.message.Message:
    return dns.message.make_query(c.qname, c.qtype, use_edns=0 if edns else False, want_dnssec=want_dnssec)


def section_lines(rrsets) -> set[str]:
    """Every record of a section as `owner ttl TYPE rdata`, lower-cased owner, no trailing dot issues."""
    out = set()
    for rrset in rrsets:
        for rd in rrset:
            owner = rrset.name.to_text().lower()
            out.add(f"{owner} {rrset.ttl} {dns.rdatatype.to_text(rrset.rdtype)} {_rdata_text(rd).lower()}")
    return out


def _rdata_text(rd) -> str:
    if rd.rdtype == dns.rdatatype.SOA:
        return f"{rd.mname} {rd.rname} 0 {rd.refresh} {rd.retry} {rd.expire} {rd.minimum}"
    return rd.to_text()


def expected_lines(lines) -> set[str]:
    out = set()
    for line in lines:
        owner, ttl, rtype, rdata = line.split(" ", 3)
        if rtype in ("SRV", "NS", "SOA", "CNAME") and not rdata.endswith("."):
            parts = rdata.split(" ")
            parts = [p + "." if (p.endswith(Z.rstrip(".")) or p.endswith("local")) else p for p in parts]
            rdata = " ".join(parts)
        out.add(f"{owner.lower()} {ttl} {rtype} {rdata.lower()}")
    return out


def check(c: Case, reply: dns.message.Message) -> None:
    """Assert that `reply` is what the contract says for `c` (sets; serial ignored)."""
    assert dns.rcode.to_text(reply.rcode()) == c.rcode, f"{c.id}: rcode {dns.rcode.to_text(reply.rcode())}"
    assert reply.flags & dns.flags.AA, f"{c.id}: AA not set"
    assert section_lines(reply.answer) == expected_lines(c.answer), f"{c.id}: answer"
    assert section_lines(reply.additional) == expected_lines(c.additional), f"{c.id}: additional"
    if c.soa:
        assert section_lines(reply.authority) == expected_lines([f"{Z} 5 SOA ns.dns.{Z} hostmaster.{Z} 0 7200 1800 86400 5"]), (
            f"{c.id}: authority"
        )
    else:
        assert not reply.authority, f"{c.id}: unexpected authority"


import dns.flags  # noqa: E402  (used in check)

__all__ = ["Case", "MAIN", "check", "make_query", "field"]
