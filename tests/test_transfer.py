"""Zone transfers (decision 8, mcsdns/xfr/transfer.py) over real sockets, read by dnspython, dig and kdig.

AXFR holds exactly the records `mcsdns zone` prints for the same objects (what the query path
answers); a zone of 1,500 services spans several messages, each at most 64 KiB, the question
in the first only, every one signed when the request was. TSIG errors, the address list,
UDP, IXFR's answers and malformed requests each get the RFC's reply.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import dns.tsig
import dns.tsigkeyring
import dns.xfr
import dns.zone
import pytest

from testsupport.framing import FrameReader, frame
from testsupport.mcsdnsserver import ROOT, McsdnsServer, exchange, metric
from testsupport.polling import eventually
from testsupport.secondaries import KnotSecondary

ZONE = "clusterset.local."
EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SECRET = base64.b64encode(bytes(range(32))).decode()
KEYRING = {dns.name.from_text("xfr-key."): dns.tsig.Key("xfr-key.", SECRET, "hmac-sha256")}
WRONG = {dns.name.from_text("xfr-key."): dns.tsig.Key("xfr-key.", base64.b64encode(b"x" * 32).decode(), "hmac-sha256")}
OTHER = {dns.name.from_text("other."): dns.tsig.Key("other.", SECRET, "hmac-sha256")}


def key_file(tmp: Path) -> Path:
    path = tmp / "tsig.key"
    path.write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    return path


def big_manifests(tmp: Path, services: int = 600) -> Path:
    """`services` ClusterSetIP imports with two ports each: a zone that needs several 64 KiB messages."""
    docs = ["apiVersion: v1\nkind: Namespace\nmetadata: {name: bulk}\n"]
    for i in range(services):
        docs.append(
            "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\n"
            f"metadata: {{name: service-number-{i:05d}, namespace: bulk}}\n"
            f"spec: {{type: ClusterSetIP, ips: [10.{i // 250}.{i % 250}.1], ports: [{{name: http, port: 80, protocol: TCP}}, "
            "{name: https, port: 443, protocol: TCP}]}\n")
    path = tmp / "bulk.yaml"
    path.write_text("---\n".join(docs))
    return path


def printed_zone(manifests: Path, *extra: str) -> dns.zone.Zone:
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--manifests", str(manifests), "--ns-address",
                           "127.0.0.1", *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return dns.zone.from_text(proc.stdout, origin=ZONE, relativize=False)


def contents(zone: dns.zone.Zone) -> set[tuple[str, str, int, str]]:
    """Every record but the SOA serial (each process has its own), as comparable text."""
    out = set()
    for name, node in zone.nodes.items():
        for rdataset in node:
            for rd in rdataset:
                if rd.rdtype == dns.rdatatype.SOA:
                    rd = rd.replace(serial=0)
                out.add((name.to_text().lower(), dns.rdatatype.to_text(rdataset.rdtype), rdataset.ttl, rd.to_text()))
    return out


def make(name: str, qtype: str, keyring: dict | None = None, **kw) -> dns.message.Message:
    """A query, signed with the one key of `keyring` if given."""
    query = dns.message.make_query(name, qtype, **kw)
    if keyring:
        query.use_tsig(keyring, next(iter(keyring)))
    return query


def transferred(port: int, keyring: dict | None = None) -> dns.zone.Zone:
    zone = dns.zone.Zone(ZONE, relativize=False)
    dns.query.inbound_xfr("127.0.0.1", zone, make(ZONE, "AXFR", keyring), port=port, timeout=10, lifetime=30)
    return zone


def axfr_done(records: list[dns.rrset.RRset]) -> bool:
    """The records so far (one per RRset) end a whole-zone reply: its second SOA, or a lone SOA."""
    soas = sum(1 for rrset in records if rrset.rdtype == dns.rdatatype.SOA)
    return soas >= 2 or (len(records) == 1 and soas == 1)


def tcp_messages(port: int, query: dns.message.Message, timeout: float = 10,
                 done: Callable[[list[dns.rrset.RRset]], bool] = axfr_done) -> list[bytes]:
    """Every message the server writes for `query` on one TCP connection until `done` says the records so
    far end the reply (or an error rcode)."""
    out: list[bytes] = []
    records: list[dns.rrset.RRset] = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(frame(query))
        reader = FrameReader(sock)
        while True:
            message = reader.expect()
            out.append(message)
            parsed = dns.message.from_wire(message, keyring=False, one_rr_per_rrset=True)
            records += parsed.answer
            if parsed.rcode() != dns.rcode.NOERROR or done(records):
                return out


def tsig_error(reply: dns.message.Message) -> int:
    return reply.tsig[0].error if reply.tsig else -1


# --------------------------------------------------------------------------- off by default


def test_off_by_default_every_transfer_is_refused() -> None:
    with McsdnsServer("--manifests", str(EXAMPLE)) as server:
        for qtype in ("AXFR", "IXFR"):
            for tcp in (True, False):
                reply = server.query(ZONE, qtype, tcp=tcp)
                assert reply.rcode() == dns.rcode.REFUSED and not reply.answer, (qtype, tcp, reply)


@pytest.mark.parametrize("flags, message", [
    (("--transfer-to", "10.0.0.300/8"), "--transfer-to '10.0.0.300/8' is not an address or CIDR"),
    (("--tsig-key-file", "KEY"), "--tsig-key-file needs --transfer-to"),
    (("--transfer-to", "127.0.0.1", "--tsig-key-file", "/nonexistent/key"), "--tsig-key-file /nonexistent/key:"),
    (("--transfer-to", "127.0.0.1", "--tsig-key-file", "BADALG"), "algorithm 'hmac-md4' is not one of"),
    (("--transfer-to", "127.0.0.1", "--tsig-key-file", "SHORT"), "the secret is 4 bytes; use at least 16"),
    (("--transfer-to", "127.0.0.1", "--notify", "knot secondary:53"), "'knot secondary' is neither an IP address nor a host name"),
    (("--transfer-to", "127.0.0.1", "--notify=-knot.example:53"), "is neither an IP address nor a host name"),
    (("--transfer-to", "127.0.0.1", "--max-transfers", "0"), "--max-transfers must be in range [1, 1000]: 0"),
    (("--transfer-to", "127.0.0.1", "--max-transfers", "1001"), "--max-transfers must be in range [1, 1000]: 1001"),
    (("--transfer-to", "127.0.0.1", "--max-transfers", "many"), "argument --max-transfers: 'many' is not an integer"),
])
def test_bad_transfer_flags_exit_2(flags: tuple[str, ...], message: str, tmp_path: Path) -> None:
    files = {"KEY": f"k:hmac-sha256:{SECRET}", "BADALG": f"k:hmac-md4:{SECRET}", "SHORT": "k:hmac-sha256:AAAAAA=="}
    args = []
    for flag in flags:
        if flag in files:
            (tmp_path / flag).write_text(files[flag] + "\n")
            flag = str(tmp_path / flag)
        args.append(flag)
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "serve", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- AXFR


def test_axfr_is_what_the_query_path_answers(tmp_path: Path) -> None:
    """The transferred zone is record for record `mcsdns zone`'s (which test_zonefile holds to the query path)."""
    with McsdnsServer("--manifests", str(EXAMPLE), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.0/8") as server:
        zone = transferred(server.dns_port)
        serial = server.query(ZONE, "SOA").answer[0][0].serial
        messages = tcp_messages(server.dns_port, dns.message.make_query(ZONE, "AXFR"))
    assert contents(zone) == contents(printed_zone(EXAMPLE))
    assert zone.get_soa().serial == serial
    assert (f"db-0.east.db.demo.svc.{ZONE}", "A", 5, "10.1.1.20") in contents(zone)  # with the cluster id
    first = dns.message.from_wire(messages[0])
    records = [rr for rrset in dns.message.from_wire(messages[0], one_rr_per_rrset=True).answer for rr in [rrset]]
    assert records[0].rdtype == records[-1].rdtype == dns.rdatatype.SOA and len(messages) == 1
    assert first.question[0].name == dns.name.from_text(ZONE) and first.flags & dns.flags.AA


@pytest.mark.slow
def test_a_large_zone_spans_messages_of_at_most_64k_each_signed(tmp_path: Path) -> None:
    manifests = big_manifests(tmp_path)
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--tsig-key-file", str(key_file(tmp_path))) as server:
        query = make("ClusterSet.Local.", "AXFR", KEYRING)
        messages = tcp_messages(server.dns_port, query)
        zone = transferred(server.dns_port, KEYRING)
    assert len(messages) >= 3 and all(len(m) <= 65535 for m in messages), [len(m) for m in messages]
    # Every message verifies, each chained to the one before (RFC 8945 5.3.1); the question only in the first.
    ctx = None
    request_mac = query.mac
    parsed = []
    for i, wire in enumerate(messages):
        message = dns.message.from_wire(wire, keyring=KEYRING, request_mac=request_mac, xfr=True,
                                        origin=None, tsig_ctx=ctx, multi=True, one_rr_per_rrset=True)
        assert message.had_tsig, i
        ctx, request_mac = message.tsig_ctx, None
        parsed.append(message)
    assert str(parsed[0].question[0].name) == "ClusterSet.Local."  # as the client spelled it
    assert all(not m.question for m in parsed[1:])
    answers = [rr for m in parsed for rr in m.answer]
    assert answers[0].rdtype == answers[-1].rdtype == dns.rdatatype.SOA
    assert sum(1 for rr in answers if rr.rdtype == dns.rdatatype.SOA) == 2
    assert contents(zone) == contents(printed_zone(manifests))
    assert len(contents(zone)) >= 600 * 7  # per service: A, two SRV, and A and SRV for each port name


# --------------------------------------------------------------------------- TSIG and the address list


@pytest.fixture(scope="module")
def signed_server(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("signed")
    with McsdnsServer("--manifests", str(EXAMPLE), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--tsig-key-file", str(key_file(tmp))) as server:
        yield server


def ask_tcp(port: int, query: dns.message.Message, keyring=None) -> dns.message.Message:
    """The first reply message to `query`, parsed with `keyring` (False: TSIG left unverified)."""
    wire = tcp_messages(port, query)[0]
    return dns.message.from_wire(wire, keyring=keyring if keyring is not None else False, request_mac=query.mac)


def test_signed_transfer_and_signed_queries(signed_server: McsdnsServer) -> None:
    zone = transferred(signed_server.dns_port, KEYRING)
    assert zone.get_soa() is not None and len(contents(zone)) > 20
    # A signed SOA query (a secondary's refresh) gets a signed answer, over UDP and TCP.
    for tcp in (False, True):
        query = make(ZONE, "SOA", KEYRING)
        how = dns.query.tcp if tcp else dns.query.udp
        reply = how(query, "127.0.0.1", port=signed_server.dns_port, timeout=2)
        assert reply.had_tsig and reply.answer[0].rdtype == dns.rdatatype.SOA, reply


def test_unsigned_transfer_is_refused_with_a_key(signed_server: McsdnsServer) -> None:
    reply = ask_tcp(signed_server.dns_port, dns.message.make_query(ZONE, "AXFR"))
    assert reply.rcode() == dns.rcode.REFUSED and not reply.answer and not reply.tsig


def test_wrong_secret_is_badsig_and_unknown_key_badkey(signed_server: McsdnsServer) -> None:
    for keyring, error, name in ((WRONG, dns.rcode.BADSIG, "BADSIG"), (OTHER, dns.rcode.BADKEY, "BADKEY")):
        query = make(ZONE, "AXFR", keyring)
        reply = ask_tcp(signed_server.dns_port, query)
        assert reply.rcode() == dns.rcode.NOTAUTH and not reply.answer, reply
        assert tsig_error(reply) == error and reply.tsig[0].mac == b"", reply  # unsigned (RFC 8945 5.2)
        # Refused, logged (the operator sees who sent it and with which key) and counted.
        assert f"axfr request refused: TSIG {name} from 127.0.0.1 (key {next(iter(keyring))}" in signed_server.log()
        assert f'mcsdns_transfers_total{{result="{name.lower()}",type="axfr"}} 1.0' in signed_server.http("/metrics")[1]


def tcp_messages_raw(port: int, wire: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(frame(wire))
        reader = FrameReader(sock)
        reply = reader.expect()
        assert not reader.buffer, "bytes after the reply"
        return reply


def test_skewed_clock_is_badtime_signed_with_the_server_time(signed_server: McsdnsServer,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    query = make(ZONE, "AXFR", KEYRING)
    now = time.time()
    with monkeypatch.context() as m:  # the client's clock an hour behind: dnspython signs with it
        m.setattr(time, "time", lambda: now - 3600)
        wire = query.to_wire()
    with pytest.raises(dns.tsig.PeerBadTime):  # dnspython reads the error after the MAC and key checks
        dns.message.from_wire(tcp_messages_raw(signed_server.dns_port, wire), keyring=KEYRING, request_mac=query.mac)
    reply = dns.message.from_wire(tcp_messages_raw(signed_server.dns_port, wire), keyring=False)
    assert reply.rcode() == dns.rcode.NOTAUTH and tsig_error(reply) == dns.rcode.BADTIME and not reply.answer
    assert "axfr request refused: TSIG BADTIME from 127.0.0.1 (key xfr-key., signed at" in signed_server.log()
    assert 'mcsdns_transfers_total{result="badtime",type="axfr"} 2.0' in signed_server.http("/metrics")[1]
    server_time = int.from_bytes(reply.tsig[0].other, "big")
    assert abs(server_time - time.time()) < 60 and len(reply.tsig[0].mac) == 32  # signed (RFC 8945 5.2.3)


def test_address_outside_the_list_is_refused() -> None:
    with McsdnsServer("--manifests", str(EXAMPLE), "--transfer-to", "10.0.0.0/8", "--transfer-to", "::1") as server:
        for qtype in ("AXFR", "IXFR"):
            reply = server.query(ZONE, qtype, tcp=True)
            assert reply.rcode() == dns.rcode.REFUSED and not reply.answer
        assert server.query(f"web.demo.svc.{ZONE}", "A", tcp=True).answer  # queries as before
        _, metrics = server.http("/metrics")
    assert 'mcsdns_transfers_total{result="refused",type="axfr"} 1.0' in metrics


def ixfr(serial: int, *, name: str = ZONE, rdclass: str = "IN", soa: bool = True) -> dns.message.Message:
    query = dns.message.make_query(name, "IXFR", rdclass=rdclass)
    if soa:
        rd = dns.rdata.from_text("IN", "SOA", f"ns.dns.{ZONE} hostmaster.{ZONE} {serial} 1 1 1 1")
        query.authority.append(dns.rrset.from_rdata(name, 5, rd))
    return query


def test_a_reverse_zone_transfers_what_its_queries_answer(tmp_path: Path) -> None:
    """--reverse-cidr zones transfer like the forward zone (docs/transfers.md): the AXFR of
    `10.in-addr.arpa` holds its SOA, NS, the NS target's address and one PTR per clusterset address in
    it, each what a PTR query answers; an IXFR behind our serial gets the whole zone (no journal of a
    reverse zone), at our serial the SOA alone; and Knot, a real secondary of the reverse zone, loads
    it and answers the PTRs."""
    reverse = "10.in-addr.arpa."
    with McsdnsServer("--manifests", str(EXAMPLE), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--reverse-cidr", "10.0.0.0/8", "--tsig-key-file", str(key_file(tmp_path))) as server:
        keyring = KEYRING
        zone = dns.zone.Zone(reverse, relativize=False)
        dns.query.inbound_xfr("127.0.0.1", zone, make(reverse, "AXFR", keyring), port=server.dns_port, timeout=10)
        got = {(name.to_text(), dns.rdatatype.to_text(rds.rdtype), rd.to_text())
               for name, rds in zone.iterate_rdatasets() for rd in rds if rds.rdtype != dns.rdatatype.SOA}
        assert got == {
            (reverse, "NS", f"ns.dns.{reverse}"), (f"ns.dns.{reverse}", "A", "127.0.0.1"),
            (f"20.1.1.{reverse}", "PTR", "db-0.east.db.demo.svc.clusterset.local."),
            (f"20.1.2.{reverse}", "PTR", "db-0.west.db.demo.svc.clusterset.local."),
            (f"10.10.96.{reverse}", "PTR", "web.demo.svc.clusterset.local."),
        }
        for name, qtype, data in got:
            reply = server.query(name, qtype)
            assert {rd.to_text() for rrset in reply.answer for rd in rrset} == {data}, (name, qtype)
        serial = server.query(reverse, "SOA").answer[0][0].serial
        assert zone.get_soa().serial == serial
        signed = ixfr(serial, name=reverse)
        signed.use_tsig(keyring, "xfr-key.")
        current = ask_tcp(server.dns_port, signed, keyring)
        assert [r.rdtype for r in current.answer] == [dns.rdatatype.SOA], current
        older = dns.zone.Zone(reverse, relativize=False)
        query, _ = dns.xfr.make_query(older, serial=serial - 1, keyring=keyring, keyname="xfr-key.")
        dns.query.inbound_xfr("127.0.0.1", older, query, port=server.dns_port, timeout=10)
        assert older.get_soa().serial == serial and len(list(older.iterate_rdatas())) == len(got) + 1
        metrics = server.http("/metrics")[1]
        assert 'mcsdns_ixfr_fallbacks_total{reason="reverse_zone"} 1.0' in metrics
        try:
            secondary = KnotSecondary(tmp_path / "knot", server.dns_port, ("xfr-key", "hmac-sha256", SECRET), zone=reverse)
        except RuntimeError as err:  # knotd missing: a failure in CI (.ci/run installs it)
            pytest.skip(str(err))
        with secondary:
            assert secondary.serial() == serial
            reply = dns.query.udp(dns.message.make_query(f"10.10.96.{reverse}", "PTR"), "127.0.0.1", port=secondary.port,
                                  timeout=2)
            assert [rd.to_text() for rrset in reply.answer for rd in rrset] == ["web.demo.svc.clusterset.local."]
        assert len(contents(transferred(server.dns_port, keyring))) > 20  # the forward zone still transfers


# --------------------------------------------------------------------------- IXFR, UDP, malformed


@pytest.fixture(scope="module")
def open_server():
    with McsdnsServer("--manifests", str(EXAMPLE), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1") as server:
        yield server


def test_ixfr_current_gets_the_soa_alone_older_the_whole_zone(open_server: McsdnsServer) -> None:
    serial = open_server.query(ZONE, "SOA").answer[0][0].serial
    current = ask_tcp(open_server.dns_port, ixfr(serial))
    assert [r.rdtype for r in current.answer] == [dns.rdatatype.SOA] and current.answer[0][0].serial == serial
    for other in (serial - 1, serial + 5, 1):  # older, newer, unknown: no journal, the whole zone
        messages = tcp_messages(open_server.dns_port, ixfr(other))
        answer = [rr for wire in messages for rr in dns.message.from_wire(wire, one_rr_per_rrset=True).answer]
        assert answer[0].rdtype == answer[-1].rdtype == dns.rdatatype.SOA and len(answer) > 20
        assert dns.message.from_wire(messages[0]).question[0].rdtype == dns.rdatatype.IXFR
    # dnspython's IXFR client takes the fallback as a full transfer.
    zone = dns.zone.Zone(ZONE, relativize=False)
    query, _ = dns.xfr.make_query(zone, serial=serial - 1)
    dns.query.inbound_xfr("127.0.0.1", zone, query, port=open_server.dns_port, timeout=10)
    assert zone.get_soa().serial == serial


@pytest.mark.parametrize("workers", [1, 2])
def test_in_the_lameduck_only_the_journal_serves_transfers(workers: int, tmp_path: Path) -> None:
    """After SIGTERM the pod answers queries for --lameduck. A secondary following it still gets each
    change by IXFR from the journal, but whoever chooses a primary gets REFUSED, signed: an AXFR, an
    IXFR at our serial (the probe deploy/examples/knot-secondary.yaml and `mcsdns follow-primary` send),
    an IXFR that would fall back to the whole zone. Counted as result "leaving"; with --workers 2 each
    worker does the same."""
    manifests = tmp_path / "clusterset.yaml"
    manifests.write_text(EXAMPLE.read_text())
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                      "--tsig-key-file", str(key_file(tmp_path)), "--lameduck", "8s", "--workers", str(workers)) as server:
        before = server.query(ZONE, "SOA").answer[0][0].serial
        manifests.write_text(manifests.read_text().replace('"10.96.10.10"', '"10.96.10.11"'))
        server.signal(signal.SIGHUP)

        def changed() -> int | None:
            serial = server.query(ZONE, "SOA").answer[0][0].serial
            return serial if serial != before else None

        serial = eventually(changed, 10, what="the change answered")

        def asked(query: dns.message.Message) -> dns.message.Message:
            query.use_tsig(KEYRING, next(iter(KEYRING)))
            return ask_tcp(server.dns_port, query, KEYRING)

        assert asked(ixfr(serial)).rcode() == dns.rcode.NOERROR  # the probe, before SIGTERM
        server.signal(signal.SIGTERM)
        eventually(lambda: server.http("/ready")[0] == 503, 3, what="/ready 503 after SIGTERM")
        for _ in range(4):  # a new connection each: with --workers 2 the kernel spreads them over both
            for query in (ixfr(serial), make(ZONE, "AXFR"), ixfr(1)):
                reply = asked(query)
                assert reply.rcode() == dns.rcode.REFUSED and not reply.answer and reply.had_tsig, (query, reply)
            diff = asked(ixfr(before))  # a secondary at the serial before the change: the change
            assert diff.rcode() == dns.rcode.NOERROR and diff.had_tsig, diff
            records = [(rr.rdtype, rd.to_text()) for rr in diff.answer for rd in rr]
            assert (dns.rdatatype.A, "10.96.10.10") in records and (dns.rdatatype.A, "10.96.10.11") in records, records
        assert server.query(ZONE, "SOA").answer[0][0].serial == serial
        assert [rd.address for rd in server.query(f"web.demo.svc.{ZONE}", "A", tcp=True).answer[0]] == ["10.96.10.11"]
        assert server.proc is not None and server.proc.poll() is None, "answering within the lameduck"
        counted = [metric(server, "mcsdns_transfers_total", result=result, type=kind)  # summed over workers
                   for result, kind in (("leaving", "ixfr"), ("leaving", "axfr"), ("ixfr", "ixfr"))]
        assert counted == [8, 4, 4], server.http("/metrics")[1]
        assert server.proc.wait(20) == 0, server.log()


def test_over_udp_axfr_is_notimp_and_ixfr_the_current_soa(open_server: McsdnsServer) -> None:
    reply = open_server.query(ZONE, "AXFR")
    assert reply.rcode() == dns.rcode.NOTIMP and not reply.answer
    serial = open_server.query(ZONE, "SOA").answer[0][0].serial
    reply = dns.query.udp(ixfr(serial - 1), "127.0.0.1", port=open_server.dns_port, timeout=2)
    assert [r.rdtype for r in reply.answer] == [dns.rdatatype.SOA] and reply.answer[0][0].serial == serial


@pytest.mark.parametrize("query, rcode", [
    (ixfr(1, soa=False), dns.rcode.FORMERR),  # no SOA in authority
    (ixfr(1, rdclass="CH"), dns.rcode.REFUSED),  # wrong class
    (dns.message.make_query(f"svc.{ZONE}", "AXFR"), dns.rcode.NOTAUTH),  # not a zone apex
    (dns.message.make_query(ZONE, "AXFR", rdclass="CH"), dns.rcode.REFUSED),
])
def test_malformed_requests(open_server: McsdnsServer, query: dns.message.Message, rcode: int) -> None:
    reply = ask_tcp(open_server.dns_port, query)
    assert reply.rcode() == rcode and not reply.answer, reply
    assert open_server.query(f"web.demo.svc.{ZONE}", "A").answer  # still answering


def test_ixfr_whose_soa_names_another_zone_is_formerr(open_server: McsdnsServer) -> None:
    query = dns.message.make_query(ZONE, "IXFR")
    rd = dns.rdata.from_text("IN", "SOA", "a. b. 1 1 1 1 1")
    query.authority.append(dns.rrset.from_rdata("example.com.", 5, rd))
    assert ask_tcp(open_server.dns_port, query).rcode() == dns.rcode.FORMERR


def test_garbage_on_the_transfer_path_gets_formerr_not_a_crash(open_server: McsdnsServer) -> None:
    # An AXFR question whose authority count promises a record that is not there.
    wire = bytearray(dns.message.make_query(ZONE, "AXFR").to_wire())
    wire[9] = 1
    reply = exchange(open_server, bytes(wire), tcp=True)
    assert reply[3] & 0xF == dns.rcode.FORMERR
    assert open_server.query(ZONE, "SOA", tcp=True).answer


def test_dig_and_kdig_read_a_signed_transfer(signed_server: McsdnsServer) -> None:
    for tool in ("dig", "kdig"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
        proc = subprocess.run([tool, "-p", str(signed_server.dns_port), "@127.0.0.1", ZONE, "AXFR",
                               "-y", f"hmac-sha256:xfr-key:{SECRET}"], capture_output=True, text=True, timeout=30)
        out = proc.stdout
        assert proc.returncode == 0 and "Transfer failed" not in out, out
        assert f"db-0.east.db.demo.svc.{ZONE}" in out and out.count("\tSOA\t") == 2, out
        assert "NOERROR" in out.split("TSIG")[-1], out  # the TSIG record of the reply: no error


@pytest.mark.slow
def test_twenty_secondaries_at_once_and_queries_keep_being_answered(tmp_path: Path) -> None:
    """20 AXFR of a 200-service zone at once, and UDP queries all the while: every query answered,
    every transfer complete (or REFUSED for being over the cap, which a secondary retries)."""
    import concurrent.futures

    manifests = big_manifests(tmp_path, 200)
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1") as server:
        expected = contents(transferred(server.dns_port))

        def one(_: int) -> str:
            try:
                return "same" if contents(transferred(server.dns_port)) == expected else "different"
            except dns.xfr.TransferError as exc:
                return f"refused: {exc}"

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            futures = [pool.submit(one, i) for i in range(20)]
            answered = 0
            while not all(f.done() for f in futures):
                reply = server.query(f"service-number-00007.bulk.svc.{ZONE}", "A", timeout=2)
                assert reply.answer[0][0].address == "10.0.7.1"
                answered += 1
            results = [f.result() for f in futures]
    assert results.count("same") >= 16 and all(r == "same" or r.startswith("refused") for r in results), results
    assert answered >= 1


def raw_transfer_size(port: int) -> int:
    """The bytes of a whole AXFR, read as fast as they come (no parsing) until a second of silence."""
    wire = dns.message.make_query(ZONE, "AXFR").to_wire()
    total = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(frame(wire))
        sock.settimeout(30)
        total += len(sock.recv(1 << 20))  # the first message waits for the packing
        sock.settimeout(1)
        try:
            while chunk := sock.recv(1 << 20):
                total += len(chunk)
        except socket.timeout:
            pass
    return total


@pytest.mark.slow
def test_a_secondary_that_never_reads_is_dropped_after_the_idle_timeout(tmp_path: Path) -> None:
    """It asks for the zone and reads nothing: once the buffers are full the server waits
    --tcp-idle-timeout (1 s here) for it, then drops the connection; queries are answered all along."""
    manifests = big_manifests(tmp_path, 14000)
    with McsdnsServer("--manifests", str(manifests), "--transfer-to", "127.0.0.1", "--tcp-idle-timeout", "1s") as server:
        whole = raw_transfer_size(server.dns_port)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server's writes back up
        sock.connect(("127.0.0.1", server.dns_port))
        wire = dns.message.make_query(ZONE, "AXFR").to_wire()
        sock.sendall(frame(wire))
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # not reading; queries still answered
            assert server.query(f"service-number-00001.bulk.svc.{ZONE}", "A").answer
            time.sleep(0.1)
        received = 0
        sock.settimeout(5)
        try:
            while chunk := sock.recv(65536):
                received += len(chunk)
        except ConnectionResetError:
            pass
        sock.close()
    assert received < whole, (received, whole)  # cut off, not written to the end


@pytest.mark.slow
def test_a_change_during_a_transfer_does_not_mix_serials(tmp_path: Path) -> None:
    """A secondary reads the first message of the zone, then the zone changes (a service deleted, one
    added, one's address changed, all sorted after the first message) and mcsdns answers the change;
    the rest of that transfer is still the old zone, both SOAs the old serial. The next transfer is the
    new zone. The client's small receive window keeps the server from packing far ahead meanwhile."""
    manifests = big_manifests(tmp_path, 3000)
    old = contents(printed_zone(manifests))
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1") as server:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.dns_port))
        sock.settimeout(30)
        wire = dns.message.make_query(ZONE, "AXFR").to_wire()
        sock.sendall(frame(wire))
        reader = FrameReader(sock)
        messages = [dns.message.from_wire(reader.expect(), one_rr_per_rrset=True)]
        text = manifests.read_text()
        text = text.replace("name: service-number-02999,", "name: service-number-99999,")  # deleted, added
        text = text.replace("ips: [10.8.0.1]", "ips: [10.99.0.1]")  # service-number-02000's address
        manifests.write_text(text)
        new = contents(printed_zone(manifests))
        server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while server.query(f"service-number-02000.bulk.svc.{ZONE}", "A").answer[0][0].address != "10.99.0.1":
            assert time.monotonic() < deadline, "the change was not answered"
            time.sleep(0.05)
        records = list(messages[0].answer)
        while not axfr_done(records):
            messages.append(dns.message.from_wire(reader.expect(), one_rr_per_rrset=True))
            records += messages[-1].answer
        sock.close()
        after = transferred(server.dns_port)
    assert len(messages) > 20  # the change came while most of the zone was still to be sent
    zone = dns.zone.Zone(ZONE, relativize=False)
    for rrset in records[:-1]:
        zone.find_rdataset(rrset.name, rrset.rdtype, create=True).update(rrset)
    serials = {rrset[0].serial for rrset in records if rrset.rdtype == dns.rdatatype.SOA}
    assert len(serials) == 1
    assert contents(zone) == old != new
    assert contents(after) == new
    assert after.get_soa().serial != serials.pop()


def test_the_docs_quote_the_stored_cost_runs() -> None:
    """docs/transfers.md's tables of `python -m benchmarks.transfer_cost` and `benchmarks.transfer_coredns`
    are the stored runs', as rendered."""
    from benchmarks import transfer_coredns, transfer_cost

    results = ROOT / "benchmarks" / "results"
    page = (ROOT / "docs" / "transfers.md").read_text()
    assert transfer_cost.markdown(json.loads((results / "transfer_cost.json").read_text())) in page
    assert transfer_coredns.markdown(json.loads((results / "transfer_coredns.json").read_text())) in page
