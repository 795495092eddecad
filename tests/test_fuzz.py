"""Fuzzing the two inputs mcsdns does not control: packets and Kubernetes objects.

Packets: random and mutated queries go through `Resolver.handle` in-process
(the same call the UDP and TCP listeners make) and through `Metrics.observe`
(which the listeners call on the same bytes). Invariants, for every input:

* nothing raises;
* the result is None (dropped), bytes, or a Forward of that very query;
* every reply parses with dnspython (strict: no trailing bytes), is a response
  and carries the query's ID; a question, when present, is the query's own;
* no amplification: over UDP a reply never exceeds 512 bytes unless the query
  carried a valid OPT record, and then never the size it advertised (65535 over TCP).

The CI run does FUZZ_INPUTS (100k) seeded mutations in a tight loop, plus a
hypothesis run for shrinking. A long run is `python tests/test_fuzz.py
--inputs 5000000 --seed N` (see docs/reliability.md).

Objects: ServiceImports and EndpointSlices with wrong types, missing fields,
huge lists, duplicates, invalid IPs and labels. `objects.convert` either
returns a record or raises InvalidObject (never anything else); a record it
returns compiles, and every answer it leads to parses; a rejected object is
counted under mcsdns_objects_rejected_total{reason} and leaves the rest of
the table exactly as it was.

TCP streams whose length prefixes lie go through a real in-process listener.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import logging
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.rcode
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from cases import MAIN, Z, check, make_query  # noqa: E402
from mcsdns.metrics import Metrics  # noqa: E402
from mcsdns.querylog import format_line  # noqa: E402
from mcsdns.objects import InvalidObject, convert  # noqa: E402
from mcsdns.resolve import Forward, Resolver  # noqa: E402
from mcsdns.sources.manifests import ManifestSource  # noqa: E402
from mcsdns.store import Store  # noqa: E402
from mcsdns.table import Table, TableConfig  # noqa: E402
from mcsdns.transport import DnsServer, Listener, TcpLimits  # noqa: E402
from mcsdns.wire import error_reply  # noqa: E402
from testsupport.objects import headless_service
from testsupport.serverproc import FIXTURES, ROOT, Server  # noqa: E402

FUZZ_INPUTS = int(os.environ.get("MCSDNS_FUZZ_INPUTS", "100000"))
FUZZ_SEED = int(os.environ.get("MCSDNS_FUZZ_SEED", "1645"))

HEADER = struct.Struct(">HHHHHH")
QR = 0x8000
OPT = 41


# =========================================================================== the server under test


def big_service_manifest(directory: Path) -> Path:
    """A headless service with 120 endpoints in `testns`: answers far beyond 512 bytes (truncation)."""
    endpoints = [{"addresses": [f"10.20.{i // 200}.{i % 200 + 1}"], "hostname": f"pod-{i}"} for i in range(100)]
    endpoints += [{"addresses": [f"fd00::{i:x}"]} for i in range(20)]
    docs = headless_service("testns", "many", endpoints)
    path = directory / "big.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def build(paths: list[Path], forwarding: bool = False, on_error=None) -> Resolver:
    """As tests/test_zone.py's build(), with a rejection hook and optional forwarding."""
    store = Store()
    table = Table(TableConfig(("clusterset.local",), 5, frozenset({"testns"}), ("127.0.0.1",)), store)
    store.listener = table.on_change
    ManifestSource(paths, store, on_error=on_error).load()
    return Resolver(table, forwarding=forwarding)


@pytest.fixture(scope="module")
def resolvers(tmp_path_factory) -> tuple[Resolver, Resolver]:
    """(authoritative only, forwarding) over the contract fixture plus a big headless service."""
    paths = [FIXTURES / "contract.yaml", big_service_manifest(tmp_path_factory.mktemp("big"))]
    plain = build(paths)
    # The forwarding resolver shares the table: only out-of-zone names differ (Forward, not REFUSED).
    return plain, Resolver(plain.table, forwarding=True)


# =========================================================================== seeds


def seed_queries() -> list[bytes]:
    """Valid queries that reach every branch: compiled, per-query, negative, server-level, big."""
    out: list[bytes] = []
    rng = random.Random(7)
    names = [c.qname for c in MAIN] + ["many.testns.svc." + Z, "_http._tcp.many.testns.svc." + Z, "pod-7.c1.many.testns.svc." + Z,
                                       "example.com.", ".", "clusterset.local.example.", "svc1.testns.svc.clusterset.local.evil."]
    qtypes = ["A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY", "AXFR", "IXFR", "HTTPS", "CNAME", "PTR", "HINFO", "TYPE65535"]
    for c in MAIN:
        out.append(make_query(c).to_wire())
        out.append(make_query(c, edns=False).to_wire())
        out.append(make_query(c, want_dnssec=True).to_wire())
    for name in names:
        for qtype in rng.sample(qtypes, 4):
            mixed = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in name)
            payload = rng.choice([0, 1, 512, 1232, 4096, 65535])
            q = dns.message.make_query(mixed, qtype, use_edns=0 if payload else False, payload=payload or 1232)
            out.append(q.to_wire())
    for qtype in ("A", "SRV", "AAAA", "ANY"):
        out.append(dns.message.make_query("many.testns.svc." + Z, qtype, use_edns=False).to_wire())
        out.append(dns.message.make_query("many.testns.svc." + Z, qtype, use_edns=0, payload=1232).to_wire())
    # Class CH, an OPT with version 1 (BADVERS), an option-carrying OPT.
    ch = bytearray(dns.message.make_query("svc1.testns.svc." + Z, "A", use_edns=False).to_wire())
    ch[-1] = 3
    out.append(bytes(ch))
    out.append(dns.message.make_query("svc1.testns.svc." + Z, "A", use_edns=1).to_wire())
    out.append(_with_opt(dns.message.make_query("svc1.testns.svc." + Z, "A", use_edns=False).to_wire(), options=b"\x00\x0a\x00\x08" + b"c" * 8))
    return out


def _with_opt(query: bytes, *, udp: int = 4096, ttl: int = 0, options: bytes = b"", owner: bytes = b"\x00", rdlen: int | None = None) -> bytes:
    """Append an OPT record (bumping ARCOUNT); `rdlen` may lie about the options' length."""
    head = bytearray(query[:12])
    ar = struct.unpack_from(">H", head, 10)[0] + 1
    struct.pack_into(">H", head, 10, ar & 0xFFFF)
    length = len(options) if rdlen is None else rdlen
    return bytes(head) + query[12:] + owner + struct.pack(">HHIH", OPT, udp, ttl, length & 0xFFFF) + options


SEEDS = seed_queries()


# =========================================================================== mutators


def _question_end(data: bytes) -> int:
    i = 12
    while i < len(data) and data[i] and data[i] < 64:
        i += data[i] + 1
    return i


def m_flip_bits(rng: random.Random, d: bytearray) -> bytearray:
    for _ in range(rng.randint(1, 8)):
        if d:
            d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
    return d


INTERESTING = (0, 1, 0x3F, 0x40, 0x7F, 0x80, 0xC0, 0xC0, 0xFF, 0x29, 0x0C)


def m_set_bytes(rng: random.Random, d: bytearray) -> bytearray:
    for _ in range(rng.randint(1, 6)):
        if d:
            d[rng.randrange(len(d))] = rng.choice(INTERESTING) if rng.random() < 0.5 else rng.randrange(256)
    return d


def m_truncate(rng: random.Random, d: bytearray) -> bytearray:
    return d[: rng.randrange(len(d) + 1)]


def m_append(rng: random.Random, d: bytearray) -> bytearray:
    return d + rng.randbytes(rng.choice((1, 2, 11, 64, 300)))


def m_insert_delete(rng: random.Random, d: bytearray) -> bytearray:
    at = rng.randrange(len(d) + 1)
    if rng.random() < 0.5:
        return d[:at] + rng.randbytes(rng.randint(1, 8)) + d[at:]
    return d[:at] + d[at + rng.randint(1, 8) :]


def m_counts_lie(rng: random.Random, d: bytearray) -> bytearray:
    if len(d) >= 12:
        field = rng.choice((4, 6, 8, 10))
        struct.pack_into(">H", d, field, rng.choice((0, 1, 2, 3, 255, 65535, rng.randrange(65536))))
    return d


def m_compression(rng: random.Random, d: bytearray) -> bytearray:
    """Pointers where none belong: to itself (a loop), out of range, forward, into the header."""
    if len(d) < 14:
        return d
    end = _question_end(d)
    at = rng.randrange(12, max(13, end + 1))
    target = rng.choice((at, 12, 0, 2, len(d) + 5, 0x3FFF, end, rng.randrange(len(d))))
    ptr = struct.pack(">H", 0xC000 | (target & 0x3FFF))
    if rng.random() < 0.5:
        return d[:at] + ptr + d[at + 2 :]  # overwrite
    return d[:at] + ptr + d[at:]  # insert


def m_label_past_end(rng: random.Random, d: bytearray) -> bytearray:
    """A label length byte that points beyond the message (or is an extended/reserved type)."""
    offsets = []
    i = 12
    while i < len(d) and d[i] and d[i] < 64:
        offsets.append(i)
        i += d[i] + 1
    if offsets:
        d[rng.choice(offsets)] = rng.choice((63, 62, len(d) % 64, 0x41, 0x80, 0xBF))
    return d


def m_huge_edns(rng: random.Random, d: bytearray) -> bytearray:
    """OPT records with huge option lists, lying lengths, odd owners, several OPTs, or in the wrong section."""
    if len(d) < 12:
        return d
    kind = rng.randrange(7)
    base = bytes(d)
    if kind == 0:  # options up to ~64 KiB
        size = rng.choice((4, 100, 1000, 4000, 30000, 65000))
        return bytearray(_with_opt(base, udp=rng.choice((0, 512, 4096, 65535)), options=b"\x00\x0c" + struct.pack(">H", size) + b"\x00" * size))
    if kind == 1:  # rdlength longer than what follows
        return bytearray(_with_opt(base, rdlen=rng.choice((1, 100, 65535)), options=b"\x00\x0a"))
    if kind == 2:  # two OPTs
        return bytearray(_with_opt(_with_opt(base), udp=65535))
    if kind == 3:  # an OPT whose owner is not the root (or a pointer)
        return bytearray(_with_opt(base, owner=rng.choice((b"\x01a\x00", b"\xc0\x0c", b"\xc0\xff"))))
    if kind == 4:  # version, ext-rcode and flags at random
        return bytearray(_with_opt(base, ttl=rng.randrange(1 << 32), udp=rng.randrange(65536)))
    if kind == 5:  # an OPT counted as an answer record instead of additional
        out = bytearray(_with_opt(base))
        an, ar = struct.unpack_from(">H", out, 6)[0], struct.unpack_from(">H", out, 10)[0]
        struct.pack_into(">HH", out, 6, (an + 1) & 0xFFFF, 0)
        struct.pack_into(">H", out, 10, max(0, ar - 1))
        return out
    # an option whose own length lies inside a consistent rdlength
    return bytearray(_with_opt(base, options=b"\x00\x08\xff\xff\x00\x01"))


def m_splice(rng: random.Random, d: bytearray) -> bytearray:
    other = rng.choice(SEEDS)
    return d[: rng.randrange(len(d) + 1)] + other[rng.randrange(len(other) + 1) :]


def m_header_flags(rng: random.Random, d: bytearray) -> bytearray:
    if len(d) >= 4:
        d[2], d[3] = rng.randrange(256), rng.randrange(256)
    return d


def m_extremes(rng: random.Random, d: bytearray) -> bytearray:
    """Zero-length, header-only, 64 KiB of noise, or a valid query padded to 64 KiB."""
    kind = rng.randrange(5)
    if kind == 0:
        return bytearray()
    if kind == 1:
        return d[:12]
    if kind == 2 or len(d) < 12:
        return bytearray(rng.randbytes(65535))
    if kind == 3 and len(d) < 65535 - 15:
        pad = 65535 - len(d) - 15  # OPT header 11 + option header 4: exactly 64 KiB in all
        return bytearray(_with_opt(bytes(d), options=b"\x00\x0c" + struct.pack(">H", pad) + b"\x00" * pad))
    return d + bytearray(max(0, 65535 - len(d)))  # trailing zeros to 64 KiB


def m_benign(rng: random.Random, d: bytearray) -> bytearray:
    """Changes a valid query survives: ID, RD/CD bits, the name's case, the qtype."""
    if len(d) < 12:
        return d
    d[0], d[1] = rng.randrange(256), rng.randrange(256)
    d[2] = (d[2] & ~0x01) | rng.randrange(2)
    end = _question_end(d)
    for i in range(13, min(end, len(d))):
        if 0x61 <= d[i] <= 0x7A and rng.random() < 0.3:
            d[i] ^= 0x20
    if end + 3 <= len(d) and rng.random() < 0.3:
        struct.pack_into(">H", d, end + 1, rng.choice((1, 28, 33, 16, 6, 2, 255, 65, 5, 12, rng.randrange(65536))))
    return d


MUTATORS: list[Callable[[random.Random, bytearray], bytearray]] = [
    m_flip_bits, m_set_bytes, m_truncate, m_append, m_insert_delete, m_counts_lie, m_compression,
    m_label_past_end, m_huge_edns, m_splice, m_header_flags, m_extremes, m_benign,
]  # fmt: skip
WEIGHTS = [10, 10, 6, 4, 6, 8, 8, 6, 8, 4, 4, 1, 25]


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = bytearray(rng.choice(seeds))
    for mutator in rng.choices(MUTATORS, WEIGHTS, k=rng.choice((1, 1, 1, 1, 2, 3))):
        data = mutator(rng, data)
    return bytes(data)


# =========================================================================== invariants


class Violation(AssertionError):
    pass


def udp_limit(query: bytes) -> int:
    """The most a UDP reply may hold, decided independently of mcsdns: 512, or a valid OPT's size.

    dnspython judges the message's framing; the contents of EDNS options are not
    judged (a 0-byte COOKIE is still an OPT that advertises a size: CoreDNS reads
    it so too), so dnspython's per-option classes are set aside while it parses.
    """
    known = dict(dns.edns._type_to_class)
    dns.edns._type_to_class.clear()
    try:
        msg = dns.message.from_wire(query, ignore_trailing=True, question_only=False)
    except Exception:
        return 512
    finally:
        dns.edns._type_to_class.update(known)
    return max(512, msg.payload) if msg.edns >= 0 else 512


def _name_end(wire: bytes, i: int) -> int:
    while wire[i]:
        i += wire[i] + 1
    return i + 1


_PARSED: dict[bytes, tuple[str, int]] = {}  # reply minus its ID -> (rcode, question length): parse each body once


def check_reply(query: bytes, reply: Any, tcp: bool) -> str:
    """Assert the invariants for one (query, result); returns a short outcome label for statistics."""
    if reply is None:
        return "dropped"
    if isinstance(reply, Forward):
        if reply.query.raw is not query or reply.query.id != struct.unpack_from(">H", query)[0]:
            raise Violation("a Forward that does not carry the query")
        return "forward"
    if type(reply) is not bytes:
        raise Violation(f"handle returned {type(reply).__name__}")
    if len(query) < 12:
        raise Violation("a reply to a packet without a header")
    if reply[:2] != query[:2]:
        raise Violation("the reply's ID is not the query's")
    info = _PARSED.get(reply[2:])
    if info is None:
        try:
            msg = dns.message.from_wire(reply)
        except dns.exception.DNSException as exc:
            raise Violation(f"reply does not parse: {exc!r}") from exc
        if not msg.flags & dns.flags.QR:
            raise Violation("reply without QR")
        info = (dns.rcode.to_text(msg.rcode()), _name_end(reply, 12) + 4 if msg.question else 0)
        if len(_PARSED) < 100_000:
            _PARSED[reply[2:]] = info
    if len(reply) > 512:
        limit = 65535 if tcp else udp_limit(query)
        if len(reply) > limit:
            raise Violation(f"{len(reply)}-byte reply over {'TCP' if tcp else 'UDP'}; limit {limit}")
    qlen = info[1]
    if qlen and reply[12:qlen] != query[12:qlen]:
        raise Violation("the reply's question is not the query's")
    return info[0]


CLIENT = ("127.0.0.1", 40000)
WHERE = {False: Listener("dns://127.0.0.1:53", "udp", 1), True: Listener("dns://127.0.0.1:53", "tcp", 1)}


def run_one(resolver: Resolver, metrics: Metrics, query: bytes, tcp: bool) -> str:
    """One packet through what a listener does with it: handle, then the observers (metrics, query log)."""
    started = time.perf_counter()
    try:
        reply = resolver.handle(query, tcp)
    except Exception as exc:  # the invariant: handle never raises
        raise Violation(f"Resolver.handle raised {exc!r}") from exc
    outcome = check_reply(query, reply, tcp)
    if isinstance(reply, Forward):  # what the transport observes once the forwarder gave up
        q, sent, forwarded = reply.query, error_reply(query, 2, reply.query), True
    else:
        q, sent, forwarded = resolver.last_query, reply, False
    try:
        metrics.observe(WHERE[tcp], CLIENT, query, q, sent, started, forwarded)
        if sent is not None:
            format_line(CLIENT, WHERE[tcp].proto, query, q, sent, 0.0001)
    except Exception as exc:
        raise Violation(f"an observer raised {exc!r}") from exc
    return outcome


def fuzz(resolvers: tuple[Resolver, Resolver], inputs: int, seed: int, progress: bool = False) -> dict[str, int]:
    """`inputs` seeded mutations; raises Violation with a reproducer (hex) on the first failure."""
    rng = random.Random(seed)
    seeds = SEEDS
    metrics = Metrics(CollectorRegistry())
    outcomes: dict[str, int] = {}
    started = time.monotonic()
    for n in range(inputs):
        query = mutate(rng, seeds) if rng.random() < 0.97 else rng.randbytes(rng.randrange(64))
        tcp = rng.random() < 0.2
        resolver = resolvers[1] if rng.random() < 0.3 else resolvers[0]
        try:
            outcome = run_one(resolver, metrics, query, tcp)
        except Violation as exc:
            saved = Path(os.environ.get("TMPDIR", "/tmp")) / f"mcsdns-fuzz-{seed}-{n}.bin"
            saved.write_bytes(query)
            raise Violation(f"input #{n} (seed {seed}, tcp={tcp}, forwarding={resolver.forwarding}): {exc}\n"
                            f"query ({len(query)} bytes, saved to {saved}): {query[:300].hex()}") from exc
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if progress and n and n % 200_000 == 0:
            rate = n / (time.monotonic() - started)
            print(f"{n} inputs, {rate:.0f}/s, {outcomes}", flush=True)
    list(metrics.collect())  # scraping after the run must work too
    return outcomes


# =========================================================================== packet tests


def test_seeds_are_valid_and_answered(resolvers):
    """The seeds themselves: sanity for the mutator's starting points, and the contract still holds."""
    metrics = Metrics(CollectorRegistry())
    for query in seed_queries():
        for tcp in (False, True):
            assert run_one(resolvers[0], metrics, query, tcp) != "dropped"
    for c in MAIN[:5]:
        check(c, dns.message.from_wire(resolvers[0].handle(make_query(c).to_wire(), False)))


def test_mutated_packets(resolvers):
    """FUZZ_INPUTS (100k) seeded mutations; prints the outcome mix."""
    started = time.monotonic()
    outcomes = fuzz(resolvers, FUZZ_INPUTS, FUZZ_SEED)
    took = time.monotonic() - started
    print(f"\n{FUZZ_INPUTS} inputs in {took:.1f}s ({FUZZ_INPUTS / took:.0f}/s): {dict(sorted(outcomes.items()))}")
    assert sum(outcomes.values()) == FUZZ_INPUTS
    # The mutators must reach past the header checks: a healthy mix of answers, not just FORMERR.
    assert outcomes.get("NOERROR", 0) > FUZZ_INPUTS * 0.1 and outcomes.get("FORMERR", 0) > FUZZ_INPUTS * 0.1


# Inputs the fuzzer found, kept as regressions (each was a violation before its fix; docs/reliability.md).
FOUND = {
    # An OPT in the answer section plus one in the additional section (RFC 6891: at most one OPT): the
    # second one's 4096-byte size was used, and a 1661-byte UDP reply went to a query dnspython rejects.
    "opt in the answer section": "00da01000001000100000001046d616e7906746573746e73037376630a636c7573746572736574056c6f63616c0000"
                                 "01000100002904d00000000000000000291000000000000000",
    # An OPT whose rdata holds one byte: no room for an option header; its size was used all the same.
    "truncated EDNS option": "81bf010000010000000000010568646c733106746573746e73037376630a636c7573746572736574056c6f63616c"
                             "00002100010000291000000000000001000a",
    # After a valid OPT, a record owned by a compression pointer past the end of the message (never followed,
    # so never checked): the OPT's size made a 558-byte UDP reply to a query no parser accepts.
    "pointer past the end after the OPT": "a61801000001000000000002055f68747470045f7463700568646c733106746573746e7303737663"
                                          "0a636c7573746572736574056c6f63616c0000210001000029040c000000000000c0ff2d291000000000000000",
}  # fmt: skip


@pytest.mark.parametrize("name", FOUND)
def test_found_inputs(resolvers, name):
    query = bytes.fromhex(FOUND[name])
    for tcp in (False, True):
        for resolver in resolvers:
            assert run_one(resolver, Metrics(CollectorRegistry()), query, tcp) == "FORMERR"


def test_64k_queries_and_replies_are_counted():
    """A 64 KiB TCP query and a reply of over 64000 bytes land in the +Inf size bucket (it once raised IndexError)."""
    store, table, resolver = fresh_table()
    store.apply(convert(SI_HEADLESS))
    endpoints = [{"addresses": [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"], "hostname": f"host-with-a-long-name-{i:04d}"} for i in range(1000)]
    store.apply(convert(_slice("huge", endpoints=endpoints)))
    metrics = Metrics(CollectorRegistry())
    srv = dns.message.make_query("fz.testns.svc." + Z, "SRV").to_wire()
    assert len(resolver.handle(srv, True)) > 64000  # truncated to fit 65535 (TC), still past the last bound
    assert run_one(resolver, metrics, srv, True) == "NOERROR"
    query = _with_opt(dns.message.make_query("fz.testns.svc." + Z, "A", use_edns=False).to_wire(), options=b"\x00\x0c" + struct.pack(">H", 65480) + b"\x00" * 65480)
    assert len(query) > 65000
    run_one(resolver, metrics, query[:65535], True)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.binary(max_size=700), tcp=st.booleans())
def test_any_bytes(resolvers, data, tcp):
    run_one(resolvers[1], Metrics(CollectorRegistry()), data, tcp)


LABEL = st.one_of(
    st.sampled_from([b"svc1", b"testns", b"svc", b"pod", b"many", b"_http", b"_tcp", b"c1", b"cluster1", b"hdls1", b"pod-1",
                     b"dns-version", b"ns", b"dns", b"*", b"\x00", b".", b"SVC1", b"\xff\xfe", b"a" * 63]),
    st.binary(min_size=1, max_size=63),
)


@st.composite
def structured_queries(draw) -> bytes:
    """Header, one or more questions of label sequences, optional records and OPT: well-framed, odd content."""
    qid = draw(st.integers(0, 0xFFFF))
    flags = draw(st.integers(0, 0xFFFF)) & ~QR if draw(st.booleans()) else 0x0100
    labels = draw(st.lists(LABEL, max_size=8))
    if draw(st.booleans()):
        labels += [b"clusterset", b"local"]
    name = b"".join(bytes([len(x)]) + x for x in labels) + b"\x00"
    qtype = draw(st.one_of(st.sampled_from([1, 2, 6, 16, 28, 33, 41, 251, 252, 255, 65, 0, 65535]), st.integers(0, 0xFFFF)))
    qclass = draw(st.sampled_from([1, 1, 1, 3, 4, 254, 255, 0]))
    qd = draw(st.sampled_from([1, 1, 1, 0, 2]))
    body = (name + struct.pack(">HH", qtype, qclass)) * max(qd, 1)
    wire = HEADER.pack(qid, flags, qd, 0, 0, 0) + body
    if draw(st.booleans()):
        options = draw(st.binary(max_size=300))
        wire = _with_opt(wire, udp=draw(st.integers(0, 0xFFFF)), ttl=draw(st.integers(0, 0xFFFFFFFF)), options=options,
                         rdlen=draw(st.one_of(st.none(), st.integers(0, 0xFFFF))))
    return wire


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(query=structured_queries(), tcp=st.booleans())
def test_structured_queries(resolvers, query, tcp):
    run_one(resolvers[1], Metrics(CollectorRegistry()), query, tcp)


def test_no_amplification_without_edns(resolvers):
    """A UDP query without EDNS never gets more than 512 bytes back, however big the answer; ANY is minimal."""
    for name in ("many.testns.svc." + Z, "_http._tcp.many.testns.svc." + Z, "hdls1.testns.svc." + Z, Z):
        for qtype in ("A", "AAAA", "SRV", "ANY", "NS", "TXT", "SOA"):
            wire = dns.message.make_query(name, qtype, use_edns=False).to_wire()
            reply = resolvers[0].handle(wire, False)
            assert len(reply) <= 512, (name, qtype, len(reply))
            assert len(reply) / len(wire) < 15
            if qtype == "ANY":  # contract 2.9: no special ANY handling: NODATA by existence, one SOA
                msg = dns.message.from_wire(reply)
                assert not msg.answer and not msg.additional and len(msg.authority) == 1
    # An EDNS query advertising less than 512 is still held to 512 (RFC 6891 6.2.5).
    small = dns.message.make_query("many.testns.svc." + Z, "SRV", use_edns=0, payload=100).to_wire()
    assert len(resolvers[0].handle(small, False)) <= 512


# =========================================================================== TCP streams that lie


def _frame(wire: bytes) -> bytes:
    return struct.pack(">H", len(wire)) + wire


async def _read_frames(reader: asyncio.StreamReader, timeout: float) -> tuple[list[bytes], bool]:
    """Frames until EOF (True) or until `timeout` passes without one (False)."""
    frames = []
    while True:
        try:
            prefix = await asyncio.wait_for(reader.readexactly(2), timeout)
            frames.append(await asyncio.wait_for(reader.readexactly(struct.unpack(">H", prefix)[0]), timeout))
        except asyncio.IncompleteReadError:
            return frames, True
        except (asyncio.TimeoutError, ConnectionError):
            return frames, False


def test_tcp_streams_that_lie(resolvers):
    """Random streams of good frames, lying prefixes, stalls and noise on real loopback TCP connections.

    Every frame sent back parses and answers a query that was sent on that
    connection; a stalled or lying connection is closed within the idle
    timeout; no connection is left open at the end; the server still answers.
    """
    rng = random.Random(FUZZ_SEED)
    seeds = SEEDS

    async def one_connection(port: int) -> tuple[int, bool]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ids: set[int] = set()
        stream = bytearray()
        for _ in range(rng.randint(1, 12)):
            query = mutate(rng, seeds) if rng.random() < 0.3 else rng.choice(seeds)
            if len(query) >= 2:
                ids.add(struct.unpack_from(">H", query)[0])
            stream += _frame(query[:65535])
        tail = rng.randrange(6)
        if tail == 0:  # the prefix promises more than is sent, then nothing (a stall)
            stream += struct.pack(">H", 4000) + b"\x00" * rng.randrange(100)
        elif tail == 1:  # a prefix alone
            stream += struct.pack(">H", rng.randrange(1, 65536))
        elif tail == 2:  # half a prefix
            stream += b"\x00"
        elif tail == 3:  # noise
            stream += rng.randbytes(rng.randrange(1, 200))
        writer.write(bytes(stream))
        await writer.drain()
        if rng.random() < 0.3:
            writer.write_eof()  # the client closes its side early: replies must still arrive or the server closes
        frames, closed = await _read_frames(reader, timeout=3.0)
        writer.close()
        for frame in frames:
            msg = dns.message.from_wire(frame)
            assert msg.id in ids, "a reply to a query that was never sent on this connection"
        return len(frames), closed

    async def main() -> None:
        server = DnsServer(resolvers[0], tcp_limits=TcpLimits(max_connections=100, idle_timeout=0.5))
        _, port = await server.listen("127.0.0.1", 0)
        try:
            results = []
            for _ in range(10):
                results += await asyncio.gather(*(one_connection(port) for _ in range(20)))
            assert all(closed for _, closed in results), "a connection was neither completed nor closed by the server"
            assert sum(n for n, _ in results) > 100
            await asyncio.sleep(0.2)
            assert not server._tcp_conns, f"{len(server._tcp_conns)} connections still open"
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_frame(make_query(MAIN[0]).to_wire()))
            frames, _ = await _read_frames(reader, timeout=2.0)
            writer.close()
            check(MAIN[0], dns.message.from_wire(frames[0]))
        finally:
            server.stop_accepting()
            await server.drain(0.1)

    asyncio.run(main())


# =========================================================================== objects


SI = {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
      "metadata": {"name": "fz", "namespace": "testns"},
      "spec": {"type": "ClusterSetIP", "ips": ["10.9.9.9", "fd00::9"],
               "ports": [{"name": "http", "protocol": "TCP", "port": 80}, {"name": "dns", "protocol": "UDP", "port": 53}]}}  # fmt: skip
SI_HEADLESS = {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
               "metadata": {"name": "fz", "namespace": "testns"},
               "spec": {"type": "Headless", "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}}  # fmt: skip
ES = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
      "metadata": {"name": "fz-c1", "namespace": "testns",
                   "labels": {"multicluster.kubernetes.io/service-name": "fz", "multicluster.kubernetes.io/source-cluster": "c1"},
                   "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"}},
      "endpoints": [{"addresses": ["10.1.1.1"], "hostname": "h1", "conditions": {"ready": True}},
                    {"addresses": ["10.1.1.2", "fd00::2"], "conditions": {"ready": None}},
                    {"addresses": ["10.1.1.3"], "conditions": {"ready": False}}],
      "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}  # fmt: skip

LONG = "a" * 63
WEIRD: list[Any] = [
    None, True, False, 0, -1, 1, 80, 65535, 65536, 2**31, 2**64, 1.5, float("nan"), "", " ", "x" * 300, LONG, LONG + "a",
    "10.0.0.1", "::1", "fd00::1", "::ffff:10.1.2.3", "fe80::1%eth0", "fe80::1%" + "a" * 70, "1.2.3.4.5", "010.1.1.1",
    "10.0.0.256", "１.１.１.１", "2001:db8::", "UPPER", "-lead", "trail-", "a.b", "a_b", "Ünï", "\x00", "TCP", "SCTP", "tcp",
    "Headless", "ClusterSetIP", "headless", [], {}, [None], [[]], {"a": 1}, {1: 2}, ["10.0.0.1"] * 3, b"bytes",
    __import__("datetime").date(2001, 1, 1),
]  # fmt: skip


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _get(node: Any, path: tuple) -> Any:
    for k in path:
        node = node[k]
    return node


def mutate_object(rng: random.Random, base: dict) -> dict:
    obj = copy.deepcopy(base)
    for _ in range(rng.choice((1, 1, 2, 3))):
        paths = _paths(obj)
        path = rng.choice(paths[1:]) if len(paths) > 1 else ()
        parent, key = (_get(obj, path[:-1]), path[-1]) if path else (None, None)
        op = rng.randrange(7)
        if parent is None:
            continue
        if op <= 2:  # a wrong value
            parent[key] = copy.deepcopy(rng.choice(WEIRD))
        elif op == 3 and isinstance(parent, dict):  # a missing field
            del parent[key]
        elif op == 4 and isinstance(parent, list):  # a duplicate
            parent.append(copy.deepcopy(parent[key]))
        elif op == 5:  # a huge list
            value = parent[key]
            item = value[0] if isinstance(value, list) and value else rng.choice(WEIRD)
            size = rng.choice((3, 101, 150, 1001))
            if isinstance(item, (dict, list)):  # distinct copies, some of them made different
                parent[key] = [copy.deepcopy(item) for _ in range(size)]
                for element in parent[key][:: max(1, size // 10)]:
                    if isinstance(element, dict) and "addresses" in element:
                        element["addresses"] = [f"10.77.{rng.randrange(256)}.{rng.randrange(256)}"]
            else:
                parent[key] = [item] * size
        else:  # an unknown field next to it
            if isinstance(parent, dict):
                parent[rng.choice(("extra", "status", "x" * 100))] = copy.deepcopy(rng.choice(WEIRD))
    return obj


def fresh_table() -> tuple[Store, Table, Resolver]:
    return_value = build([FIXTURES / "contract.yaml"])
    return return_value.table.store, return_value.table, return_value


def table_snapshot(table: Table, exclude: tuple[str, str]) -> dict[bytes, Any]:
    """Every compiled answer except those of `exclude` and the apex (its serial moves)."""
    skip = set(table.owned.get(exclude, ()))
    return {k: v for k, v in table.answers.items() if k not in skip and not k.startswith(b"\x0aclusterset")}


def _names_of(obj: Any) -> list[tuple[str, ...]]:
    """Names (labels left of the zone) an object may produce answers for, guessed from the raw object."""
    base = ("fz", "testns", "svc")
    names = [base, ("_http", "_tcp") + base]
    try:
        for ep in obj.get("endpoints") or []:
            for addr in ep.get("addresses") or []:
                names.append((str(addr).replace(".", "-").replace(":", "-"), "c1") + base)
            if isinstance(ep.get("hostname"), str) and ep["hostname"]:
                names.append((ep["hostname"], "c1") + base)
    except (AttributeError, TypeError):
        pass
    return names[:8]


def query_wire(labels: tuple[str, ...], qtype: int, edns: bool, qid: int = 0x4242) -> bytes | None:
    """A query built by hand (fast, and for names dnspython would refuse to build); None if not encodable."""
    try:
        name = b"".join(bytes([len(x)]) + x for x in (lab.encode() for lab in labels + ("clusterset", "local"))) + b"\x00"
    except (ValueError, UnicodeError):
        return None
    if len(name) > 255 or any(not 0 < len(lab.encode(errors="replace")) < 64 for lab in labels):
        return None
    wire = HEADER.pack(qid, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", qtype, 1)
    return _with_opt(wire, udp=1232) if edns else wire


def _ask_all(resolver: Resolver, names: list[tuple[str, ...]]) -> None:
    metrics = Metrics(CollectorRegistry())
    for labels in names:
        wires = [query_wire(labels, t, e) for t, e in ((1, False), (28, True), (33, False))]
        for wire in wires:
            if wire is not None:
                run_one(resolver, metrics, wire, False)
        if wires[-1] is not None:
            run_one(resolver, metrics, wires[-1], True)


OBJECT_INPUTS = int(os.environ.get("MCSDNS_FUZZ_OBJECTS", "2000"))


def fuzz_objects(inputs: int, seed: int) -> dict[str, int]:
    """Mutated objects through convert -> store -> table -> queries; the rest of the table never moves."""
    rng = random.Random(seed)
    store, table, resolver = fresh_table()
    store.apply(convert(SI))  # the fuzzed objects' service exists, so its slices compile
    before = table_snapshot(table, ("testns", "fz"))
    outcomes: dict[str, int] = {}
    for n in range(inputs):
        base = rng.choice((SI, SI_HEADLESS, ES, ES))
        raw = mutate_object(rng, base)
        try:
            obj = convert(raw)
        except InvalidObject as exc:
            reason = str(exc).split(":", 1)[0].split(" ", 1)[0].split("[", 1)[0]
            outcomes[f"rejected {reason}"] = outcomes.get(f"rejected {reason}", 0) + 1
            continue
        except Exception as exc:
            raise Violation(f"object #{n}: convert raised {exc!r} (not InvalidObject) for {raw!r:.2000}") from exc
        outcomes["accepted"] = outcomes.get("accepted", 0) + 1
        try:
            store.apply(obj)
            _ask_all(resolver, _names_of(raw))
            kind = type(obj).__name__
            if kind == "EndpointSlice":
                store.delete(kind, obj.namespace, obj.name)
            elif (obj.namespace, obj.name) != ("testns", "fz"):
                store.delete(kind, obj.namespace, obj.name)
            else:
                store.apply(convert(SI))
        except Violation as exc:
            raise Violation(f"object #{n} {raw!r:.3000}: {exc}") from exc
        except Exception as exc:
            raise Violation(f"object #{n}: an accepted object broke the table: {exc!r} for {raw!r:.3000}") from exc
        if n % 200 == 0:
            assert table_snapshot(table, ("testns", "fz")) == before, f"object #{n} changed other services' answers"
    assert table_snapshot(table, ("testns", "fz")) == before
    return outcomes


def test_mutated_objects():
    started = time.monotonic()
    outcomes = fuzz_objects(OBJECT_INPUTS, FUZZ_SEED)
    print(f"\n{OBJECT_INPUTS} objects in {time.monotonic() - started:.1f}s: {dict(sorted(outcomes.items()))}")
    assert outcomes.get("accepted", 0) > OBJECT_INPUTS * 0.1
    assert sum(v for k, v in outcomes.items() if k.startswith("rejected")) > OBJECT_INPUTS * 0.3


def _slice(name: str, **over) -> dict:
    obj = copy.deepcopy(ES)
    obj["metadata"]["name"] = name
    obj.update(over)
    return obj


# (object, expected reason label) -- one per way an object can be refused whole: no name DNS can use,
# or a field of a JSON type the API never serves. Objects DNS can serve around are served without
# the part it cannot represent (decision 12): tests/test_partial_objects.py.
BAD_OBJECTS = [
    (dict(copy.deepcopy(SI), spec={"type": 7}), "spec.type"),
    (dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ips": ["10.0.0.1", "10.0.0.2", "10.0.0.3"]}), "spec.ips"),
    (dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ports": [{"port": "80"}]}), "spec.ports"),
    (dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ports": {"port": 80}}), "spec.ports"),
    (dict(copy.deepcopy(SI), spec=["not", "an", "object"]), "spec"),
    (dict(copy.deepcopy(SI), metadata={"name": "Bad_Name", "namespace": "testns"}), "metadata.name"),
    (dict(copy.deepcopy(SI), metadata={"name": "ok"}), "metadata.namespace"),
    (dict(copy.deepcopy(SI), metadata="nope"), "metadata"),
    (_slice("bad-ready", endpoints=[{"addresses": ["10.1.1.1"], "conditions": {"ready": "yes"}}]), "endpoints"),
    (_slice("bad-endpoints", endpoints="10.1.1.1"), "endpoints"),
    (_slice("bad-port", ports=[{"port": "80"}]), "ports"),
    (dict(copy.deepcopy(SI), metadata={"name": "two.labels", "namespace": "testns"}), "metadata.name"),
    (_slice("bad-labels", metadata={"name": "bad-labels", "namespace": "testns", "labels": ["x"]}), "metadata.labels"),
    (_slice("no-service", metadata={"name": "no-service", "namespace": "testns", "labels": {}}), "label"),
    (_slice("bad-cluster", metadata={"name": "bad-cluster", "namespace": "testns", "labels": {
        "multicluster.kubernetes.io/service-name": "fz", "multicluster.kubernetes.io/source-cluster": "-bad-"}}), "label"),
]  # fmt: skip


def test_bad_objects_are_rejected_alone_and_counted(tmp_path):
    """Good and bad objects in one manifest: each bad one is rejected alone, counted by reason,
    and the answers are exactly those of the good objects alone."""
    good_docs = list(yaml.safe_load_all((FIXTURES / "contract.yaml").read_text()))
    good_docs += [copy.deepcopy(SI), copy.deepcopy(ES)]
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "all.yaml").write_text(yaml.safe_dump_all(good_docs))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    docs = list(good_docs)
    for i, (bad, _) in enumerate(BAD_OBJECTS):
        docs.insert(3 + 2 * i, bad)  # interleaved with the good ones
    (mixed / "all.yaml").write_text(yaml.safe_dump_all(docs))

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    reference = build([clean])
    served = build([mixed], on_error=metrics.rejected)

    assert {k: v for k, v in served.table.answers.items() if not k.startswith(b"\x0aclusterset")} == {
        k: v for k, v in reference.table.answers.items() if not k.startswith(b"\x0aclusterset")
    }
    for c in MAIN:
        check(c, dns.message.from_wire(served.handle(make_query(c).to_wire(), False)))
    expected: dict[str, int] = {}
    for _, reason in BAD_OBJECTS:
        expected[reason] = expected.get(reason, 0) + 1
    got = {reason: registry.get_sample_value("mcsdns_objects_rejected_total", {"reason": reason}) for reason in expected}
    assert got == {k: float(v) for k, v in expected.items()}


def test_huge_and_duplicate_lists_stay_bounded():
    """A slice as big as the API allows compiles in bounded time; beyond the API's own limits it is rejected."""
    endpoints = [{"addresses": [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"], "hostname": f"h{i}"} for i in range(1000)]
    store, table, resolver = fresh_table()
    store.apply(convert(SI_HEADLESS))
    started = time.monotonic()
    store.apply(convert(_slice("huge", endpoints=endpoints)))
    took = time.monotonic() - started
    assert took < 10, f"compiling a 1000-endpoint slice took {took:.1f}s"
    reply = dns.message.from_wire(resolver.handle(dns.message.make_query("fz.testns.svc." + Z, "A", use_edns=False).to_wire(), False))
    assert reply.flags & dns.flags.TC and reply.answer
    full = dns.message.from_wire(resolver.handle(dns.message.make_query("fz.testns.svc." + Z, "A").to_wire(), True))
    assert sum(len(r) for r in full.answer) == 1000
    # Duplicates: the same address twice, two endpoints with one hostname, a port listed twice -> de-duplicated answers.
    dup = _slice("dup", endpoints=[{"addresses": ["10.5.5.5", "10.5.5.5"], "hostname": "same"},
                                   {"addresses": ["10.5.5.6"], "hostname": "same"}],
                 ports=[{"name": "http", "protocol": "TCP", "port": 80}] * 3)  # fmt: skip
    store.delete("EndpointSlice", "testns", "huge")
    store.apply(convert(dup))
    a = dns.message.from_wire(resolver.handle(dns.message.make_query("fz.testns.svc." + Z, "A").to_wire(), False))
    assert sorted(rd.address for r in a.answer for rd in r) == ["10.5.5.5", "10.5.5.6"]
    srv = dns.message.from_wire(resolver.handle(dns.message.make_query("fz.testns.svc." + Z, "SRV").to_wire(), False))
    assert [rd.target.to_text() for r in srv.answer for rd in r] == ["same.c1.fz.testns.svc." + Z]
    # Beyond what the API server itself accepts (1000 endpoints, 100 addresses each): rejected, not compiled.
    for too_big in (_slice("too-many", endpoints=endpoints + endpoints[:1]),
                    _slice("too-wide", endpoints=[{"addresses": [f"10.6.0.{i % 250}" for i in range(101)]}])):
        with pytest.raises(InvalidObject):
            convert(too_big)


def test_yaml_alias_bomb_is_rejected_not_expanded(tmp_path):
    """Ten aliases of an endpoint list with aliases of aliases: a tiny file that would expand to millions of
    addresses. The source must reject it alone (API limits) rather than compile it."""
    addresses = ", ".join(f"10.0.{i // 250}.{i % 250 + 1}" for i in range(100))
    lines = ["apiVersion: discovery.k8s.io/v1", "kind: EndpointSlice",
             "metadata: {name: bomb, namespace: testns, labels: {multicluster.kubernetes.io/service-name: fz}}",
             "addressType: IPv4", f"x0: &e0 {{addresses: [{addresses}]}}",
             "endpoints: [" + ", ".join(["*e0"] * 20000) + "]"]  # 2M addresses from a 100 KB file
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n---\n" + yaml.safe_dump(SI_HEADLESS))
    store = Store()
    table = Table(TableConfig(("clusterset.local",), 5, None, ("127.0.0.1",)), store)
    store.listener = table.on_change
    rejected: list[str] = []
    started = time.monotonic()
    ManifestSource([path], store, on_error=rejected.append).load()
    assert time.monotonic() - started < 10
    assert ("testns", "fz") in store.imports and not store.slices
    assert rejected == ["endpoints"]


def test_a_63_byte_port_name_compiles():
    """A port name may be a 63-byte DNS label (EndpointSlice validation); `_` + it is no label, so that
    `_name._proto` name cannot exist. Found by the object fuzzer: it once raised out of the table."""
    long_name = "p" * 63
    store, table, resolver = fresh_table()
    store.apply(convert(dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ips": ["10.9.9.9"],
                                                      "ports": [{"name": long_name, "protocol": "TCP", "port": 80}]})))
    store.apply(convert(copy.deepcopy(SI_HEADLESS) | {"metadata": {"name": "fz2", "namespace": "testns"}}))
    store.apply(convert(_slice("long-port", metadata={"name": "long-port", "namespace": "testns", "labels": {
        "multicluster.kubernetes.io/service-name": "fz2", "multicluster.kubernetes.io/source-cluster": "c1"}},
        ports=[{"name": long_name, "protocol": "UDP", "port": 53}])))  # fmt: skip
    for name in ("fz", "fz2"):
        srv = dns.message.from_wire(resolver.handle(dns.message.make_query(f"{name}.testns.svc.{Z}", "SRV").to_wire(), False))
        assert srv.rcode() == dns.rcode.NOERROR and srv.answer


def test_names_past_255_bytes_are_left_out():
    """Host, cluster, service and namespace of 63 bytes each: valid labels, but the SRV target
    would be a 278-byte name no resolver accepts. It is left out (NODATA), the reply still parses."""
    ns, svc, host, cluster = "n" * 63, "s" * 63, "h" * 63, "c" * 63
    store = Store()
    table = Table(TableConfig(("clusterset.local",), 5, None, ("127.0.0.1",)), store)
    store.listener = table.on_change
    for kind in ("Namespace", "ServiceImport", "EndpointSlice"):
        store.mark_synced(kind)
    store.apply(convert({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
    store.apply(convert(dict(copy.deepcopy(SI_HEADLESS), metadata={"name": svc, "namespace": ns})))
    store.apply(convert(_slice("long", metadata={"name": "long", "namespace": ns, "labels": {
        "multicluster.kubernetes.io/service-name": svc, "multicluster.kubernetes.io/source-cluster": cluster}},
        endpoints=[{"addresses": ["10.0.0.1"], "hostname": host}])))  # fmt: skip
    resolver = Resolver(table)
    name = f"{svc}.{ns}.svc.{Z}"
    srv = dns.message.from_wire(resolver.handle(dns.message.make_query(name, "SRV").to_wire(), False))
    assert srv.rcode() == dns.rcode.NOERROR and not srv.answer and not srv.additional and srv.authority
    a = dns.message.from_wire(resolver.handle(dns.message.make_query(name, "A").to_wire(), False))
    assert [rd.address for r in a.answer for rd in r] == ["10.0.0.1"]


# =========================================================================== manifests and flags


def test_a_manifest_that_never_parsed_keeps_the_server_unready(tmp_path):
    """At startup there is no last good state: a broken file means /ready 503 naming file and line, and
    SERVFAIL instead of NXDOMAIN (decision 10), not a ready server with an empty zone. Fixed, it serves."""
    path = tmp_path / "app.yaml"
    path.write_text("apiVersion: v1\nkind: [unclosed\n")
    with Server("--manifests", str(tmp_path), "--startup-timeout", "1s", "--upstream", "none", wait_ready=False) as s:
        status, reason = s.http("/ready")
        assert status == 503 and f"{path}: invalid YAML/JSON at line 3" in reason
        assert s.query("nothing.app.svc." + Z).rcode() == dns.rcode.SERVFAIL
        path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}, dict(copy.deepcopy(SI), metadata={"name": "web", "namespace": "app"})]))
        deadline = time.monotonic() + 10
        while s.http("/ready")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.http("/ready") == (200, "OK")
        assert s.query("web.app.svc." + Z).answer[0][0].address == "10.9.9.9"
        assert s.query("nothing.app.svc." + Z).rcode() == dns.rcode.NXDOMAIN
        # Once synced, a broken edit keeps the last good objects and readiness (every replica reads the same file).
        path.write_text("{not json")
        time.sleep(2.5)
        assert s.http("/ready") == (200, "OK")
        assert s.query("web.app.svc." + Z).answer[0][0].address == "10.9.9.9"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_an_unreadable_file_names_the_error_and_keeps_the_last_good_objects(tmp_path, monkeypatch):
    """EACCES cannot be staged as root, so the read itself is made to fail: the log names file and reason."""
    logged = _Lines()
    logger = logging.getLogger("mcsdns.sources.manifests")
    logger.addHandler(logged)
    monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setattr(logger, "disabled", False)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(SI)))
    store = Store()
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    source = ManifestSource([path], store, on_error=metrics.rejected)
    source.load()
    assert ("testns", "fz") in store.imports
    real = Path.read_text

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    source.reload()
    logger.removeHandler(logged)
    assert f"{path}: cannot read (Permission denied); keeping its last good objects" in logged.lines
    assert ("testns", "fz") in store.imports
    assert registry.get_sample_value("mcsdns_objects_rejected_total", {"reason": "unreadable_file"}) == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resync", "-1"], "--resync must be >= 0 (0 disables): -1.0"),
        (["--delete-grace", "61s"], "--delete-grace must be in range [0, 60] seconds (0: off): 61.0"),
        (["--lameduck", "400"], "--lameduck must be in range [0, 300] seconds: 400.0"),
        (["--upstream-timeout", "0"], "--upstream-timeout must be in range (0, 60] seconds: 0.0"),
        (["--max-concurrent", "0"], "--max-concurrent must be in range [1, 1000000]: 0"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: no such file"),
        (["--namespaces", ","], "--namespaces: give at least one namespace"),
        (["--listen", "[::1"], "missing ']'"),
        (["--http-listen", "127.0.0.1:http"], "port must be 0..65535"),
        (["--zone", "a" * 64 + ".local"], "is not a valid DNS name"),
    ],
)
def test_flags_out_of_range_name_the_problem(args, message):
    result = subprocess.run([sys.executable, "-m", "mcsdns", "serve", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


# =========================================================================== long runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Long fuzz run of the query and object paths (docs/reliability.md).")
    parser.add_argument("--inputs", type=int, default=1_000_000, help="mutated packets")
    parser.add_argument("--objects", type=int, default=50_000, help="mutated objects")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args(argv)
    import tempfile

    logging.disable(logging.CRITICAL)  # the rate-limited FORMERR lines and per-object warnings are expected here

    with tempfile.TemporaryDirectory() as tmp:
        plain = build([FIXTURES / "contract.yaml", big_service_manifest(Path(tmp))])
        pair = (plain, Resolver(plain.table, forwarding=True))
        started = time.monotonic()
        outcomes = fuzz(pair, args.inputs, args.seed, progress=True)
        took = time.monotonic() - started
        print(json.dumps({"seed": args.seed, "packets": args.inputs, "seconds": round(took, 1),
                          "per_second": round(args.inputs / took), "outcomes": outcomes}))  # fmt: skip
    started = time.monotonic()
    objects = fuzz_objects(args.objects, args.seed)
    print(json.dumps({"seed": args.seed, "objects": args.objects, "seconds": round(time.monotonic() - started, 1),
                      "outcomes": objects}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
