"""The whole server over real sockets: `mcsdns serve` as a subprocess, queried with
dnspython (UDP and TCP), raw sockets and dig.
"""

from __future__ import annotations

import random
import shutil
import socket
import struct
import subprocess
import sys
import time

import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.opcode
import dns.rcode
import pytest
import yaml

from testsupport.cases import MAIN, Z, check, make_query
from testsupport.framing import frame, read_frames
from testsupport.objects import headless_service
from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer


@pytest.fixture(scope="module")
def server():
    with McsdnsServer("--manifests", str(FIXTURES / "contract.yaml"), "--namespaces", "testns") as s:
        yield s


@pytest.mark.parametrize("c", MAIN, ids=lambda c: c.id)
def test_contract_table_over_udp(server, c):
    reply = dns.query.udp(make_query(c), *server.addr[:1], port=server.dns_port, timeout=2)
    check(c, reply)


@pytest.mark.parametrize("c", [c for c in MAIN if c.id in ("1", "8", "33", "37", "45", "12", "49", "51")], ids=lambda c: c.id)
def test_contract_table_over_tcp(server, c):
    reply = dns.query.tcp(make_query(c, edns=False), "127.0.0.1", port=server.dns_port, timeout=2)
    check(c, reply)


def test_dig(server):
    dig = shutil.which("dig")
    if dig is None:
        pytest.fail("dig is not installed (apt-get install bind9-dnsutils; .ci/run installs it)")
    out = subprocess.run(
        [dig, "@127.0.0.1", "-p", str(server.dns_port), "+short", "_http._tcp.svc1.testns.svc.clusterset.local", "SRV"],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout.split()  # fmt: skip
    assert out == ["0", "100", "80", "svc1.testns.svc.clusterset.local."]
    full = subprocess.run(
        [dig, "@127.0.0.1", "-p", str(server.dns_port), "svc0.testns.svc.clusterset.local"],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout  # fmt: skip
    assert "status: NXDOMAIN" in full and "flags: qr aa rd" in full
    assert "clusterset.local.\t5\tIN\tSOA\tns.dns.clusterset.local. hostmaster.clusterset.local." in full


# --------------------------------------------------------------------------- truncation and TCP


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A headless service with 80 endpoints: far more than 512 bytes of answers."""
    path = tmp_path_factory.mktemp("big") / "big.yaml"
    endpoints = [{"addresses": [f"10.20.{i // 200}.{i % 200 + 1}"], "hostname": f"pod-{i}"} for i in range(80)]
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}}, *headless_service("big", "many", endpoints)]
    path.write_text(yaml.safe_dump_all(docs))
    with McsdnsServer("--manifests", str(path)) as s:
        yield s


ALL_80 = {f"10.20.{i // 200}.{i % 200 + 1}" for i in range(80)}


def addresses(reply) -> set[str]:
    return {rd.address for rrset in reply.answer for rd in rrset}


def test_udp_without_edns_truncates_at_512(big):
    q = dns.message.make_query("many.big.svc." + Z, "A", use_edns=False)
    wire = dns.query.udp(q, "127.0.0.1", port=big.dns_port, timeout=2, raise_on_truncation=False, ignore_trailing=False).to_wire()
    reply = dns.message.from_wire(wire)
    assert reply.flags & dns.flags.TC
    assert len(wire) <= 512
    got = addresses(reply)
    assert got and got < ALL_80  # a correct subset, never a wrong record


def test_udp_with_edns_uses_advertised_size(big):
    q = dns.message.make_query("many.big.svc." + Z, "A", use_edns=0, payload=1232)
    raw = dns.query.udp(q, "127.0.0.1", port=big.dns_port, timeout=2, raise_on_truncation=False)
    assert raw.flags & dns.flags.TC and len(raw.to_wire()) <= 1232 and len(addresses(raw)) > 30
    q = dns.message.make_query("many.big.svc." + Z, "A", use_edns=0, payload=4096)
    full = dns.query.udp(q, "127.0.0.1", port=big.dns_port, timeout=2)
    assert not full.flags & dns.flags.TC and addresses(full) == ALL_80


def test_tcp_gets_the_full_answer(big):
    q = dns.message.make_query("many.big.svc." + Z, "SRV", use_edns=False)
    reply = dns.query.tcp(q, "127.0.0.1", port=big.dns_port, timeout=2)
    assert not reply.flags & dns.flags.TC
    assert len(reply.answer[0]) == 80 and sum(len(r) for r in reply.additional) == 80
    assert {rd.weight for rd in reply.answer[0]} == {1}  # floor(100/80) = 1


def test_udp_falls_back_to_tcp_like_a_resolver(big):
    q = dns.message.make_query("many.big.svc." + Z, "A", use_edns=False)
    reply, used_tcp = dns.query.udp_with_fallback(q, "127.0.0.1", port=big.dns_port, timeout=2)
    assert used_tcp and addresses(reply) == ALL_80


def test_tcp_pipelining(server):
    names = [f"{n}.testns.svc.{Z}" for n in ("svc1", "svc6", "hdls1", "svc0", "svc-dual-stack")]
    queries = [dns.message.make_query(n, "A") for n in names]
    with socket.create_connection(server.addr, timeout=3) as sock:
        sock.sendall(b"".join(frame(q) for q in queries))  # all at once, one write
        replies = read_frames(sock, len(queries))
    by_id = {r.id: r for r in replies}
    assert set(by_id) == {q.id for q in queries}
    for q in queries:
        assert by_id[q.id].question[0].name == q.question[0].name


# --------------------------------------------------------------------------- bad packets


def _udp_exchange(server, payload: bytes, timeout: float = 0.5) -> bytes | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(payload, server.addr)
        try:
            return s.recv(65535)
        except socket.timeout:
            return None


def test_short_packets_are_dropped(server):
    assert _udp_exchange(server, b"") is None
    assert _udp_exchange(server, b"\x12\x34\x01") is None


def test_malformed_question_gets_formerr(server):
    header = struct.pack(">HHHHHH", 0xBEEF, 0x0100, 1, 0, 0, 0)
    for body in (b"\x05abc", b"\xc0\x0c\x00\x01\x00\x01", b"\x03www\x00\x00", b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01"):
        reply = _udp_exchange(server, header + body)
        assert reply is not None
        msg = dns.message.from_wire(reply, question_only=True)
        assert msg.id == 0xBEEF and msg.rcode() == dns.rcode.FORMERR


def test_responses_and_unknown_opcodes(server):
    q = dns.message.make_query("svc1.testns.svc." + Z, "A")
    q.flags |= dns.flags.QR
    assert _udp_exchange(server, q.to_wire()) is None  # a response is never answered
    q = dns.message.make_query("svc1.testns.svc." + Z, "A")
    q.set_opcode(dns.opcode.STATUS)
    reply = dns.message.from_wire(_udp_exchange(server, q.to_wire()), question_only=True)
    assert reply.rcode() == dns.rcode.NOTIMP


def test_garbage_never_stops_the_server(server):
    rng = random.Random(1645)
    good = make_query(MAIN[0]).to_wire()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(2000):
            data = bytearray(good)
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.2:
                data = data[: rng.randrange(len(data))]
            s.sendto(bytes(data), server.addr)
    # TCP: a length prefix that lies, then a close.
    with socket.create_connection(server.addr, timeout=2) as sock:
        sock.sendall(b"\x02\x00" + b"\x00" * 10)
    # The flood may overflow the socket's receive buffer (the kernel drops, not the server):
    # ask until an answer comes, then check it.
    for _ in range(10):
        try:
            reply = dns.query.udp(make_query(MAIN[0]), "127.0.0.1", port=server.dns_port, timeout=1)
            break
        except dns.exception.Timeout:
            continue
    check(MAIN[0], reply)
    assert server.proc.poll() is None
    assert "Traceback" not in server.log()


# --------------------------------------------------------------------------- manifests: invalid objects, reload


GOOD = {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport", "metadata": {"name": "good", "namespace": "app"},
        "spec": {"type": "ClusterSetIP", "ips": ["10.9.0.1"], "ports": [{"port": 80, "protocol": "TCP"}]}}  # fmt: skip


def _import(name, **spec):
    base = {"type": "ClusterSetIP", "ips": ["10.9.0.2"], "ports": [{"port": 80, "protocol": "TCP"}]}
    base.update(spec)
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport", "metadata": {"name": name, "namespace": "app"}, "spec": base}


def test_invalid_objects_are_skipped_one_by_one(tmp_path):
    """Decision 12: only an object whose name cannot be a DNS label is skipped; the others are
    served without the part DNS cannot represent, each with one warning naming document and field."""
    bad = [
        _import("badip", ips=["10.9.0.300"]),
        _import("notype", type=None),
        _import("badport", ports=[{"port": 70000, "protocol": "TCP"}]),
        _import("Not_A_Label"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "app"}},
    ]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump_all([GOOD, *bad]))
    with McsdnsServer("--manifests", str(path)) as s:
        assert s.query("good.app.svc." + Z).answer[0][0].address == "10.9.0.1"
        badip = s.query(f"badip.app.svc.{Z}")  # no IP left: the name exists without addresses (NODATA)
        assert badip.rcode() == dns.rcode.NOERROR and not badip.answer and badip.authority
        assert s.query(f"notype.app.svc.{Z}").answer[0][0].address == "10.9.0.2"  # as CoreDNS: ClusterSetIP
        assert s.query(f"badport.app.svc.{Z}").answer[0][0].address == "10.9.0.2"
        srv = s.query(f"badport.app.svc.{Z}", "SRV")  # the port no SRV can carry is left out
        assert srv.rcode() == dns.rcode.NOERROR and not srv.answer
        assert s.query(f"not_a_label.app.svc.{Z}").rcode() == dns.rcode.NXDOMAIN
        log = s.log()
    assert ("document 2: ServiceImport app/badip served without what DNS cannot represent: "
            "spec.ips[0]: '10.9.0.300' is not an IP address; left out") in log
    assert "document 3: ServiceImport app/notype served without what DNS cannot represent: spec.type: ''" in log
    assert "document 4: ServiceImport app/badport served without what DNS cannot represent: spec.ports[0].port: 70000" in log
    assert "document 5: ServiceImport app/Not_A_Label rejected: metadata.name 'Not_A_Label' cannot be a DNS label" in log
    assert "document 6: skipping ConfigMap app/x" in log


def _wait_for(predicate, timeout: float = 5.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s")


def test_changed_file_is_reread_and_bad_edits_keep_the_last_good_state(tmp_path):
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump_all([GOOD]))
    with McsdnsServer("--manifests", str(tmp_path)) as s:
        name = "good.app.svc." + Z
        assert s.query(name).answer[0][0].address == "10.9.0.1"
        changed = dict(GOOD, spec=dict(GOOD["spec"], ips=["10.9.0.7"]))
        path.write_text(yaml.safe_dump_all([changed]))
        took = _wait_for(lambda: s.query(name).answer and s.query(name).answer[0][0].address == "10.9.0.7")
        print(f"file change served after {took:.2f}s")
        assert took < 2.5
        # Broken YAML: the last good state stays, the error names the file and line.
        path.write_text("apiVersion: v1\nkind: [unclosed\n")
        _wait_for(lambda: "invalid YAML/JSON" in s.log())
        assert s.query(name).answer[0][0].address == "10.9.0.7"
        assert f"{path}: invalid YAML/JSON at line" in s.log()
        # An edit that refuses the object (a field of a type the API never serves) keeps its last good version.
        path.write_text(yaml.safe_dump_all([dict(GOOD, spec=dict(GOOD["spec"], ips="10.9.0.8"))]))
        _wait_for(lambda: "spec.ips: expected list, got str" in s.log())
        assert s.query(name).answer[0][0].address == "10.9.0.7"
        # A new file in the directory is picked up; removing it withdraws its objects.
        extra = tmp_path / "extra.json"
        extra.write_text('{"apiVersion": "v1", "kind": "List", "items": [%s]}' % __import__("json").dumps(_import("other")))
        _wait_for(lambda: s.query("other.app.svc." + Z).rcode() == dns.rcode.NOERROR)
        extra.unlink()
        _wait_for(lambda: s.query("other.app.svc." + Z).rcode() == dns.rcode.NXDOMAIN)


def test_unreadable_file_keeps_last_good_state(tmp_path):
    if hasattr(__import__("os"), "geteuid") and __import__("os").geteuid() == 0:
        # root reads any file; make it unreadable by turning it into a directory-shaped error instead
        pass
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all([GOOD]))
    with McsdnsServer("--manifests", str(path)) as s:
        path.write_bytes(b"\xff\xfe not utf-8 \xff")
        _wait_for(lambda: "cannot read" in s.log())
        assert s.query("good.app.svc." + Z).answer[0][0].address == "10.9.0.1"


# --------------------------------------------------------------------------- the command line


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--ttl", "3601"], "--ttl must be in range [0, 3600]: 3601"),
        (["--ttl", "-1"], "--ttl must be in range [0, 3600]: -1"),
        (["--ttl", "five"], "'five' is not an integer"),
        (["--listen", "127.0.0.1:99999"], "port must be 0..65535"),
        (["--manifests", "/nonexistent/x.yaml"], "--manifests /nonexistent/x.yaml: no such file or directory"),
        (["--zone", "bad..zone"], "--zone 'bad..zone' is not a valid DNS name"),
        (["--startup-timeout", "soon"], "'soon' is not a duration"),
        (["--max-tcp-connections", "0"], "--max-tcp-connections must be in range [1, 1000000]: 0"),
        (["--tcp-idle-timeout", "0"], "--tcp-idle-timeout must be in range (0, 3600] seconds: 0.0"),
        (["--tcp-idle-timeout", "later"], "'later' is not a duration"),
        (["--tcp-max-queries", "-1"], "--tcp-max-queries must be in range [0, 1000000000] (0: no limit): -1"),
        (["--tcp-first-query-timeout", "0"], "--tcp-first-query-timeout must be in range (0, 3600] seconds: 0.0"),
        (["--tcp-first-query-timeout", "soon"], "'soon' is not a duration"),
        (["--max-tcp-connections-per-source", "-1"],
         "--max-tcp-connections-per-source must be in range [0, 1000000] (0: no cap): -1"),
        (["--loadbalance", "weighted"], "--loadbalance must be round_robin or off: 'weighted'"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(args, message):
    result = _run("serve", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_help_explains_every_flag():
    out = _run("serve", "--help").stdout
    for flag in ("--manifests", "--listen", "--http-listen", "--zone", "--ttl", "--namespaces", "--log-level", "--kubeconfig"):
        assert flag in out


def test_port_in_use_is_a_clear_error():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        result = _run("serve", "--listen", f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert "cannot start" in result.stderr and "Traceback" not in result.stderr


def test_python_dash_m_and_default_examples():
    """`mcsdns serve` with no source serves the bundled example cluster set and says so."""
    with McsdnsServer() as s:
        assert s.query("web.demo.svc." + Z).answer[0][0].address == "10.96.10.10"
        srv = s.query("_http._tcp.web.demo.svc." + Z, "SRV")
        assert srv.answer[0][0].port == 80
        assert {rd.address for r in s.query("db.demo.svc." + Z).answer for rd in r} == {"10.1.1.20", "10.2.1.20"}
        assert "serving the bundled example cluster set" in s.log()
        assert s.http("/health") == (200, "OK") and s.http("/ready") == (200, "OK")





def test_unusable_kubeconfig_exits_1_with_the_reason(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    result = subprocess.run(
        [sys.executable, "-m", "mcsdns", "serve", "--kubeconfig", str(bad), "--listen", "127.0.0.1:0",
         "--http-listen", "127.0.0.1:0", "--lameduck", "0", "--upstream", "none"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "cannot load the Kubernetes client configuration" in result.stderr
