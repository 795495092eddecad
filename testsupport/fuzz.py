"""The fuzz engine: packet and object mutators, the invariants every reply and object must keep, and
the long runs (`python -m testsupport.fuzz --inputs 5000000 --seed N`, docs/reliability.md).

Packets: random and mutated queries go through `Resolver.resolve` in-process
(the same call the UDP and TCP listeners make) and through `Metrics.observe`
(which the listeners call on the same bytes). Invariants, for every input:

* nothing raises;
* the result is None (dropped), bytes, or a Forward of that very query;
* every reply parses with dnspython (strict: no trailing bytes), is a response
  and carries the query's ID; a question, when present, is the query's own;
* no amplification: over UDP a reply never exceeds 512 bytes unless the query
  carried a valid OPT record, and then never the size it advertised (65535 over TCP).

Objects: ServiceImports and EndpointSlices with wrong types, missing fields,
huge lists, duplicates, invalid IPs and labels. `objects.convert` either
returns a record or raises InvalidObject (never anything else); a record it
returns compiles, and every answer it leads to parses; the rest of the table
stays exactly as it was.

The suites that run it: tests/test_fuzz_packets.py, tests/test_fuzz_objects.py (and
tests/test_reverse.py on a resolver with --local-cluster and --reverse-cidr).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import random
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.rcode
import yaml
from prometheus_client import CollectorRegistry

from mcsdns.metrics import Metrics
from mcsdns.objects import InvalidObject, convert
from mcsdns.serve.querylog import format_line
from mcsdns.serve.resolve import Forward, Resolver
from mcsdns.store import Store
from mcsdns.zone.table import Table
from mcsdns.serve.transport import Listener
from mcsdns.zone.wire import error_reply

from .cases import MAIN, Z, make_query
from .inprocess import build_resolver
from .objects import headless_service
from .mcsdnsserver import FIXTURES

FUZZ_INPUTS = int(os.environ.get("MCSDNS_FUZZ_INPUTS", "100000"))
FUZZ_SEED = int(os.environ.get("MCSDNS_FUZZ_SEED", "1645"))
OBJECT_INPUTS = int(os.environ.get("MCSDNS_FUZZ_OBJECTS", "2000"))

HEADER = struct.Struct(">HHHHHH")
QR = 0x8000
OPT = 41


# =========================================================================== the resolver under test


def big_service_manifest(directory: Path) -> Path:
    """A headless service with 120 endpoints in `testns`: answers far beyond 512 bytes (truncation)."""
    endpoints = [{"addresses": [f"10.20.{i // 200}.{i % 200 + 1}"], "hostname": f"pod-{i}"} for i in range(100)]
    endpoints += [{"addresses": [f"fd00::{i:x}"]} for i in range(20)]
    docs = headless_service("testns", "many", endpoints)
    path = directory / "big.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def build(paths: list[Path], forwarding: bool = False, on_error=None) -> Resolver:
    """The contract's settings (namespaces testns), with a rejection hook and optional forwarding."""
    return build_resolver(paths, forwarding=forwarding, on_error=on_error, namespaces=frozenset({"testns"}))


def resolver_pair(directory: Path) -> tuple[Resolver, Resolver]:
    """(authoritative only, forwarding) over the contract fixture plus a big headless service.

    The forwarding resolver shares the table: only out-of-zone names differ (Forward, not REFUSED).
    """
    plain = build([FIXTURES / "contract.yaml", big_service_manifest(directory)])
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
        raise Violation(f"resolve returned {type(reply).__name__}")
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
    """One packet through what a listener does with it: resolve, then the observers (metrics, query log)."""
    started = time.perf_counter()
    try:
        reply, q = resolver.resolve(query, tcp)
    except Exception as exc:  # the invariant: resolve never raises
        raise Violation(f"Resolver.resolve raised {exc!r}") from exc
    outcome = check_reply(query, reply, tcp)
    if isinstance(reply, Forward):  # what the transport observes once the forwarder gave up
        if q is not reply.query:
            raise Violation("resolve returned a Forward with another query beside it")
        q, sent, forwarded = reply.query, error_reply(query, 2, reply.query), True
    else:
        sent, forwarded = reply, False
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


def _slice(name: str, **over) -> dict:
    obj = copy.deepcopy(ES)
    obj["metadata"]["name"] = name
    obj.update(over)
    return obj


# =========================================================================== long runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testsupport.fuzz", description="Long fuzz run of the query and object paths (docs/reliability.md).")
    parser.add_argument("--inputs", type=int, default=1_000_000, help="mutated packets")
    parser.add_argument("--objects", type=int, default=50_000, help="mutated objects")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # the rate-limited FORMERR lines and per-object warnings are expected here

    with tempfile.TemporaryDirectory() as tmp:
        pair = resolver_pair(Path(tmp))
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
