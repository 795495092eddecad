"""The answer checker that runs beside dnsperf: are the replies under load right, not just fast?

dnsperf counts response codes only, so a server that answered fast with the wrong records (a cache
returning another name's reply, a question echoed in the wrong spelling) would still look good. The
checker sends a few hundred queries per second, picked at random from the same query file, over UDP
to the server under load, and compares every reply with what the data set says
(`dataset.records`): the question echoed byte for byte (letter case included), the rcode, the answer
records (owner, type and data; names compared case-insensitively, as DNS does), no truncation, and
the SOA in the authority section of a negative answer. A query without a reply within the timeout
is counted as unanswered, not as wrong (under overload a server may drop); any wrong reply fails the
run (`python -m benchmarks run` exits non-zero and results.md lists it).
"""

from __future__ import annotations

import random
import select
import socket
import threading
import time
from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype

from .dataset import ZONE, Spec, records

EXAMPLES = 5  # wrong replies kept, with what was expected, per measurement


class Expected:
    """What every server must answer for a name and type, from the data set."""

    def __init__(self, spec: Spec) -> None:
        self.rrs: dict[tuple[str, str], set[str]] = {}
        self.names: set[str] = set()  # owners and every name between them and the zone (empty non-terminals)
        for owner, rdtype, data in records(spec):
            text = dns.rdata.from_text(dns.rdataclass.IN, rdtype, data).to_text()  # as replies print it
            self.rrs.setdefault((owner, rdtype), set()).add(text.lower())
            name = owner
            while name.endswith("." + ZONE) and name not in self.names:
                self.names.add(name)
                name = name.split(".", 1)[1]

    def answer(self, name: str, rdtype: str) -> tuple[int, frozenset[str]]:
        """(rcode, record data) for a question; the name in any letter case, without the final dot."""
        key = name.lower().rstrip(".")
        data = self.rrs.get((key, rdtype.upper()))
        if data:
            return dns.rcode.NOERROR, frozenset(data)
        return (dns.rcode.NOERROR if key in self.names else dns.rcode.NXDOMAIN), frozenset()


def verdict(expected: Expected, name: str, rdtype: str, reply: dns.message.Message, edns: bool = True) -> str | None:
    """None when `reply` is right for the question (`name` as sent, `rdtype`); else what is wrong.

    Sent with EDNS (4096 bytes) every answer fits, so TC is wrong; sent without, a reply with TC
    set may hold only part of the answer (each record it holds must be right)."""
    if len(reply.question) != 1:
        return f"{len(reply.question)} questions in the reply"
    q = reply.question[0]
    sent = name if name.endswith(".") else name + "."
    if q.name.to_text() != sent or dns.rdatatype.to_text(q.rdtype) != rdtype.upper():
        return f"question echoed as {q.name.to_text()} {dns.rdatatype.to_text(q.rdtype)}"
    truncated = bool(reply.flags & dns.flags.TC)
    if truncated and edns:
        return "truncated"
    rcode, data = expected.answer(name, rdtype)
    if reply.rcode() != rcode:
        return f"rcode {dns.rcode.to_text(reply.rcode())}, expected {dns.rcode.to_text(rcode)}"
    got: set[str] = set()
    owner = sent.lower()
    for rrset in reply.answer:
        if rrset.name.to_text().lower() != owner or dns.rdatatype.to_text(rrset.rdtype) != rdtype.upper():
            return f"answer record {rrset.name.to_text()} {dns.rdatatype.to_text(rrset.rdtype)}"
        got |= {rd.to_text().lower() for rd in rrset}
    if got != data and not (truncated and got <= data):
        missing, extra = sorted(data - got)[:3], sorted(got - data)[:3]
        return f"answer data differs (missing {missing}, unexpected {extra})"
    if not data and not truncated and not any(rrset.rdtype == dns.rdatatype.SOA for rrset in reply.authority):
        return "negative answer without SOA in authority"
    return None


@dataclass
class Tally:
    sent: int = 0
    checked: int = 0  # replies compared
    wrong: int = 0
    unanswered: int = 0  # no reply within the timeout (not an error: a loaded server may drop)
    examples: list[str] = field(default_factory=list)

    def add(self, other: "Tally") -> None:
        self.sent += other.sent
        self.checked += other.checked
        self.wrong += other.wrong
        self.unanswered += other.unanswered
        self.examples += other.examples[: max(0, EXAMPLES - len(self.examples))]


class Checker:
    """A thread sending `rate` queries per second from `lines` to 127.0.0.1:`port` until `stop()`."""

    def __init__(self, port: int, lines: list[tuple[str, str]], expected: Expected, *, rate: float = 300.0,
                 timeout: float = 1.0, seed: int = 11, edns: bool = True) -> None:
        self.port = port
        self.edns = edns  # as dnsperf sends the mix (queries.needs_edns)
        self.lines = lines
        self.expected = expected
        self.rate = rate
        self.timeout = timeout
        self.rng = random.Random(seed)
        self.tally = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="answer-checker", daemon=True)
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def __enter__(self) -> "Checker":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> Tally:
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"answer checker failed: {self._error}") from self._error
        return self.tally

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self._error = exc

    def _loop(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        pending: dict[int, tuple[str, str, float]] = {}
        next_id = self.rng.randrange(65536)
        interval = 1.0 / self.rate
        due = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= due and len(pending) < 60000:
                    name, rdtype = self.lines[self.rng.randrange(len(self.lines))]
                    while next_id in pending:
                        next_id = (next_id + 1) & 0xFFFF
                    query = (dns.message.make_query(name, rdtype, use_edns=0, payload=4096, id=next_id) if self.edns
                             else dns.message.make_query(name, rdtype, id=next_id))
                    try:
                        sock.sendto(query.to_wire(), ("127.0.0.1", self.port))
                        pending[next_id] = (name, rdtype, now)
                        self.tally.sent += 1
                    except BlockingIOError:
                        pass
                    next_id = (next_id + 1) & 0xFFFF
                    due = max(due + interval, now - 1.0)  # catch up after a stall, but not in a burst
                ready, _, _ = select.select([sock], [], [], max(0.0, min(due - time.monotonic(), 0.05)))
                if ready:
                    self._drain(sock, pending)
                for qid in [q for q, (_, _, t) in pending.items() if now - t > self.timeout]:
                    del pending[qid]
                    self.tally.unanswered += 1
            end = time.monotonic() + min(self.timeout, 0.5)  # the last replies
            while pending and time.monotonic() < end:
                if select.select([sock], [], [], 0.05)[0]:
                    self._drain(sock, pending)
            self.tally.unanswered += len(pending)
        finally:
            sock.close()

    def _drain(self, sock: socket.socket, pending: dict[int, tuple[str, str, float]]) -> None:
        while True:
            try:
                data = sock.recv(65535)
            except BlockingIOError:
                return
            if len(data) < 2:
                continue
            sent = pending.pop(int.from_bytes(data[:2], "big"), None)
            if sent is None:
                continue  # a late reply to a query already counted unanswered
            name, rdtype, _ = sent
            self.tally.checked += 1
            try:
                problem = verdict(self.expected, name, rdtype, dns.message.from_wire(data), self.edns)
            except dns.exception.DNSException as exc:
                problem = f"unparseable reply ({type(exc).__name__})"
            if problem is not None:
                self.tally.wrong += 1
                if len(self.tally.examples) < EXAMPLES:
                    self.tally.examples.append(f"{name} {rdtype}: {problem}")
