"""The deliberate differences from CoreDNS, machine-readable, each as the exact reply it expects.

docs/compatibility.md mirrors this list (its "Deliberate differences" table has
one row per id, in this order; test_differential.py checks that both agree).
Every id but `edns-options` is a numbered project decision of the contract.

A decision does not say which parts of a reply may differ: it says what mcsdns
must answer instead. Given the question and CoreDNS's reply (and, for a service
that has a twin, CoreDNS's reply to the same question about the twin: the same
objects without the part mcsdns leaves out), each decision that applies turns
the reply expected so far into the one its text prescribes. A difference is
explained only when mcsdns's reply equals that expected reply in every compared
part (rcode, flags, every section, the OPT record). Hence:

* silence from mcsdns is never explained (no decision expects it);
* silence from CoreDNS is a difference a decision must name, by expecting a
  reply of its own (a twin's), never by accepting "no reply";
* a decision that applies but expects what CoreDNS said explains nothing.

tests/compat/test_decisions.py feeds each decision wrong mcsdns replies
(SERVFAIL, a wrong address, a missing SOA, no reply) and checks it refuses them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable

from .compare import Reply, differences
from .dnsclient import Ask
from .generator import (
    CLUSTERLESS,
    NON_IP_ADDRESS,
    NON_IP_IMPORT_IP,
    NON_SRV_PORT,
    NON_SRV_PORT_NUMBER,
    NON_SRV_PORT_PROTOCOL,
    ZONE,
)


@dataclass(frozen=True)
class Context:
    """What a decision may look at: the question, its name form and service tags, CoreDNS's reply,
    CoreDNS's reply about the twin (names mapped back to the service; None: no twin), and the
    address mcsdns advertises (--ns-address)."""

    form: str
    tags: frozenset[str]
    ask: Ask
    coredns: Reply
    twin: Reply | None = None
    ns_address: str = "127.0.0.1"


@dataclass(frozen=True)
class Decision:
    id: str
    contract: str  # where the contract (shared spec, "Project decisions") states it
    title: str
    # (context, reply expected so far) -> the reply expected once this decision applies, or None
    expect: Callable[[Context, Reply], Reply | None]


# --------------------------------------------------------------------------- helpers


def _soa(r: Reply) -> frozenset[str]:
    return frozenset(line for line in r.authority if " IN SOA " in line)


def _zone_as_asked(ask: Ask) -> str:
    return ask.qname.rstrip(".")[-len(ZONE):] + "."


def _ttl(soa: frozenset[str]) -> int:
    return int(next(iter(soa)).split(" ")[1]) if soa else 5


def _twin(ctx: Context) -> Reply | None:
    return ctx.twin if ctx.twin is not None and not ctx.twin.error else None


# --------------------------------------------------------------------------- the decisions


def _clusterless(ctx: Context, expected: Reply) -> Reply | None:
    """Decision 4: a slice without a source-cluster label counts for the service's addresses
    (A/AAAA of the service name and of its `_port._proto` names: CoreDNS's reply itself) and for
    nothing else: every other question gets CoreDNS's reply about the twin (the same service
    without that slice). CoreDNS cannot pack SRV targets with an empty label and sends no reply."""
    if CLUSTERLESS not in ctx.tags:
        return None
    if ctx.ask.qtype in ("A", "AAAA") and ctx.form in ("service", "port-proto"):
        return expected
    return _twin(ctx)


def _non_ip_address(ctx: Context, expected: Reply) -> Reply | None:
    """Decision 5: endpoint addresses that are not IPs (an FQDN slice) are ignored: mcsdns answers
    every question as CoreDNS answers it about the twin without that slice (CoreDNS instead
    answers CNAMEs to the address, and the endpoint's own names exist)."""
    return _twin(ctx) if NON_IP_ADDRESS in ctx.tags else None


def _non_ip_import_ip(ctx: Context, expected: Reply) -> Reply | None:
    """Decision 12: a non-IP entry of a ServiceImport's spec.ips is left out, the rest of the
    import is served: mcsdns answers as CoreDNS answers about the twin without that entry
    (CoreDNS answers a CNAME to the string)."""
    return _twin(ctx) if NON_IP_IMPORT_IP in ctx.tags else None


def _zone_soa(ask: Ask, ttl: int = 5) -> frozenset[str]:
    """The zone's SOA as both servers write it (section 3.2: names in the zone's spelling as asked)."""
    zone = _zone_as_asked(ask)
    return frozenset({f"{ZONE}. {ttl} IN SOA ns.dns.{zone} hostmaster.{zone} SERIAL 7200 1800 86400 {ttl}"})


def _non_srv_port(ctx: Context, expected: Reply) -> Reply | None:
    """Decision 12: a port whose protocol is none of TCP/UDP/SCTP (here ICMP/7) loses its SRV records
    and its `_name._proto` names, and nothing else: it still counts for the addresses and the SRV
    weights. So a question naming its protocol is NXDOMAIN (with the SOA); an SRV answer is
    CoreDNS's without the records of that port (NODATA with the SOA if none is left)."""
    if NON_SRV_PORT not in ctx.tags or expected.error:
        return None
    labels = ctx.ask.qname.lower().rstrip(".").split(".")
    if ctx.form == "port-proto" and labels[1] == f"_{NON_SRV_PORT_PROTOCOL.lower()}":
        return replace(expected, rcode="NXDOMAIN", answer=frozenset(), authority=_zone_soa(ctx.ask),
                       additional=frozenset())
    if ctx.ask.qtype != "SRV" or ctx.form not in ("service", "port-proto"):
        return None
    kept = frozenset(line for line in expected.answer
                     if not (" IN SRV " in line and line.split(" ")[6] == str(NON_SRV_PORT_NUMBER)))
    if kept == expected.answer:
        return None
    if not kept:
        return replace(expected, answer=kept, authority=_zone_soa(ctx.ask), additional=frozenset())
    return replace(expected, answer=kept)


def _ns_address(ctx: Context, expected: Reply) -> Reply | None:
    """Decision 7: the apex NS is `ns.dns.Z` and `ns.dns.Z` answers the advertised --ns-address
    (one IPv4 address in the suite), in any spelling of the zone (RFC 4343). CoreDNS outside a
    cluster finds neither its own Service nor a non-loopback address (NODATA), and it recognizes
    `ns.dns.Z` only with the zone in lower case (otherwise: NXDOMAIN, SERVFAIL before sync)."""
    zone = _zone_as_asked(ctx.ask)
    soa = _soa(expected)
    ttl = _ttl(soa)
    glue = f"ns.dns.{ZONE}. {ttl} IN A {ctx.ns_address}"
    if ctx.form == "apex" and ctx.ask.qtype == "NS":
        return replace(expected, rcode="NOERROR", answer=frozenset({f"{ZONE}. {ttl} IN NS ns.dns.{zone}"}),
                       authority=frozenset(), additional=frozenset({glue}))
    if ctx.form != "ns.dns" or expected.error:
        return None
    if ctx.ask.qtype == "A":
        return replace(expected, rcode="NOERROR", answer=frozenset({glue}), authority=frozenset(),
                       additional=frozenset())
    if ctx.ask.qname.rstrip(".").endswith(ZONE) or not soa:
        return None  # lower-case zone: CoreDNS's reply to the other types is the one expected
    return replace(expected, rcode="NOERROR", answer=frozenset(), authority=soa, additional=frozenset())


def _edns_options(ctx: Context, expected: Reply) -> Reply | None:
    """Not a numbered decision: CoreDNS copies the query's NSID, EXPIRE, COOKIE, TCP-KEEPALIVE and
    PADDING options into the reply (it reuses the query's OPT record); mcsdns implements none of
    them and sends the same OPT without options (RFC 6891 6.1.2, RFC 7873 5.2.1)."""
    if expected.edns is None or not expected.edns[3]:
        return None
    sent = {(code, data.hex()) for code, data in ctx.ask.options}
    if not set(expected.edns[3]) <= sent:
        return None  # an option CoreDNS made up itself is not this decision's
    return replace(expected, edns=expected.edns[:3] + ((),))


DECISIONS: list[Decision] = [
    Decision("v1beta1", "decision 2", "ServiceImports are read at v1beta1 when served (CoreDNS: v1alpha1 only)",
             lambda ctx, expected: None),
    Decision("ns-address", "decision 7", "Apex NS and ns.dns.Z answer the advertised --ns-address", _ns_address),
    Decision("clusterless-slice", "decision 4",
             "Slices without a source-cluster label make no per-endpoint names or SRV records", _clusterless),
    Decision("non-ip-address", "decision 5", "Non-IP endpoint addresses (FQDN slices) are ignored", _non_ip_address),
    Decision("non-ip-import-ip", "decision 12", "A non-IP entry of a ServiceImport's spec.ips is left out",
             _non_ip_import_ip),
    Decision("non-srv-port", "decision 12", "A port whose protocol is none of TCP/UDP/SCTP has no SRV records",
             _non_srv_port),
    Decision("edns-options", "none (RFC 6891, RFC 7873)", "EDNS options of the query are not echoed", _edns_options),
]

BY_ID = {d.id: d for d in DECISIONS}


def expected_reply(ctx: Context) -> tuple[Reply, list[str]]:
    """The reply mcsdns must give, and the ids of the decisions that made it differ from CoreDNS's."""
    expected = ctx.coredns
    ids = []
    for decision in DECISIONS:
        adjusted = decision.expect(ctx, expected)
        if adjusted is not None and adjusted != expected:
            ids.append(decision.id)
            expected = adjusted
    return expected, ids


def explain(ctx: Context, mcsdns: Reply) -> str | None:
    """The ids ("a+b") of the decisions whose expected reply mcsdns gave exactly, or None."""
    if mcsdns.error:
        return None  # silence (or garbage) from mcsdns is never a decision
    expected, ids = expected_reply(ctx)
    if not ids or expected.error or differences(expected, mcsdns):
        return None
    return "+".join(ids)


def map_twin(reply: Reply, twin: str, service: str, namespace: str) -> Reply:
    """A reply about the twin with the twin's name replaced by the service's (owners and rdata)."""
    pattern = re.compile(rf"(?<![A-Za-z0-9-]){re.escape(twin)}(?=\.{re.escape(namespace)}\.svc\.)", re.I)

    def fix(lines: frozenset[str]) -> frozenset[str]:
        return frozenset(pattern.sub(service, line) for line in lines)

    return replace(reply, answer=fix(reply.answer), authority=fix(reply.authority), additional=fix(reply.additional))
