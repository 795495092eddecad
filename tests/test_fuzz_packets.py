"""Fuzzing packets: mutated, random and structured queries through the resolver in-process, and TCP
streams whose length prefixes lie through a real listener.

The invariants (nothing raises; every reply parses, is a response to that very query and fits the
size the query allows; a Forward carries the query) and the mutators are testsupport/fuzz.py's. The
CI run does FUZZ_INPUTS (100k) seeded mutations in a tight loop, plus a hypothesis run for
shrinking. A long run is `python -m testsupport.fuzz --inputs 5000000 --seed N` (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import random
import struct
import time

import dns.flags
import dns.message
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from mcsdns.metrics import Metrics
from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.serve.transport import DnsServer, TcpLimits
from testsupport.cases import MAIN, Z, check, make_query
from testsupport.fuzz import (
    FUZZ_INPUTS,
    FUZZ_SEED,
    HEADER,
    QR,
    SEEDS,
    SI_HEADLESS,
    _slice,
    _with_opt,
    fresh_table,
    fuzz,
    mutate,
    resolver_pair,
    run_one,
    seed_queries,
)
from testsupport.inprocess import ask

pytestmark = pytest.mark.slow  # hundreds of thousands of fuzzed packets


@pytest.fixture(scope="module")
def resolvers(tmp_path_factory) -> tuple[Resolver, Resolver]:
    """(authoritative only, forwarding) over the contract fixture plus a big headless service."""
    return resolver_pair(tmp_path_factory.mktemp("big"))


# =========================================================================== packet tests


def test_seeds_are_valid_and_answered(resolvers):
    """The seeds themselves: sanity for the mutator's starting points, and the contract still holds."""
    metrics = Metrics(CollectorRegistry())
    for query in seed_queries():
        for tcp in (False, True):
            assert run_one(resolvers[0], metrics, query, tcp) != "dropped"
    for c in MAIN[:5]:
        check(c, ask(resolvers[0], make_query(c)))


def test_mutated_packets(resolvers):
    """FUZZ_INPUTS (100k) seeded mutations; prints the outcome mix."""
    started = time.monotonic()
    outcomes = fuzz(resolvers, FUZZ_INPUTS, FUZZ_SEED)
    took = time.monotonic() - started
    print(f"\n{FUZZ_INPUTS} inputs in {took:.1f}s ({FUZZ_INPUTS / took:.0f}/s): {dict(sorted(outcomes.items()))}")
    assert sum(outcomes.values()) == FUZZ_INPUTS
    # The mutators must reach past the header checks: a healthy mix of answers, not just FORMERR.
    assert outcomes.get("NOERROR", 0) > FUZZ_INPUTS * 0.1 and outcomes.get("FORMERR", 0) > FUZZ_INPUTS * 0.1


# Inputs the fuzzer found, kept as regressions (each was a violation before its fix; benchmarks/results/HISTORY.md).
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
            assert not len(server.tcp), f"{len(server.tcp)} connections still open"
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_frame(make_query(MAIN[0]).to_wire()))
            frames, _ = await _read_frames(reader, timeout=2.0)
            writer.close()
            check(MAIN[0], dns.message.from_wire(frames[0]))
        finally:
            server.stop_accepting()
            await server.drain(0.1)

    asyncio.run(main())


