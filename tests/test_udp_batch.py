"""The UDP listener's batched path (recvmmsg/sendmmsg, mcsdns/serve/mmsg.py) against its plain one.

Each test runs a real server twice where it matters: batched (the default on Linux) and with
MCSDNS_UDP=plain (one recvfrom/sendto per datagram). To put many datagrams in one batch for
certain, the server is stopped (SIGSTOP) while the clients send and continued (SIGCONT) after:
its next wakeup then finds them all queued, up to 64 per recvmmsg.
"""

from __future__ import annotations

import asyncio
import platform
import random
import signal
import socket
import struct
import sys
import time
from contextlib import contextmanager

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from mcsdns.serve import mmsg
from mcsdns.serve.resolve import Resolver
from mcsdns.serve.transport import DnsServer
from testsupport.inprocess import build_table
from testsupport.mcsdnsserver import ROOT, McsdnsServer, mcsdns_command
from testsupport.testbed import free_port
from upstreams import Fake, ForwardingServer

EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"  # what `serve` reads without --manifests
PATHS = {"batched": {}, "plain": {"MCSDNS_UDP": "plain"}}

# The bundled example's answers (README, "A dig walk-through"): name, type -> (rcode, rdata set).
EXPECTED = {
    ("web.demo.svc.clusterset.local.", "A"): (dns.rcode.NOERROR, {"10.96.10.10"}),
    ("web.demo.svc.clusterset.local.", "AAAA"): (dns.rcode.NOERROR, {"fd00:10:96::a"}),
    ("db.demo.svc.clusterset.local.", "A"): (dns.rcode.NOERROR, {"10.1.1.20", "10.2.1.20"}),
    ("db-0.west.db.demo.svc.clusterset.local.", "A"): (dns.rcode.NOERROR, {"10.2.1.20"}),
    ("nothere.demo.svc.clusterset.local.", "A"): (dns.rcode.NXDOMAIN, set()),
}


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@contextmanager
def paused(server: McsdnsServer):
    """The server process stopped: what is sent meanwhile waits in its socket's receive queue."""
    server.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.signal(signal.SIGCONT)


def udp_client(family: int = socket.AF_INET) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
    return sock


def collect(sock: socket.socket, count: int, quiet: float = 0.5, limit: float = 10.0) -> list[bytes]:
    """Datagrams arriving on `sock`: until `count` came and then `quiet` seconds passed with no more
    (so an extra reply is seen too), or `limit` seconds in all."""
    got: list[bytes] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        sock.settimeout(quiet if len(got) >= count else min(1.0, max(0.01, deadline - time.monotonic())))
        try:
            got.append(sock.recv(65535))
        except TimeoutError:
            if len(got) >= count:
                break
    return got


def check_answer(reply: dns.message.Message, name: str, qtype: str) -> None:
    rcode, rdata = EXPECTED[(name, qtype)]
    assert reply.rcode() == rcode, reply
    assert reply.question[0].name.to_text() == name and dns.rdatatype.to_text(reply.question[0].rdtype) == qtype
    assert {rd.to_text() for rrset in reply.answer for rd in rrset} == rdata, reply


def listening(server: McsdnsServer) -> str:
    return "\n".join(line for line in server.log().splitlines() if "listening for DNS" in line)


@pytest.fixture(params=list(PATHS))
def path(request) -> str:
    return request.param


def test_the_default_path_is_batched_and_the_switch_turns_it_off(path: str) -> None:
    """The listener says which path it runs (what the other tests compare)."""
    with McsdnsServer(env=PATHS[path]) as server:
        line = listening(server)
        assert line, server.log()
        assert ("batched: recvmmsg/sendmmsg" in line) == (path == "batched"), line


def test_many_datagrams_in_flight_from_many_clients_get_their_own_replies(path: str) -> None:
    """12 client sockets (IPv4, and IPv6 where ::1 exists) send 30 queries each while the server is
    stopped; every one gets exactly its reply, addressed to the socket that asked."""
    v6 = has_ipv6_loopback()
    port = free_port()
    args = ["--listen", f"[::1]:{port}"] if v6 else []
    rng = random.Random(7)
    with McsdnsServer(*args, env=PATHS[path]) as server:
        if v6:
            assert f"[::1]:{port}" in listening(server)
        families = [socket.AF_INET] * 8 + ([socket.AF_INET6] * 4 if v6 else [])
        clients = [udp_client(f) for f in families]
        sent: list[dict[int, tuple[str, str]]] = [{} for _ in clients]
        try:
            with paused(server):
                for round_ in range(30):
                    for k, sock in enumerate(clients):
                        name, qtype = rng.choice(list(EXPECTED))
                        q = dns.message.make_query(name, qtype)
                        q.id = k * 1000 + round_
                        sent[k][q.id] = (name, qtype)
                        to = ("::1", port) if sock.family == socket.AF_INET6 else server.addr
                        sock.sendto(q.to_wire(), to)
            for k, sock in enumerate(clients):
                replies = [dns.message.from_wire(w) for w in collect(sock, len(sent[k]))]
                assert sorted(r.id for r in replies) == sorted(sent[k]), f"client {k}: ids differ"
                for reply in replies:
                    check_answer(reply, *sent[k][reply.id])
        finally:
            for sock in clients:
                sock.close()


def test_a_batch_of_garbage_drops_forwards_and_answers() -> None:
    """One batch holding, from one client, an unreadable packet (dropped), a response (dropped) and
    a header with a broken question (FORMERR), interleaved with another client's forwarded and zone
    queries (and an IPv6 client's, on the IPv6 listener): each client gets exactly the replies it is
    owed, the forwarded ones from the upstream."""
    v6 = has_ipv6_loopback()
    port = free_port()
    for env in PATHS.values():
        with Fake(address="198.51.100.7") as upstream, ForwardingServer(
            "--upstream", upstream.addr, *(["--listen", f"[::1]:{port}"] if v6 else []), env=env,
        ) as server:
            four = udp_client()
            noise = udp_client()
            six = udp_client(socket.AF_INET6) if v6 else None
            response = dns.message.make_response(dns.message.make_query("web.demo.svc.clusterset.local.", "A"))
            formerr = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + b"\x03web"  # question cut short
            zone = [dns.message.make_query(name, qtype) for name, qtype in EXPECTED]
            fwd4 = dns.message.make_query("outside.example.", "A")
            fwd6 = dns.message.make_query("other.example.", "A")
            garbage = [b"\x01\x02\x03", response.to_wire(), formerr]
            mine = [zone[0], fwd4, *zone[1:]]
            try:
                with paused(server):
                    for n, q in enumerate(mine):
                        if n < len(garbage):
                            noise.sendto(garbage[n], server.addr)
                        four.sendto(q.to_wire(), server.addr)
                    if six is not None:
                        six.sendto(fwd6.to_wire(), ("::1", port))
                        six.sendto(zone[0].to_wire(), ("::1", port))
                got = collect(four, len(mine))
                by_id = {(w[0] << 8) | w[1]: w for w in got}
                assert len(got) == len(by_id) == len(mine), [w[:4] for w in got]
                forwarded = dns.message.from_wire(by_id[fwd4.id])
                assert [rd.to_text() for rrset in forwarded.answer for rd in rrset] == ["198.51.100.7"]
                for q in zone:
                    check_answer(dns.message.from_wire(by_id[q.id]), q.question[0].name.to_text(),
                                 dns.rdatatype.to_text(q.question[0].rdtype))
                noisy = collect(noise, 1)
                assert len(noisy) == 1 and (noisy[0][0] << 8 | noisy[0][1]) == 0x4242, noisy
                assert dns.message.from_wire(noisy[0], question_only=True).rcode() == dns.rcode.FORMERR
                if six is not None:
                    got6 = {r.id: r for r in map(dns.message.from_wire, collect(six, 2))}
                    assert sorted(got6) == sorted([fwd6.id, zone[0].id])
                    assert [rd.to_text() for rrset in got6[fwd6.id].answer for rd in rrset] == ["198.51.100.7"]
                    check_answer(got6[zone[0].id], "web.demo.svc.clusterset.local.", "A")
            finally:
                for sock in (four, noise, six):
                    if sock is not None:
                        sock.close()


def test_the_query_log_names_each_datagram_s_own_client(path: str) -> None:
    """--log-queries with one batch from 6 IPv4 (and 3 IPv6) clients, forwarded queries among them:
    each line names the address and port of the socket that sent that query."""
    v6 = has_ipv6_loopback()
    port = free_port()
    with Fake() as upstream, ForwardingServer("--log-queries", "--upstream", upstream.addr,
                                              *(["--listen", f"[::1]:{port}"] if v6 else []), env=PATHS[path]) as server:
        clients = [udp_client() for _ in range(6)] + ([udp_client(socket.AF_INET6) for _ in range(3)] if v6 else [])
        expected = {}
        try:
            with paused(server):
                for n in range(4):
                    for k, sock in enumerate(clients):
                        q = dns.message.make_query("outside.example." if n == 2 else "web.demo.svc.clusterset.local.", "A")
                        q.id = 1000 + 10 * k + n
                        host, sport = sock.getsockname()[:2]
                        expected[str(q.id)] = f"[{host}]:{sport}" if ":" in host else f"{host}:{sport}"
                        sock.sendto(q.to_wire(), ("::1", port) if sock.family == socket.AF_INET6 else server.addr)
            for sock in clients:
                assert len(collect(sock, 4)) == 4
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                seen = {}
                for line in server.log().splitlines():
                    parts = line.split(" ")
                    if line.startswith("[INFO] ") and len(parts) > 3 and parts[3] in expected:
                        seen[parts[3]] = parts[1]
                if len(seen) == len(expected):
                    break
                time.sleep(0.1)
            assert seen == expected
        finally:
            for sock in clients:
                sock.close()


def test_a_client_gone_before_its_reply_does_not_stop_the_others(path: str) -> None:
    """Clients that close their sockets before the replies come (ICMP port unreachable for each
    reply) interleaved with one that stays: it gets all its replies, and the server serves on."""
    with McsdnsServer(env=PATHS[path]) as server:
        stays = udp_client()
        gone = [udp_client() for _ in range(10)]
        q = dns.message.make_query("web.demo.svc.clusterset.local.", "A")
        ids = []
        try:
            with paused(server):
                for n, sock in enumerate(gone):
                    for _ in range(3):
                        sock.sendto(q.to_wire(), server.addr)
                    sock.close()
                    q.id = 100 + n
                    ids.append(q.id)
                    stays.sendto(q.to_wire(), server.addr)
            replies = [dns.message.from_wire(w) for w in collect(stays, len(ids))]
            assert sorted(r.id for r in replies) == ids
            for reply in replies:
                check_answer(reply, "web.demo.svc.clusterset.local.", "A")
            check_answer(server.query("db.demo.svc.clusterset.local."), "db.demo.svc.clusterset.local.", "A")
        finally:
            stays.close()
            for sock in gone:
                sock.close()


def test_a_reply_the_kernel_refuses_loses_no_other_reply(path: str) -> None:
    """A query from source port 0 (a raw packet: no socket can send one) gets a reply the kernel
    refuses to send (EINVAL); the replies queued before and after it in the batch still go out."""
    try:
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    except PermissionError:
        pytest.skip("needs CAP_NET_RAW to send a UDP packet from port 0")
    with raw, McsdnsServer("--log-level", "DEBUG", env=PATHS[path]) as server:
        client = udp_client()
        q = dns.message.make_query("web.demo.svc.clusterset.local.", "A")
        ids = []
        try:
            with paused(server):
                for n in range(6):
                    q.id = 200 + n
                    ids.append(q.id)
                    client.sendto(q.to_wire(), server.addr)
                    if n in (0, 3):
                        wire = q.to_wire()
                        raw.sendto(struct.pack(">HHHH", 0, server.dns_port, 8 + len(wire), 0) + wire, ("127.0.0.1", 0))
            replies = [dns.message.from_wire(w) for w in collect(client, len(ids))]
            assert sorted(r.id for r in replies) == ids
            for reply in replies:
                check_answer(reply, "web.demo.svc.clusterset.local.", "A")
            assert server.log().count("udp send to ('127.0.0.1', 0) failed") == 2, server.log()
        finally:
            client.close()


def test_the_batched_path_sends_the_plain_path_s_bytes() -> None:
    """The same queries (every example name in three spellings, with and without EDNS and DO, an
    SRV and a malformed packet), queued at once on a batched and on a plain listener of one process
    (one table, so one SOA serial): byte for byte the same replies."""
    queries: list[bytes] = []
    for name, qtype in EXPECTED:
        for spelling in (name, name.upper(), name[:4].upper() + name[4:]):
            for edns in (-1, 0):
                q = dns.message.make_query(spelling, qtype, use_edns=edns, want_dnssec=edns == 0)
                q.id = len(queries)
                queries.append(q.to_wire())
    srv = dns.message.make_query("db.demo.svc.clusterset.local.", "SRV", use_edns=False)
    srv.id = len(queries)
    queries.append(srv.to_wire())
    queries.append(struct.pack(">HHHHHH", len(queries), 0x0100, 1, 0, 0, 0) + b"\x07garbage")
    table = build_table([EXAMPLE])

    async def replies(batched: bool) -> dict[int, bytes]:
        server = DnsServer(Resolver(table), batch_udp=batched)
        assert server.batch_udp == batched  # this Linux has recvmmsg/sendmmsg
        addr = await server.listen("127.0.0.1", 0)
        client = udp_client()
        client.setblocking(False)
        try:
            for wire in queries:  # all queued before the loop first reads the socket
                client.sendto(wire, addr)
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            quiet_until = None
            while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
                await asyncio.sleep(0.01)
                while True:
                    try:
                        got.append(client.recv(65535))
                    except BlockingIOError:
                        break
                if len(got) >= len(queries) and quiet_until is None:
                    quiet_until = time.monotonic() + 0.3  # an extra reply would show up too
        finally:
            client.close()
            server.stop_accepting()
            await server.drain(0)
        by_id = {(w[0] << 8) | w[1]: w for w in got}
        assert len(by_id) == len(got) == len(queries), batched
        return by_id

    assert asyncio.run(replies(True)) == asyncio.run(replies(False))


def test_a_batch_reads_what_recvfrom_reads_and_sends_what_it_is_given() -> None:
    """mmsg.Batch on real loopback sockets: each datagram's bytes (an empty one and a 65,000-byte
    one too) and source tuple as recvfrom gives them (IPv4 and IPv6), replies to those sources; a
    reply too big for any UDP datagram is refused by put(), not written over the next slot."""
    families = [socket.AF_INET] + ([socket.AF_INET6] if has_ipv6_loopback() else [])
    for family in families:
        host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
        with socket.socket(family, socket.SOCK_DGRAM) as srv, udp_client(family) as a, udp_client(family) as b:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            srv.bind((host, 0))
            srv.setblocking(False)
            payloads = [(a, b"one"), (b, b""), (a, b"x" * 65000), (b, b"four")]
            for sock, payload in payloads:
                sock.sendto(payload, srv.getsockname())
            batch = mmsg.Batch(8)
            try:
                deadline = time.monotonic() + 5
                n = 0
                while n == 0 and time.monotonic() < deadline:
                    n = batch.recv(srv.fileno())
                assert n == len(payloads)
                assert [batch.data(i) for i in range(n)] == [p for _, p in payloads]
                assert [batch.address(i) for i in range(n)] == [s.getsockname() for s, _ in payloads]
                assert batch.put(0, 1, b"to b") and batch.put(1, 3, b"to b again") and batch.put(2, 2, b"to a")
                assert not batch.put(3, 3, b"y" * 65536)
                assert batch.send(srv.fileno(), 3) == []
            finally:
                batch.close()
            assert collect(b, 2) == [b"to b", b"to b again"]
            assert collect(a, 1) == [b"to a"]


def test_workers_serve_through_the_batched_path() -> None:
    """--workers 2 (SO_REUSEPORT, a socket per worker): each worker runs the batched listener and
    a burst from many sockets is answered in full."""
    with McsdnsServer("--workers", "2") as server:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and server.log().count("batched: recvmmsg/sendmmsg") < 2:
            time.sleep(0.1)
        assert server.log().count("batched: recvmmsg/sendmmsg") >= 2, server.log()
        clients = [udp_client() for _ in range(16)]
        try:
            for k, sock in enumerate(clients):
                for n in range(10):
                    q = dns.message.make_query("web.demo.svc.clusterset.local.", "A")
                    q.id = k * 100 + n
                    sock.sendto(q.to_wire(), server.addr)
            for k, sock in enumerate(clients):
                replies = [dns.message.from_wire(w) for w in collect(sock, 10)]
                assert sorted(r.id for r in replies) == [k * 100 + n for n in range(10)]
                for reply in replies:
                    check_answer(reply, "web.demo.svc.clusterset.local.", "A")
        finally:
            for sock in clients:
                sock.close()


# A kernel without recvmmsg/sendmmsg, made real: a seccomp filter (installed by this launcher, kept
# across exec) makes the listed system calls fail with ENOSYS in the server process.
MMSG_CALLS = {"x86_64": (0xC000003E, {"recvmmsg": 299, "sendmmsg": 307}),
              "aarch64": (0xC00000B7, {"recvmmsg": 243, "sendmmsg": 269})}
WITHOUT_CALLS = """
import ctypes, errno, os, struct, sys
arch, numbers, argv = int(sys.argv[1]), [int(n) for n in sys.argv[2].split(",")], sys.argv[3:]
op = lambda code, k, jt=0, jf=0: struct.pack("HBBI", code, jt, jf, k)
LD, JEQ, RET, ALLOW, ERRNO = 0x20, 0x15, 0x06, 0x7FFF0000, 0x00050000
prog = op(LD, 4) + op(JEQ, arch, 1, 0) + op(RET, ALLOW) + op(LD, 0)
for nr in numbers:
    prog += op(JEQ, nr, 0, 1) + op(RET, ERRNO | errno.ENOSYS)
prog += op(RET, ALLOW)
code = ctypes.create_string_buffer(prog)
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
fprog = Fprog(len(prog) // 8, ctypes.addressof(code))
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(fprog), 0, 0):  # NO_NEW_PRIVS; SECCOMP filter
    sys.exit("seccomp: " + os.strerror(ctypes.get_errno()))
os.execv(argv[0], argv)
"""


class TcpProbed(McsdnsServer):
    """A server whose readiness is probed over TCP: the test's own burst is its first UDP traffic."""

    def _answers(self) -> bool:
        try:
            dns.query.tcp(dns.message.make_query("probe.invalid.", "A"), "127.0.0.1", port=self.dns_port, timeout=0.2)
            return True
        except Exception:
            return False


@pytest.mark.parametrize("missing", [("recvmmsg", "sendmmsg"), ("sendmmsg",)])
def test_a_kernel_without_the_calls_gets_the_plain_path(missing: tuple[str, ...]) -> None:
    """libc has recvmmsg/sendmmsg but the kernel answers ENOSYS (seccomp makes it so here): the
    listener says so once, goes back to one call per datagram, and no reply is lost on the way
    (the first batch's replies, refused by sendmmsg, go out one by one)."""
    if platform.machine() not in MMSG_CALLS:
        pytest.skip(f"system call numbers of {platform.machine()} not listed here")
    arch, numbers = MMSG_CALLS[platform.machine()]
    server = TcpProbed()
    server.argv = [sys.executable, "-c", WITHOUT_CALLS, str(arch), ",".join(str(numbers[c]) for c in missing),
                   *mcsdns_command(server.dns_port, server.http_port)]
    with server:
        clients = [udp_client() for _ in range(4)]
        try:
            with paused(server):
                for k, sock in enumerate(clients):
                    for n in range(5):
                        q = dns.message.make_query("web.demo.svc.clusterset.local.", "A")
                        q.id = 10 * k + n
                        sock.sendto(q.to_wire(), server.addr)
            for k, sock in enumerate(clients):
                replies = [dns.message.from_wire(w) for w in collect(sock, 5)]
                assert sorted(r.id for r in replies) == [10 * k + n for n in range(5)]
                for reply in replies:
                    check_answer(reply, "web.demo.svc.clusterset.local.", "A")
            check_answer(server.query("db.demo.svc.clusterset.local."), "db.demo.svc.clusterset.local.", "A")
        finally:
            for sock in clients:
                sock.close()
        assert server.log().count("recvmmsg/sendmmsg unavailable: UDP on dns://127.0.0.1:") == 1, server.log()
