"""`--loadbalance round_robin` (project decision 11): A/AAAA answer sets rotate, nothing else moves.

Over real sockets, `mcsdns serve` with and without the flag on the same manifests: with it, repeated
queries for a name with several addresses get the same records in every rotation (UDP with and
without EDNS, TCP, truncated replies), and every other part of every reply is what the server without
the flag sends; without it the order never changes. In-process, the two resolvers on one table are
compared reply by reply over many question shapes, where the SOA serial is the same too.
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import pytest
import yaml

from testsupport.cases import MAIN, Z
from mcsdns.serve.loadbalance import RoundRobinResolver
from mcsdns.serve.resolve import Resolver
from testsupport.inprocess import build_table
from testsupport.objects import headless_service
from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer, ask, exchange, order

POOL_V4 = [f"10.30.0.{i}" for i in range(1, 6)]
POOL_V6 = ["fd00:30::1", "fd00:30::2", "fd00:30::3"]
MANY = [f"10.31.{i // 200}.{i % 200 + 1}" for i in range(80)]  # far more than 512 bytes of A records
POOL = "pool.lb.svc." + Z
SRV_NAMES = ["_http._tcp." + POOL, POOL]


def manifest(directory: Path) -> Path:
    """Namespace `lb`: headless `pool` (5 IPv4 endpoints in c1, 3 IPv6 in c2) and `many` (80 endpoints)."""
    http = [{"name": "http", "protocol": "TCP", "port": 80}]
    v6 = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv6",
          "metadata": {"name": "pool-v6", "namespace": "lb", "labels": {
              "multicluster.kubernetes.io/service-name": "pool", "multicluster.kubernetes.io/source-cluster": "c2"}},
          "endpoints": [{"addresses": [ip], "hostname": f"v6-{i}"} for i, ip in enumerate(POOL_V6)], "ports": http}  # fmt: skip
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lb"}},
        *headless_service("lb", "pool", [{"addresses": [ip], "hostname": f"p-{i}"} for i, ip in enumerate(POOL_V4)]),
        v6,
        *headless_service("lb", "many", [{"addresses": [ip], "hostname": f"m-{i}"} for i, ip in enumerate(MANY)]),
    ]
    path = directory / "lb.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.fixture(scope="module")
def manifests(tmp_path_factory) -> Path:
    return manifest(tmp_path_factory.mktemp("lb"))


@pytest.fixture(scope="module")
def balanced(manifests):
    with McsdnsServer("--manifests", str(manifests), "--loadbalance", "round_robin", "--ns-address", "127.0.0.1",
                "--ns-address", "127.0.0.2", "--ns-address", "127.0.0.3") as s:  # fmt: skip
        yield s


@pytest.fixture(scope="module")
def stable(manifests):
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", "--ns-address", "127.0.0.2",
                "--ns-address", "127.0.0.3") as s:  # fmt: skip
        yield s


def is_rotation(got: list[str], of: list[str]) -> bool:
    return len(got) == len(of) and any(got == of[k:] + of[:k] for k in range(len(of)))


def shape(reply: dns.message.Message) -> tuple:
    """Everything but the answer order and the SOA serial (each server has its own)."""

    def section(rrsets) -> list:
        return [(r.name.to_text().lower(), r.rdtype, r.ttl,
                 [(rd.replace(serial=0) if rd.rdtype == dns.rdatatype.SOA else rd).to_text() for rd in r]) for r in rrsets]  # fmt: skip

    answer = sorted((r.name.to_text().lower(), r.rdtype, r.ttl, rd.to_text()) for r in reply.answer for rd in r)
    return reply.rcode(), reply.flags, answer, section(reply.authority), section(reply.additional), reply.edns, reply.payload


@pytest.mark.parametrize("qtype, expected", [("A", POOL_V4), ("AAAA", POOL_V6)])
@pytest.mark.parametrize("how", ["udp", "udp512", "tcp"])
def test_address_sets_rotate_round_robin(balanced, stable, qtype, expected, how):
    reference = ask(stable, POOL, qtype, how)
    replies = [ask(balanced, POOL, qtype, how) for _ in range(2 * len(expected))]
    first = order(replies[0])
    assert sorted(first) == sorted(expected)
    for reply in replies:
        assert shape(reply) == shape(reference)  # same records, flags, rcode, other sections
        assert is_rotation(order(reply), first)  # a rotation of one cyclic order, never another set
    orders = {tuple(order(r)) for r in replies}
    assert len(orders) == len(expected)  # every rotation turns up: each address leads in turn
    assert {order(r)[0] for r in replies} == set(expected)


def test_ns_dns_addresses_rotate_too(balanced, stable):
    """A name no table entry holds (answered per query) still rotates, over UDP and TCP."""
    for how in ("udp", "tcp"):
        replies = [ask(balanced, "ns.dns." + Z, "A", how) for _ in range(6)]
        assert {order(r)[0] for r in replies} == {"127.0.0.1", "127.0.0.2", "127.0.0.3"}
        assert all(shape(r) == shape(ask(stable, "ns.dns." + Z, "A", how)) for r in replies)


def test_without_the_flag_the_order_is_stable(stable):
    for qtype in ("A", "AAAA"):
        for how in ("udp", "udp512", "tcp"):
            assert len({tuple(order(ask(stable, POOL, qtype, how))) for _ in range(6)}) == 1
    assert len({tuple(order(ask(stable, "ns.dns." + Z, "A", "tcp"))) for _ in range(4)}) == 1


@pytest.mark.parametrize("name", SRV_NAMES)
@pytest.mark.parametrize("edns", [True, False])
def test_srv_answers_and_glue_are_unchanged(balanced, stable, name, edns):
    wire = dns.message.make_query(name, "SRV", use_edns=0 if edns else False, payload=1232).to_wire()
    for tcp in (False, True):
        reference = exchange(stable, wire, tcp)
        assert len(dns.message.from_wire(reference).answer[0]) == 8
        for _ in range(4):
            assert exchange(balanced, wire, tcp) == reference  # byte for byte, glue order included


def test_truncated_replies_stay_valid_and_the_survivors_rotate(balanced, stable):
    reference = ask(stable, "many.lb.svc." + Z, "A", "udp512")
    kept = order(reference)
    full = order(ask(stable, "many.lb.svc." + Z, "A", "tcp"))
    assert reference.flags & dns.flags.TC and 0 < len(kept) < len(MANY)
    seen: set[str] = set()
    for _ in range(6):
        wire = exchange(balanced, dns.message.make_query("many.lb.svc." + Z, "A", use_edns=False).to_wire(), False)
        reply = dns.message.from_wire(wire)  # a valid message, nothing trailing
        assert len(wire) <= 512 and reply.flags == reference.flags and reply.rcode() == dns.rcode.NOERROR
        got = order(reply)
        assert len(got) == len(kept)  # as many survive as without the flag,
        assert any(got == (full + full)[k : k + len(got)] for k in range(len(full)))  # the head of a rotation
        seen.update(got)
    assert len(seen) > len(kept)  # which records survive moves with the rotation
    # Over TCP the whole set, every time in a rotated order.
    assert sorted(order(ask(balanced, "many.lb.svc." + Z, "A", "tcp"))) == sorted(MANY)


def test_help_explains_the_flag():
    out = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30).stdout
    assert "--loadbalance" in out and "round_robin" in out


# --------------------------------------------------------------------------- in-process, one table


def build(paths: list[Path]) -> tuple[Resolver, RoundRobinResolver]:
    table = build_table(paths, ns_addresses=("127.0.0.1", "127.0.0.2"))
    return Resolver(table), RoundRobinResolver(table)


def questions(rng: random.Random) -> list[bytes]:
    names = [c.qname for c in MAIN] + [POOL, "many.lb.svc." + Z, "_http._tcp." + POOL, "p-1.c1." + POOL, "v6-2.c2." + POOL,
                                       "ns.dns." + Z, Z, "nothere.lb.svc." + Z, "example.com."]  # fmt: skip
    out = []
    for name in names:
        for qtype in ("A", "AAAA", "SRV", "TXT", "SOA", "NS", "ANY"):
            mixed = "".join(ch.upper() if rng.random() < 0.3 else ch for ch in name)
            payload = rng.choice([0, 512, 1232, 4096])
            q = dns.message.make_query(mixed, qtype, use_edns=0 if payload else False, payload=payload or 512)
            out.append(q.to_wire())
    return out


def answer_section(wire: bytes) -> tuple[int, int]:
    """Offsets of the answer section (the server writes names as labels ending in a pointer or the root)."""

    def skip_name(i: int) -> int:
        while 0 < wire[i] < 0xC0:
            i += wire[i] + 1
        return i + (2 if wire[i] else 1)

    start = skip_name(12) + 4
    end = start
    for _ in range(struct.unpack_from(">H", wire, 6)[0]):
        end = skip_name(end)
        end += 10 + struct.unpack_from(">H", wire, end + 8)[0]
    return start, end


def plain_full(plain: Resolver, wire: bytes) -> dns.message.Message:
    return dns.message.from_wire(plain.handle(wire, True))  # TCP: never truncated here


@pytest.mark.slow
def test_same_replies_but_for_the_address_order(manifests):
    """Every reply of the rotating resolver equals the plain one's but for where the A/AAAA run starts."""
    plain, balanced = build([FIXTURES / "contract.yaml", manifests])
    rotated = 0
    for wire in questions(random.Random(11)) * 3:  # the second and third rounds come from the packet cache
        for tcp in (False, True):
            want, got = plain.handle(wire, tcp), balanced.handle(wire, tcp)
            if not isinstance(want, bytes):
                assert type(got) is type(want)
                continue
            assert len(got) == len(want)
            start, end = answer_section(want)
            assert got[:start] == want[:start] and got[end:] == want[end:]  # header, question, authority, additional
            a, b = dns.message.from_wire(want), dns.message.from_wire(got)
            if a.flags & dns.flags.TC:  # as many records survive, the first ones of a rotation
                full, kept = order(plain_full(plain, wire)), order(b)
                assert len(kept) == len(order(a)) and any(kept == (full + full)[k : k + len(kept)] for k in range(len(full)))
                rotated += order(a) != kept
                continue
            assert sorted(order(a)) == sorted(order(b))
            if all(r.rdtype not in (dns.rdatatype.A, dns.rdatatype.AAAA) for r in a.answer):
                assert got == want  # nothing to rotate: byte for byte
            else:
                assert is_rotation(order(b), order(a))
                rotated += order(a) != order(b)
    assert rotated > 20
