"""The DNS vocabulary: type, class and rcode numbers, their text names, and what an answer is.

The bottom of the package: it imports nothing from mcsdns, so the zone logic (`compile`,
`reverse`, `dnssd`), the wire format (`wire`) and the reporting (`metrics`, `querylog`) share one
copy of each number and name instead of re-declaring them. Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, NamedTuple

# Types (RFC 1035 and successors).
A, NS, CNAME, SOA, PTR, MX, TXT, AAAA, SRV, DNAME, OPT = 1, 2, 5, 6, 12, 15, 16, 28, 33, 39, 41
IXFR, AXFR, ANY = 251, 252, 255
# Classes.
CLASS_IN, CLASS_CH = 1, 3
# Rcodes (BADVERS is extended: 4 bits in the header, the rest in the OPT record).
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
BADVERS = 16

# RFC 3597 / miekg type and class names for the common ones; others print as TYPE123 / CLASS5.
TYPE_TEXT = {
    1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 13: "HINFO", 15: "MX", 16: "TXT", 28: "AAAA",
    33: "SRV", 35: "NAPTR", 39: "DNAME", 43: "DS", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 50: "NSEC3",
    52: "TLSA", 64: "SVCB", 65: "HTTPS", 99: "SPF", 251: "IXFR", 252: "AXFR", 255: "ANY", 257: "CAA",
}  # fmt: skip
CLASS_TEXT = {1: "IN", 3: "CH", 4: "HS", 254: "NONE", 255: "ANY"}
RCODE_TEXT = {
    0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED",
    6: "YXDOMAIN", 7: "YXRRSET", 8: "NXRRSET", 9: "NOTAUTH", 10: "NOTZONE", 16: "BADVERS",
}  # fmt: skip


def type_text(qtype: int) -> str:
    """A type's name as dig and CoreDNS print it (TYPE123 for the rest)."""
    return TYPE_TEXT.get(qtype) or f"TYPE{qtype}"


@dataclass(frozen=True, slots=True)
class Absolute:
    """A record's target name outside the zone it is rendered in, as all its labels (a reverse
    zone's PTR names a forward-zone name): written out whole. Targets are otherwise labels left of
    the zone, compressed against the question."""

    labels: tuple[str, ...]


class Record(NamedTuple):
    """A resource record with its owner relative to the zone (None = the query name as asked).

    Record, Answer (and wire.Body, objects.Address) are named tuples rather than frozen
    dataclasses: just as immutable, and cheaper to build (a frozen dataclass sets each field
    through object.__setattr__), which a sync pays once per record of every service.
    """

    owner: tuple[str, ...] | None
    rtype: int
    ttl: int
    # A/AAAA: address text; SRV: (priority, weight, port, target); TXT: str; NS: target;
    # PTR: target (DNS-SD browsing, --dns-sd) or Absolute (reverse zones, --reverse-cidr)
    data: object


Owned = tuple[tuple[str, ...], Record]
"""A record with its owner's labels, in no zone yet: what a zone transfer, the IXFR journal and
`mcsdns zone` write into the zone they serve (zonefile.owned_records, dnssd.DnsSd.snapshot)."""


def difference(old: Collection[Owned], new: Collection[Owned]) -> tuple[list[Owned], list[Owned]]:
    """(deleted, added): the records of `old` not in `new` and of `new` not in `old`, each in its own
    order. What an IXFR journal entry holds for one set of records that changed (journal.Journal.record
    for a service's records, dnssd.DnsSd.drain for a DNS-SD name's)."""
    was = old if isinstance(old, (set, frozenset)) else set(old)  # the journal's are sets already
    now = new if isinstance(new, (set, frozenset)) else set(new)
    return [r for r in old if r not in now], [r for r in new if r not in was]


class Answer(NamedTuple):
    """What the server says: rcode, records, and whether the zone SOA goes in authority."""

    rcode: int
    answer: tuple[Record, ...] = ()
    additional: tuple[Record, ...] = ()
    soa: bool = False
    apex_soa: bool = False  # the SOA is the answer itself (apex SOA query)
    # --local-cluster: how many leading answer records are the local cluster's when the rest are
    # remote (0 < local < len(answer)); 0 = one group. --loadbalance rotates each group on its own.
    local: int = 0

    @property
    def nxdomain(self) -> bool:
        return self.rcode == NXDOMAIN


def wire_length(labels: tuple[str, ...]) -> int:
    """Bytes of `labels` in a DNS name on the wire (a length byte each), without the root."""
    return sum(len(label.encode()) + 1 for label in labels)
