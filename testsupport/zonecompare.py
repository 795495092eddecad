"""Another server answering the clusterset zone as mcsdns does: the questions and the comparison.

Shared by the zone file test (knotd serving `mcsdns zone`'s output) and the transfer tests
(Knot and BIND secondaries that loaded the zone from mcsdns by AXFR): every name of the zone
for A, AAAA, SRV and TXT, the empty non-terminals above them, and names that exist nowhere.
Rcode, answer and (SRV) additional sections must hold the same records, as sets; the few
questions where CoreDNS's rules and a zone file server differ (`coredns_quirk`) are checked
as exactly that difference.
"""

from __future__ import annotations

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.zone

ZONE = "clusterset.local."
QTYPES = ("A", "AAAA", "SRV", "TXT")


def records(section: list) -> set[tuple[str, str, int, str]]:
    return {(rrset.name.to_text().lower(), dns.rdatatype.to_text(rrset.rdtype), rrset.ttl, rd.to_text().lower())
            for rrset in section for rd in rrset}


def ask(port: int, name: str, qtype: str) -> dns.message.Message:
    query = dns.message.make_query(name, qtype, use_edns=0, payload=4096)
    reply = dns.query.udp(query, "127.0.0.1", port=port, timeout=2)
    if reply.flags & dns.flags.TC:
        reply = dns.query.tcp(query, "127.0.0.1", port=port, timeout=2)
    return reply


def coredns_quirk(name: str, qtype: str, empty: bool) -> bool:
    """Where CoreDNS's rules (docs/dns-contract.md) say NXDOMAIN and a zone file server NODATA.

    `empty`: the name is an empty non-terminal of the zone file. `svc.Z` and
    `<ns>.svc.Z` are NODATA in both except for TXT (NXDOMAIN in CoreDNS without
    entries, as on the apex and ns.dns.Z); every deeper empty non-terminal
    (`_<proto>.<svc>...`, `<cluster>.<svc>...`, `dns.Z`) is NXDOMAIN there:
    no name of CoreDNS's grammar. dns-version.Z exists only for TXT.
    """
    rel = name[: -len(ZONE)].rstrip(".").split(".") if name != ZONE else []
    if rel == ["dns-version"]:
        return qtype != "TXT"
    if empty and not (rel[-1:] == ["svc"] and len(rel) <= 2):
        return True
    return qtype == "TXT" and (empty or rel in ([], ["ns", "dns"]))


def questions(zone_text: str, qtypes: tuple[str, ...] = QTYPES) -> tuple[list[tuple[str, str, bool]], int]:
    """(name, type, empty non-terminal) for every name of `zone_text` (each type of `qtypes`) and the names
    above them, plus three names that exist nowhere; and how many names the zone has."""
    names = sorted({n.derelativize(dns.name.from_text(ZONE)).to_text()
                    for n in dns.zone.from_text(zone_text, origin=ZONE, relativize=False).nodes})
    out = [(n, t, False) for n in names for t in qtypes]
    depth = len(ZONE.split("."))
    empty = {".".join(n.split(".")[i:]) for n in names for i in range(1, len(n.split(".")) - depth + 1)} - set(names)
    out += [(n, t, True) for n in sorted(empty) for t in ("A", "TXT")]
    out += [(f"nothere.demo.svc.{ZONE}", "A", False), (f"svc1.nowhere.svc.{ZONE}", "SRV", False),
            (f"x.y.{ZONE}", "AAAA", False)]
    assert any(rel.startswith("svc.") for rel in empty), empty
    return out, len(names)


def dns_sd_instance(name: str) -> bool:
    """`<svc>._<port>._<proto>.<ns>.svc.Z`: a DNS-SD instance name (--dns-sd, mcsdns/zone/dnssd.py)."""
    rel = name[: -len(ZONE)].rstrip(".").split(".")
    return len(rel) == 5 and rel[1].startswith("_") and rel[2].startswith("_") and rel[4] == "svc"


def target_addresses(port: int, srv: list) -> set[tuple[str, str, int, str]]:
    """The A and AAAA records `port` answers for the targets of the SRV records in `srv`."""
    return {rec for rrset in srv for rd in rrset for qtype in ("A", "AAAA")
            for rec in records(ask(port, rd.target.to_text(), qtype).answer)}  # fmt: skip


def answers_alike(ours: int, theirs: int, asked: list[tuple[str, str, bool]], who: str = "knot") -> int:
    """Ask both servers (ports) every question; assert they agree (see the module docstring). Returns
    how many questions matched exactly (the quirks are not counted). A DNS-SD instance's SRV carries
    its target's addresses in the additional section in both (RFC 6763 12.2; dnssd.py), and they are
    exactly the A and AAAA records mcsdns answers for the target."""
    compared = 0
    for name, qtype, is_empty in asked:
        mine, other = ask(ours, name, qtype), ask(theirs, name, qtype)
        where = f"{name} {qtype}: mcsdns {mine}\n--- {who} {other}"
        if coredns_quirk(name, qtype, is_empty):
            assert (mine.rcode(), other.rcode()) == (dns.rcode.NXDOMAIN, dns.rcode.NOERROR), where
            assert not mine.answer and not other.answer, where
            continue
        assert mine.rcode() == other.rcode(), where
        assert records(mine.answer) == records(other.answer), where
        if qtype == "SRV":
            assert records(mine.additional) == records(other.additional), where
        if qtype == "SRV" and dns_sd_instance(name) and mine.answer:
            assert records(mine.additional) == target_addresses(ours, mine.answer), where
        if not mine.answer:
            assert [r.rdtype for r in mine.authority] == [r.rdtype for r in other.authority] == [dns.rdatatype.SOA], where
        compared += 1
    return compared


def soa_fields(port: int) -> set[tuple[int, str]]:
    """The apex SOA's TTL and text with the serial zeroed (each server's own change counter)."""
    return {(r.ttl, rd.replace(serial=0).to_text()) for r in ask(port, ZONE, "SOA").answer for rd in r}
