"""Does the DNS that pods use bring a name to mcsdns? /explain's `via` check.

The most common reason a name that mcsdns answers fails in pods is outside mcsdns: the
cluster's CoreDNS has no `clusterset.local` stub zone (the query goes to the upstream
resolvers, which say NXDOMAIN with the root's SOA, or fail), the stub zone forwards to a
wrong address (SERVFAIL, or no answer while CoreDNS waits), or NodeLocal DNSCache lacks its
block. `dig @MCSDNS_IP` works in all of these, so the user is left guessing.

`/explain?name=N&type=T&via=cluster` (what `mcsdns explain` asks by default when the server runs
in a pod: `via=auto`) sends the same
question, RD set, to the first nameserver of this server's /etc/resolv.conf -- in an mcsdns pod
(dnsPolicy ClusterFirst) that is what every pod asks: kube-dns, or node-local-dns -- and
compares its reply with mcsdns's own. `via=HOST[:PORT]` asks another server. The verdict:

* `same`: same rcode and records (TTLs and order aside), or a negative answer carrying
  mcsdns's SOA: the path reaches mcsdns (or a server that answers as it does).
* `not_forwarded`: SERVFAIL or REFUSED where mcsdns answers, no reply, or a negative answer
  with another zone's SOA (or none): the message names the fix, the stub zone.
* `differs`: another answer: a cache still holding an older one, or a stub zone that forwards
  to another mcsdns.

One UDP query (TCP when truncated), at most VIA_TIMEOUT seconds, at most MAX_IN_FLIGHT at a
time: the admin port stays a poor tool for sending DNS traffic anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import dnslib

from ..config import hostport_text, parse_hostport
from ..forward.forwarder import RESOLV_CONF, Upstream, UpstreamError, read_resolv_conf

VIA_TIMEOUT = 3.0  # seconds; CoreDNS itself gives up on a dead stub-zone address after 5 s
MAX_IN_FLIGHT = 4
IN_POD_ENV = "KUBERNETES_SERVICE_HOST"  # the kubelet sets it in every pod
INSTALL_DOC = 'docs/install.md, "Point CoreDNS at it"; with NodeLocal DNSCache, its "NodeLocal DNSCache" block too'


class BadVia(ValueError):
    """A `via` value that is neither `cluster` nor HOST[:PORT] with an IP address."""


@dataclass(frozen=True, slots=True)
class Via:
    """Where to ask: (host, port) and how it was chosen, for the text."""

    host: str
    port: int
    source: str  # "/etc/resolv.conf" or "given"

    @property
    def text(self) -> str:
        return hostport_text(self.host, self.port)


def parse_via(text: str, resolv_conf: Path = RESOLV_CONF) -> Via | None:
    """`cluster` -> resolv.conf's first nameserver; `auto` -> the same in a pod, else None;
    `none` or '' -> None; HOST[:PORT] -> that.

    `auto` is what `mcsdns explain` sends: in a pod, resolv.conf is the cluster's DNS (the check
    users need); on a workstation it is the machine's resolver, which says nothing about a cluster.
    """
    value = text.strip()
    if value.lower() in ("", "none") or value.lower() == "auto" and not os.environ.get(IN_POD_ENV):
        return None
    if value.lower() == "auto":
        value = "cluster"
    if value.lower() == "cluster":
        found = read_resolv_conf(resolv_conf)
        if not found:
            raise BadVia(f"via=cluster: no nameserver in {resolv_conf} of this server; give via=HOST[:PORT]")
        return Via(found[0], 53, str(resolv_conf))
    try:
        host, port = parse_hostport(value, 53)
        Upstream(host, port)  # an IP address, or ValueError/OSError
    except (ValueError, OSError) as exc:
        raise BadVia(f"via {value!r}: give `cluster`, `auto`, `none` or an IP address with an optional port ({exc})") from None
    if port == 0:
        raise BadVia(f"via {value!r}: port 0")
    return Via(host, port, "given")


class PathCheck:
    """Asks a via server and compares; one per app (it holds the in-flight count)."""

    def __init__(self, timeout: float = VIA_TIMEOUT) -> None:
        self.timeout = timeout
        self.in_flight = 0

    async def ask(self, via: Via, query: bytes) -> tuple[dnslib.DNSRecord | None, str]:
        """(the reply, '') or (None, why there is none)."""
        if self.in_flight >= MAX_IN_FLIGHT:
            return None, f"not asked: {MAX_IN_FLIGHT} checks are already under way"
        self.in_flight += 1
        upstream = Upstream(via.host, via.port)
        question = query[12:]
        try:
            raw = await upstream.udp(query, question, self.timeout)
            if raw[2] & 0x02:  # TC: the records did not fit, ask again over TCP
                raw = await upstream.tcp(query, question, self.timeout, reusable=False)
            return dnslib.DNSRecord.parse(raw), ""
        except UpstreamError as exc:
            return None, str(exc)
        except (dnslib.DNSError, ValueError, IndexError) as exc:
            return None, f"an unreadable reply ({exc})"
        finally:
            upstream.close()
            self.in_flight -= 1

    async def check(self, via: Via, query: bytes, own: dnslib.DNSRecord, zone: str,
                    zone_soa: dnslib.DNSRecord | None) -> dict:
        """The `via` section of an /explain answer: what `via` said, and what that means.

        `zone_soa`: mcsdns's reply to `<zone> SOA`, whose SOA a negative answer from mcsdns carries."""
        theirs, error = await self.ask(via, query)
        doc: dict = {"server": via.text, "source": via.source, "rcode": None, "answer": [], "soa": None}
        if theirs is not None:
            doc["rcode"] = rcode_text(theirs)
            doc["answer"] = sorted(_rdata(rr) for rr in theirs.rr)
            doc["soa"] = _soa_text(theirs)
        doc["verdict"], doc["reason"] = verdict(own, theirs, error, via, zone, _soa(zone_soa.rr) if zone_soa else None)
        return doc


def rcode_text(msg: dnslib.DNSRecord) -> str:
    return str(dnslib.RCODE.get(msg.header.rcode, str(msg.header.rcode)))


def _rdata(rr: dnslib.RR) -> str:
    """`TYPE rdata` of a record, lower-case: owner and TTL aside (a cache lowers TTLs, CoreDNS keeps names)."""
    return f"{dnslib.QTYPE.get(rr.rtype, rr.rtype)} {rr.rdata.toZone()}".lower()


def _soa(records: list[dnslib.RR]) -> tuple[str, str, str] | None:
    """(owner, mname, rname) of the first SOA among `records`, lower-case, or None."""
    for rr in records:
        if rr.rtype == dnslib.QTYPE.SOA:
            return str(rr.rname).lower(), str(rr.rdata.mname).lower(), str(rr.rdata.rname).lower()
    return None


def _soa_text(msg: dnslib.DNSRecord) -> str | None:
    soa = _soa(msg.auth)
    return f"{soa[0]} SOA {soa[1]} {soa[2]}" if soa else None


def verdict(own: dnslib.DNSRecord, theirs: dnslib.DNSRecord | None, error: str, via: Via, zone: str,
            own_soa: tuple[str, str, str] | None) -> tuple[str, str]:
    """(`same` | `not_forwarded` | `differs` | `unknown`, one sentence naming the fix)."""
    who = f"the cluster's DNS ({via.text}, from {via.source})" if via.source != "given" else f"the DNS server {via.text}"
    fix = f"{who} does not forward {zone} to mcsdns: add the stub zone ({INSTALL_DOC})"
    if theirs is None:
        if error.startswith("not asked"):
            return "unknown", error
        return "not_forwarded", (f"{fix}. It gave no answer ({error}): a stub zone whose `forward` address has no "
                                 "mcsdns behind it makes CoreDNS wait 5 s, then answer SERVFAIL; the address must be "
                                 "the mcsdns Service's ClusterIP")  # fmt: skip
    mine, other = rcode_text(own), rcode_text(theirs)
    if other in ("SERVFAIL", "REFUSED") and other != mine:
        return "not_forwarded", (f"{fix}. It answered {other}: with a stub zone in place, its `forward` address "
                                 "answers nothing (it must be the mcsdns Service's ClusterIP); without one, the "
                                 "upstream resolvers it forwards everything else to failed")  # fmt: skip
    their_soa = _soa(theirs.auth)
    negative = other == "NXDOMAIN" or (other == "NOERROR" and not theirs.rr)
    if negative and (their_soa is None or own_soa is not None and their_soa[1:] != own_soa[1:]):
        seen = f"the SOA of {their_soa[0]} ({their_soa[1]})" if their_soa else "no SOA"
        mcsdns_soa = own_soa[1] if own_soa else f"ns.dns.{zone}."
        return "not_forwarded", (f"{fix}. It answered {other} with {seen}, not mcsdns's {mcsdns_soa}: the "
                                 f"question went to other servers (without a stub zone, CoreDNS sends {zone} "
                                 "to its upstream resolvers, out of the cluster)")  # fmt: skip
    if other == mine and sorted(_rdata(rr) for rr in theirs.rr) == sorted(_rdata(rr) for rr in own.rr):
        return "same", f"{who} answers the same: it brings {zone} to mcsdns"
    return "differs", (f"{who} answers differently ({other}, {len(theirs.rr)} record(s)): its cache may still hold "
                       "an older answer (the stub zone's `cache 5` keeps one 5 s); if this lasts, its stub zone "
                       f"forwards {zone} to another server than this mcsdns: check its `forward` address ({INSTALL_DOC})")
