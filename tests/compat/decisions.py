"""The deliberate differences from CoreDNS, machine-readable.

docs/compatibility.md mirrors this list (its "Deliberate differences" table has
one row per id, in this order; test_differential.py checks that both agree).
A difference between the two servers' replies is accepted only when the parts
the decisions claim (rcode, a section, the OPT record, the reply itself) cover
every part that differs; anything else fails the suite.

Each predicate sees the question's name form and the tags the generator put on
the service it names, the question, which parts differ, and both replies. The
predicates are narrow on purpose: they also check the shape of the difference,
so a new, unrelated divergence on the same names is still caught.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .compare import Reply
from .dnsclient import Ask
from .generator import CLUSTERLESS, INVALID_IMPORT, NON_IP_ADDRESS

SECTIONS = {"rcode", "answer", "authority", "additional"}


@dataclass(frozen=True)
class Decision:
    id: str
    title: str
    # (form, service tags, question, differing parts, CoreDNS reply, mcsdns reply) -> parts it explains
    claims: Callable[[str, frozenset[str], Ask, list[str], Reply, Reply], set[str]]


def _ns_address(form: str, tags, ask: Ask, parts, coredns: Reply, mcsdns: Reply) -> set[str]:
    """Apex NS and ns.dns.Z: CoreDNS outside a cluster finds neither its own Service nor a
    non-loopback bound address, so it answers NODATA where mcsdns answers the advertised
    --ns-address (127.0.0.1 in the suite). And CoreDNS recognizes ns.dns.Z only when the
    zone is spelled in lower case (isDefaultNS compares the lower-cased name with the zone
    as asked); otherwise the name is invalid for it: NXDOMAIN, or SERVFAIL before sync."""
    if form == "apex":
        return SECTIONS - {"rcode"} if ask.qtype == "NS" and _nodata(coredns) else set()
    if form != "ns.dns":
        return set()
    if ask.qname.endswith("clusterset.local."):
        return {"answer", "authority"} if ask.qtype in ("A", "AAAA") and _nodata(coredns) else set()
    return SECTIONS if coredns.rcode in ("NXDOMAIN", "SERVFAIL") and mcsdns.rcode == "NOERROR" else set()


def _nodata(r: Reply) -> bool:
    return r.rcode == "NOERROR" and not r.answer and not r.additional


def _clusterless(form: str, tags, ask: Ask, parts, coredns: Reply, mcsdns: Reply) -> set[str]:
    """A service with a slice lacking the source-cluster label: CoreDNS builds SRV targets with
    an empty label (`host..svc...`), cannot pack the reply and sends nothing; it answers
    `<host>.<svc>.<ns>.svc.Z` from that slice, where mcsdns has no such name (NXDOMAIN)."""
    if CLUSTERLESS not in tags:
        return set()
    if coredns.error == "no reply":
        return {"reply"}
    return SECTIONS if coredns.rcode == "NOERROR" and mcsdns.rcode == "NXDOMAIN" else set()


def _invalid_import(form: str, tags, ask: Ask, parts, coredns: Reply, mcsdns: Reply) -> set[str]:
    """A ServiceImport mcsdns rejects at ingest (non-IP in spec.ips, a protocol other than
    TCP/UDP/SCTP, a name that is not a DNS-1035 label): for mcsdns the service does not exist."""
    return SECTIONS if INVALID_IMPORT in tags and mcsdns.rcode == "NXDOMAIN" else set()


def _non_ip_address(form: str, tags, ask: Ask, parts, coredns: Reply, mcsdns: Reply) -> set[str]:
    """A non-IP endpoint address (FQDN slice): CoreDNS answers a CNAME to it (and the endpoint's
    names exist); mcsdns ignores the address, so an endpoint with no other address has no name."""
    if NON_IP_ADDRESS not in tags:
        return set()
    cname = any(" IN CNAME " in line for line in coredns.answer)
    return SECTIONS if cname or (coredns.rcode == "NOERROR" and mcsdns.rcode == "NXDOMAIN") else set()


def _edns_options(form: str, tags, ask: Ask, parts, coredns: Reply, mcsdns: Reply) -> set[str]:
    """CoreDNS copies the query's NSID, EXPIRE, COOKIE, TCP-KEEPALIVE and PADDING options into
    the reply's OPT verbatim (it reuses the query's OPT record); mcsdns implements none of them
    and answers with an OPT that carries no options (RFC 6891 6.1.2, RFC 7873 5.2.1)."""
    if coredns.edns is None or mcsdns.edns is None:
        return set()
    sent = {(code, data.hex()) for code, data in ask.options}
    same_otherwise = coredns.edns[:3] == mcsdns.edns[:3] and mcsdns.edns[3] == ()
    return {"edns"} if same_otherwise and set(coredns.edns[3]) <= sent else set()


def _never(*_args) -> set[str]:
    return set()


DECISIONS: list[Decision] = [
    Decision("v1beta1", "ServiceImports are read at v1beta1 when served (CoreDNS: v1alpha1 only)", _never),
    Decision("ns-address", "Apex NS and ns.dns.Z answer the advertised --ns-address", _ns_address),
    Decision("clusterless-slice", "Slices without a source-cluster label make no per-endpoint names or SRV records",
             _clusterless),
    Decision("invalid-import", "A ServiceImport DNS cannot represent is rejected as a whole", _invalid_import),
    Decision("non-ip-address", "Non-IP endpoint addresses (FQDN slices) are ignored", _non_ip_address),
    Decision("edns-options", "EDNS options of the query are not echoed", _edns_options),
]

BY_ID = {d.id: d for d in DECISIONS}


def explain(form: str, tags: frozenset[str], ask: Ask, parts: list[str], coredns: Reply, mcsdns: Reply) -> str | None:
    """The ids ("a+b") of the decisions that together explain every differing part, or None."""
    claimed: set[str] = set()
    ids = []
    for decision in DECISIONS:
        claim = decision.claims(form, tags, ask, parts, coredns, mcsdns) & set(parts)
        if claim:
            ids.append(decision.id)
            claimed |= claim
    return "+".join(ids) if ids and set(parts) <= claimed else None
