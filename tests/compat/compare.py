"""Replies -> comparable form; differences; the running tally the summary prints.

What is compared (docs/compatibility.md, "Method"): rcode; the header flags
(AA, TC and the rest); the answer, authority and additional sections as sets
of `owner ttl class type rdata` (owner names case-insensitively, rdata -- SRV
targets, SOA names -- exactly, so the zone's case in targets is checked); the
OPT record (version, payload size, DO, options). The SOA serial is ignored. A
truncated reply (TC) is compared on its header and, for address answers, on
how many records it kept; which records a truncated reply keeps depends on
record order, which is unspecified.
"""

from __future__ import annotations

import re
import struct
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.ipv6
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from .dnsclient import Ask, Server, exchange


@dataclass(frozen=True)
class Reply:
    """A reply in comparable form (None fields: no reply at all / unparseable)."""

    rcode: str
    flags: frozenset[str]
    answer: frozenset[str]
    authority: frozenset[str]
    additional: frozenset[str]
    edns: tuple | None
    error: str = ""

    @property
    def truncated(self) -> bool:
        return "TC" in self.flags

    def short(self) -> str:
        if self.error:
            return f"<{self.error}>"
        parts = [self.rcode, " ".join(sorted(self.flags))]
        for title, section in (("AN", self.answer), ("NS", self.authority), ("AR", self.additional)):
            if section:
                parts.append(f"{title}: " + "; ".join(sorted(section)))
        if self.edns:
            parts.append(f"OPT {self.edns}")
        return " | ".join(parts)


NO_REPLY = Reply("", frozenset(), frozenset(), frozenset(), frozenset(), None, "no reply")


def _records(rrsets) -> frozenset[str]:
    out = set()
    for rrset in rrsets:
        owner = rrset.name.to_text().lower()
        for rd in rrset:
            if rd.rdtype == dns.rdatatype.SOA:
                text = f"{rd.mname} {rd.rname} SERIAL {rd.refresh} {rd.retry} {rd.expire} {rd.minimum}"
            else:
                text = rd.to_text()
            out.add(f"{owner} {rrset.ttl} {dns.rdataclass.to_text(rrset.rdclass)} "
                    f"{dns.rdatatype.to_text(rrset.rdtype)} {text}")
    return frozenset(out)


def normalize(wire: bytes | None) -> Reply:
    """The comparable form of a reply (a fast reader, dnspython for anything unusual)."""
    if wire is None:
        return NO_REPLY
    try:
        fast = read_fast(wire)
    except (IndexError, ValueError, struct.error):
        fast = None
    return fast if fast is not None else normalize_slow(wire)


def normalize_slow(wire: bytes | None) -> Reply:
    """The comparable form of a reply, read by dnspython."""
    if wire is None:
        return NO_REPLY
    try:
        msg = dns.message.from_wire(wire)
    except dns.exception.DNSException as err:
        return Reply("", frozenset(), frozenset(), frozenset(), frozenset(), None, f"unparseable: {err}")
    edns = None
    if msg.edns >= 0:
        options = tuple(sorted((int(o.otype), o.to_wire().hex()) for o in msg.options))
        edns = (msg.edns, int(msg.payload), bool(msg.ednsflags & dns.flags.DO), options)
    return Reply(
        dns.rcode.to_text(msg.rcode()),
        frozenset(dns.flags.to_text(msg.flags).split()),
        _records(msg.answer),
        _records(msg.authority),
        _records(msg.additional),
        edns,
    )


# --------------------------------------------------------------------------- a fast reader
#
# dnspython takes ~0.5 ms per message here; the suite reads ~60k. This reader
# handles what the two servers send (plain labels; A, AAAA, SRV, SOA, TXT, NS,
# CNAME, PTR, OPT) and returns None for anything else, which then goes to
# dnspython. test_differential checks that both readers agree.

_FLAGS = ((0x8000, "QR"), (0x0400, "AA"), (0x0200, "TC"), (0x0100, "RD"), (0x0080, "RA"),
          (0x0020, "AD"), (0x0010, "CD"))
_PLAIN = re.compile(rb"^[A-Za-z0-9_*-]*$")
_TXT_PLAIN = re.compile(rb"^[A-Za-z0-9 ._:/=+-]*$")
_TYPES = {t: dns.rdatatype.to_text(t) for t in (1, 2, 5, 6, 12, 16, 28, 33)}
_RR = struct.Struct(">HHIH")


class _Unusual(Exception):
    """Something the fast reader leaves to dnspython."""


def _name(wire: bytes, i: int) -> tuple[str, int]:
    """(name text with trailing dot, offset after the name where it started)."""
    labels = []
    end = -1
    jumps = 0
    while True:
        n = wire[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0 == 0xC0:
            if end < 0:
                end = i + 2
            i = ((n & 0x3F) << 8) | wire[i + 1]
            jumps += 1
            if jumps > 64:
                raise _Unusual("pointer loop")
            continue
        if n & 0xC0:
            raise _Unusual("label type")
        label = wire[i + 1 : i + 1 + n]
        if len(label) != n or not _PLAIN.match(label):
            raise _Unusual("label text")
        labels.append(label.decode())
        i += 1 + n
    return (".".join(labels) + "." if labels else "."), (end if end >= 0 else i)


def _rdata(wire: bytes, rtype: int, i: int, end: int) -> str:
    if rtype == 1:
        if end - i != 4:
            raise _Unusual("A length")
        return ".".join(str(b) for b in wire[i:end])
    if rtype == 28:
        if end - i != 16:
            raise _Unusual("AAAA length")
        return dns.ipv6.inet_ntoa(wire[i:end])
    if rtype == 33:
        prio, weight, port = struct.unpack_from(">HHH", wire, i)
        target, _ = _name(wire, i + 6)
        return f"{prio} {weight} {port} {target}"
    if rtype == 6:
        mname, j = _name(wire, i)
        rname, j = _name(wire, j)
        _serial, refresh, retry, expire, minimum = struct.unpack_from(">IIIII", wire, j)
        return f"{mname} {rname} SERIAL {refresh} {retry} {expire} {minimum}"
    if rtype in (2, 5, 12):
        return _name(wire, i)[0]
    if rtype == 16:
        parts = []
        while i < end:
            n = wire[i]
            text = wire[i + 1 : i + 1 + n]
            if not _TXT_PLAIN.match(text):
                raise _Unusual("TXT text")
            parts.append('"' + text.decode() + '"')
            i += 1 + n
        return " ".join(parts)
    raise _Unusual(f"type {rtype}")


def read_fast(wire: bytes) -> Reply | None:
    try:
        qid, flags, qd, an, ns, ar = struct.unpack_from(">HHHHHH", wire)
        i = 12
        for _ in range(qd):
            _, i = _name(wire, i)
            i += 4
        sections: list[set[str]] = [set(), set(), set()]
        edns = None
        ext_rcode = 0
        for index in range(an + ns + ar):
            owner, i = _name(wire, i)
            rtype, rclass, ttl, rdlen = _RR.unpack_from(wire, i)
            i += 10
            end = i + rdlen
            if end > len(wire):
                raise _Unusual("truncated record")
            if rtype == 41:
                if edns is not None or index < an + ns:
                    raise _Unusual("OPT placement")
                edns = ((ttl >> 16) & 0xFF, rclass, bool(ttl & 0x8000), _options(wire, i, end))
                ext_rcode = ttl >> 24
            else:
                if rclass != 1:
                    raise _Unusual("class")
                section = 0 if index < an else 1 if index < an + ns else 2
                sections[section].add(f"{owner.lower()} {ttl} IN {_TYPES[rtype] if rtype in _TYPES else _unusual()} "
                                      f"{_rdata(wire, rtype, i, end)}")
            i = end
        if i != len(wire):
            raise _Unusual("trailing data")
    except _Unusual:
        return None
    return Reply(
        dns.rcode.to_text((flags & 0xF) | (ext_rcode << 4)),
        frozenset(text for bit, text in _FLAGS if flags & bit),
        frozenset(sections[0]), frozenset(sections[1]), frozenset(sections[2]),
        edns,
    )


def _options(wire: bytes, i: int, end: int) -> tuple[tuple[int, str], ...]:
    out = []
    while i < end:
        code, length = struct.unpack_from(">HH", wire, i)
        out.append((code, wire[i + 4 : i + 4 + length].hex()))
        i += 4 + length
    if i != end:
        raise _Unusual("EDNS options")
    return tuple(sorted(out))


def _unusual() -> str:
    raise _Unusual("type")


def differences(a: Reply, b: Reply) -> list[str]:
    """Which parts of two replies to the same question differ ([] = equal).

    A missing or unreadable reply is never equal to anything, not even to another
    silence: two silent servers are a failure to look at, not an agreement.
    """
    if a.error or b.error:
        return ["reply"]
    out = []
    if a.rcode != b.rcode:
        out.append("rcode")
    if a.flags != b.flags:
        out.append("flags")
    if a.edns != b.edns:
        out.append("edns")
    if a.truncated and b.truncated:
        if _address_only(a) and _address_only(b) and len(a.answer) != len(b.answer):
            out.append("answer")
        return out
    for name in ("answer", "authority", "additional"):
        if getattr(a, name) != getattr(b, name):
            out.append(name)
    return out


def _address_only(r: Reply) -> bool:
    return all(line.split(" ")[3] in ("A", "AAAA") for line in r.answer)


# --------------------------------------------------------------------------- running both


def ask_both(ports: tuple[Server, Server], asks: list[Ask], **kw) -> tuple[list[Reply], list[Reply]]:
    """The same questions to both servers at once; normalized replies in question order."""
    def timed(port: Server):
        started = time.monotonic()
        replies = exchange(port, asks, **kw)
        return replies, time.monotonic() - started

    with ThreadPoolExecutor(2) as pool:
        fa = pool.submit(timed, ports[0])
        fb = pool.submit(timed, ports[1])
        (wa, ta), (wb, tb) = fa.result(), fb.result()
    with TALLY.lock:
        TALLY.seconds["coredns"] += ta
        TALLY.seconds["mcsdns"] += tb
    return [normalize(w) for w in wa], [normalize(w) for w in wb]


# --------------------------------------------------------------------------- the tally


@dataclass
class Difference:
    phase: str
    form: str
    ask: Ask
    parts: list[str]
    coredns: Reply
    mcsdns: Reply
    decision: str | None  # id of the documented decision that explains it, None = unexpected

    def describe(self) -> str:
        why = f"documented: {self.decision}" if self.decision else "UNEXPECTED"
        return (f"[{self.phase}] {self.ask.describe()}: {', '.join(self.parts)} ({why})\n"
                f"    coredns: {self.coredns.short()}\n    mcsdns:  {self.mcsdns.short()}")


@dataclass
class Tally:
    """Questions compared and differences, by phase and by name form."""

    compared: Counter = field(default_factory=Counter)  # form -> n
    differed: Counter = field(default_factory=Counter)  # form -> n
    documented: Counter = field(default_factory=Counter)  # decision id -> n
    phases: Counter = field(default_factory=Counter)  # phase -> n
    by_transport: Counter = field(default_factory=Counter)
    unexpected: list[Difference] = field(default_factory=list)
    examples: dict[str, Difference] = field(default_factory=dict)  # decision id -> first example
    documented_all: list[Difference] = field(default_factory=list)
    coredns_version: str = ""
    mcsdns_version: str = ""
    notes: list[str] = field(default_factory=list)
    seconds: Counter = field(default_factory=Counter)  # server -> seconds spent answering
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, phase: str, form: str, ask: Ask, diff: Difference | None) -> None:
        with self.lock:
            self.compared[form] += 1
            self.phases[phase] += 1
            self.by_transport[ask.transport] += 1
            if diff is None:
                return
            self.differed[form] += 1
            if diff.decision:
                for key in diff.decision.split("+"):
                    self.documented[key] += 1
                self.examples.setdefault(diff.decision, diff)
                self.documented_all.append(diff)
            else:
                self.unexpected.append(diff)

    @property
    def total(self) -> int:
        return sum(self.compared.values())

    def summary(self) -> str:
        if not self.total:
            return ""
        total_diff = sum(self.differed.values())
        lines = [
            f"CoreDNS {self.coredns_version} (kubernetes plugin, multicluster clusterset.local) vs "
            f"mcsdns {self.mcsdns_version}, same kube-apiserver:",
            f"  {self.total} questions compared, {total_diff} differed: "
            f"{total_diff - len(self.unexpected)} explained by documented decisions, {len(self.unexpected)} unexpected.",
            "  by phase: " + ", ".join(f"{k} {v}" for k, v in sorted(self.phases.items())),
            "  by transport: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_transport.items())),
            f"  {'form':<22}{'compared':>9}{'differed':>9}",
        ]
        for form in sorted(self.compared):
            lines.append(f"  {form:<22}{self.compared[form]:>9}{self.differed[form]:>9}")
        if self.documented:
            lines.append("  differences by documented decision (docs/compatibility.md; one difference may need two):")
            for key, n in sorted(self.documented.items()):
                lines.append(f"    {key}: {n}")
        if self.seconds:
            lines.append("  time to answer every question: " + ", ".join(
                f"{k} {v:.1f}s" for k, v in sorted(self.seconds.items())))
        for note in self.notes:
            lines.append(f"  {note}")
        for diff in self.unexpected[:20]:
            lines.append("  " + diff.describe().replace("\n", "\n  "))
        return "\n".join(lines)

    def details(self) -> str:
        """One example per documented decision (for docs/compatibility.md and reviews)."""
        return "\n".join(f"{key}:\n  " + diff.describe().replace("\n", "\n  ")
                         for key, diff in sorted(self.examples.items()))


TALLY = Tally()


def compare(phase: str, ports: tuple[Server, Server], items: list[tuple[tuple[str, ...], Ask]], ds, *,
            tally: Tally | None = TALLY, record: bool = True, ns_address: str | None = None) -> list[Difference]:
    """Ask both servers (CoreDNS first in `ports`), classify each difference; all differences returned.

    `ns_address`: what mcsdns advertises (--ns-address; default the harness's loopback one).

    For a question about a service with a twin (generator.Dataset.twins), CoreDNS is also
    asked the same question about the twin: the decisions expect that reply from mcsdns.
    """
    from .decisions import Context, explain, map_twin
    from .generator import classify, twin_ask, twin_of
    from .harness import NS_ADDRESS

    asks = [a for _, a in items]
    coredns, mcsdns = ask_both(ports, asks)
    twins: dict[int, tuple[str, Ask]] = {}
    for i, (labels, ask) in enumerate(items):
        twin = twin_of(labels, ds)
        if twin is not None:
            twins[i] = (twin, twin_ask(ask, labels, twin))
    twin_replies: dict[int, Reply] = {}
    if twins:
        order = sorted(twins)
        got = [normalize(w) for w in exchange(ports[0], [twins[i][1] for i in order], timeout=2.0, retries=2)]
        twin_replies = dict(zip(order, got))

    def context(i: int) -> "Context":
        labels, ask = items[i]
        form, tags = classify(labels, ds)
        twin = None
        if i in twin_replies:
            low = tuple(x.lower() for x in labels)
            twin = map_twin(twin_replies[i], twins[i][0], low[-3], low[-2])
        return Context(form, tags, ask, coredns[i], twin, ns_address or NS_ADDRESS)

    # A lost datagram on a busy machine is not a difference: ask again, patiently, where a server
    # seemed silent and no decision expects what the other said (a server that never answers a
    # question stays silent, and that stays a difference).
    silent = [i for i, (a, b) in enumerate(zip(coredns, mcsdns))
              if (a.error or b.error) and not explain(context(i), b)]
    if silent:
        again = ask_both(ports, [asks[i] for i in silent], timeout=3.0, retries=2)
        for n, i in enumerate(silent):
            coredns[i], mcsdns[i] = again[0][n], again[1][n]
    out = []
    for i, ((labels, ask), a, b) in enumerate(zip(items, coredns, mcsdns)):
        ctx = context(i)
        parts = differences(a, b)
        diff = None
        if parts:
            diff = Difference(phase, ctx.form, ask, parts, a, b, explain(ctx, b))
            out.append(diff)
        if record and tally is not None:
            tally.record(phase, ctx.form, ask, diff)
    return out


def by_decision(diffs: list[Difference]) -> dict[str | None, list[Difference]]:
    out: dict[str | None, list[Difference]] = defaultdict(list)
    for d in diffs:
        out[d.decision].append(d)
    return out
