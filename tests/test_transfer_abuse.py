"""Zone transfers under abuse (issue #51): the limit on transfers at once (--max-transfers, its metrics),
a secondary that never reads, and `python -m benchmarks.transfer_abuse` run small so it cannot rot.

Real servers, real sockets: the clients are dnspython over TCP and kdig.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from benchmarks import dataset
from testsupport.framing import FrameReader, frame
from testsupport.mcsdnsserver import ROOT, McsdnsServer, samples

ZONE = "clusterset.local."
pytestmark = pytest.mark.slow  # zones of megabytes, and waits for the idle timeout


def gauge(server: McsdnsServer, name: str) -> float:
    found = [value for got, value in samples(server.http("/metrics")[1], name) if not got]
    assert found, f"{name} not in /metrics"
    return found[0]


def axfr_reply(port: int) -> tuple[int, int]:
    """A whole AXFR read by dnspython-parsed frames: (rcode of the first message, messages read)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(frame(dns.message.make_query(ZONE, "AXFR")))
        reader = FrameReader(sock)
        soas = messages = 0
        while True:
            message = dns.message.from_wire(reader.expect(), one_rr_per_rrset=True)
            messages += 1
            if message.rcode() != dns.rcode.NOERROR:
                return message.rcode(), messages
            soas += sum(1 for rrset in message.answer if rrset.rdtype == 6)
            if soas >= 2:
                return dns.rcode.NOERROR, messages


def test_max_transfers_refuses_over_the_limit_and_a_stuck_reader_frees_its_place(tmp_path: Path) -> None:
    """--max-transfers 1: a secondary that asks for the zone and never reads holds the one place, so the
    next is REFUSED (counted busy, the gauges show 1 of 1) and queries are answered meanwhile; once the
    stuck one is dropped after --tcp-idle-timeout (1 s here), the next transfer is whole."""
    # 6,000 imports: a zone of about 7.6 MB, more than the kernel's socket buffers hold between the two.
    manifests = dataset.write_manifests(dataset.Spec(imports=6000), tmp_path / "set.json")
    with McsdnsServer("--manifests", str(manifests), "--transfer-to", "127.0.0.1", "--max-transfers", "1",
                      "--tcp-idle-timeout", "1s") as server:
        assert gauge(server, "mcsdns_transfers_max") == 1 and gauge(server, "mcsdns_transfers_in_progress") == 0
        # A whole transfer first (kdig), so the stuck one's buffers fill from messages already packed.
        whole = subprocess.run(["kdig", "-p", str(server.dns_port), "@127.0.0.1", ZONE, "AXFR", "+noall", "+stats"],
                               capture_output=True, text=True, timeout=300)
        assert whole.returncode == 0 and "messages" in whole.stdout, whole.stdout + whole.stderr
        stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.connect(server.addr)
        stuck.sendall(frame(dns.message.make_query(ZONE, "AXFR")))
        time.sleep(0.3)
        assert gauge(server, "mcsdns_transfers_in_progress") == 1
        rcode, _ = axfr_reply(server.dns_port)
        assert rcode == dns.rcode.REFUSED
        assert 'mcsdns_transfers_total{result="busy",type="axfr"} 1.0' in server.http("/metrics")[1]
        assert server.query(f"svc-7.{dataset.Spec().namespace(7)}.svc.{ZONE}", "A").answer  # answered meanwhile
        deadline = time.monotonic() + 60
        while gauge(server, "mcsdns_transfers_in_progress") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gauge(server, "mcsdns_transfers_in_progress") == 0, "the stuck reader still holds its place"
        assert 'mcsdns_tcp_connections_closed_total{reason="not_reading"} 1.0' in server.http("/metrics")[1]
        again = subprocess.run(["kdig", "-p", str(server.dns_port), "@127.0.0.1", ZONE, "AXFR", "+noall", "+stats"],
                               capture_output=True, text=True, timeout=300)  # (a C reader: within the 1 s timeout)
        assert again.returncode == 0 and whole.stdout.split("Received")[1].split(")")[0] in again.stdout, again.stdout
        stuck.close()


def test_the_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """Every step of the benchmark at 300 imports: the figures' shape, and what each step must show."""
    out = tmp_path / "abuse.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.transfer_abuse", "--sizes", "300", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (got,) = json.loads(out.read_text())
    twenty = got["twenty_at_once"]
    assert twenty["completed"] == 20 and not twenty["failed"] and len(twenty["records"]) == 1, twenty
    assert twenty["query_ms"]["lost"] == 0 and twenty["rss_mb"]["peak"] >= twenty["rss_mb"]["before"] > 0
    stuck = got["never_reads"]
    assert stuck["other_client"]["records"] == twenty["records"][0]
    assert stuck["dropped_after_s"] is not None  # a small zone fits the buffers: the idle timeout closes it
    ixfr = got["ixfr_purged"]
    assert ixfr["whole_zone"] and ixfr["purged_metric"] == 1 and ixfr["records"] >= twenty["records"][0], ixfr
    for case, error in (("wrong_secret", "BADSIG"), ("replayed_400s_later", "BADTIME")):
        tsig = got["bad_tsig"][case]
        assert (tsig["rcode"], tsig["tsig_error"], tsig["answer_records"], tsig["counted"]) == ("NOTAUTH", error, 0, 1)
        assert f"TSIG {error} from 127.0.0.1" in tsig["logged"][0]
    assert "| 300 |" in proc.stdout


def test_the_docs_quote_the_stored_run() -> None:
    """docs/transfers.md holds the tables of the stored 50,000-import run."""
    from benchmarks import transfer_abuse

    stored = json.loads((ROOT / "benchmarks" / "results" / "transfer_abuse.json").read_text())
    assert stored[0]["imports"] == 50000
    assert transfer_abuse.markdown(stored) in (ROOT / "docs" / "transfers.md").read_text()
