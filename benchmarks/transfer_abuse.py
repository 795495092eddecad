"""Zone transfers under abuse (issue #51): many at once, one that never reads, an IXFR the journal
cannot answer, bad TSIG (prints figures; --out stores them as JSON).

For each size, mcsdns serves the data set (dataset.Spec: ClusterSetIP imports with 10 endpoints each,
the two headless imports, and one import in a second manifests file that the IXFR step changes) with
`--transfer-to 127.0.0.1`, a TSIG key, `--ixfr-journal-bytes 1` (every change empties the journal) and
the default `--tcp-idle-timeout` (10 s). Every transfer is signed, as the documented deployment's are.
A UDP query is timed every 10 ms throughout. After the server is ready and has compiled every service
(`mcsdns_services_behind` 0), in order:

1. idle: the queries alone (3 s);
2. 20 AXFR clients at once (kdig; with two CPUs or more, the server and the query timer on the first and
   the clients on the others, so the clients' parsing does not take the server's CPU: real secondaries
   run elsewhere), the zone's first transfers (the packing included); a client REFUSED for the
   concurrent-transfer limit, or dropped, retries after 1 s, as a secondary does. Query p50/p99/max
   during them against idle, the server's RSS before, at its peak and 2 s after, the time until all
   20 hold the whole zone, and the retries;
3. idle again (3 s): the target compares the p99 during the 20 with the lower of the two idle p99s;
4. a client that asks AXFR and never reads (a 4 KiB receive buffer): the server's RSS while it sits
   there, a second client's whole AXFR meanwhile, and when the server drops it (the socket's TCP state
   read every 100 ms, until CLIENT_SEES seconds after the server counted the drop: a reset reaches the
   client at once, a FIN queued behind the replies it never read does not), with the server's
   `mcsdns_tcp_connections_closed{reason="not_reading"}`;
5. an IXFR from the serial at start after one change (the journal holds nothing older): the reply must
   be the whole zone in AXFR form (RFC 1995 4), counted `mcsdns_ixfr_fallbacks_total{reason="purged"}`;
6. an AXFR signed with the right key name and a wrong secret (NOTAUTH, TSIG error BADSIG), and one signed
   correctly 400 s ago, as a captured request replayed now is (outside the 300 s fudge: NOTAUTH,
   BADTIME): each refused, in the server's log, and counted in `mcsdns_transfers_total`.

usage: python -m benchmarks.transfer_abuse [--sizes 50000] [--out FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TSIG
import dns.rrset
import dns.tsig

from testsupport.framing import FrameReader, frame
from testsupport.mcsdnsserver import McsdnsServer, total

from . import dataset, flags, procstat
from .ixfr_follow import headless
from .servers import tool_path
from .transfer_cost import LOST, percentile, query_latencies

ZONE = "clusterset.local."
CLIENTS = 20
SECRET = base64.b64encode(bytes(range(7, 39))).decode()
KEY = dns.tsig.Key("xfr-key.", SECRET, "hmac-sha256")
WRONG = dns.tsig.Key("xfr-key.", base64.b64encode(b"w" * 32).decode(), "hmac-sha256")
TSIG_ERRORS = {0: "NOERROR", 16: "BADSIG", 17: "BADKEY", 18: "BADTIME"}  # (dnspython names 16 BADVERS, its EDNS meaning)
TCP_ESTABLISHED = 1
IDLE_TIMEOUT = 10.0  # the server's default --tcp-idle-timeout, the documented bound on a stuck reader
CLIENT_SEES = 5.0  # seconds the stuck client's socket is watched after the server counted its drop
CLIENT_PREFIX: list[str] = []  # how kdig is started: pinned to the CPUs the server is not on (`pinned`)


def kdig_axfr(port: int) -> dict[str, Any]:
    """One signed AXFR read to the end by kdig (on the CPUs the server is not on: `pinned`), tried again a
    second after a failure, as a secondary does: REFUSED for the concurrent-transfer limit, or dropped (a
    client that did not read for --tcp-idle-timeout). Seconds from the first try, bytes, records, retries."""
    started = time.perf_counter()
    refused, dropped = 0, []
    while True:
        proc = subprocess.run([*CLIENT_PREFIX, tool_path("kdig") or "kdig", "-p", str(port), "@127.0.0.1",
                               "-y", f"hmac-sha256:xfr-key:{SECRET}", ZONE, "AXFR", "+noall", "+stats", "+time=300"],
                              capture_output=True, text=True, timeout=900)
        got = re.search(r"Received (\d+) B \((\d+) messages, (\d+) records\)", proc.stdout)
        if proc.returncode == 0 and got is not None:
            return {"seconds": round(time.perf_counter() - started, 3), "bytes": int(got[1]),
                    "messages": int(got[2]), "records": int(got[3]), "refused": refused, "dropped": dropped}
        output = proc.stdout + proc.stderr
        if "REFUSED" in output and refused < 3600:
            refused += 1
        elif len(dropped) < 3:
            dropped.append(" / ".join(output.strip().splitlines()[-3:]))
        else:
            raise RuntimeError(f"kdig failed: {output}")
        time.sleep(1.0)


def signed_wire(qtype: str, key: dns.tsig.Key, when: float, serial: int | None = None) -> bytes:
    """A query for the zone signed with `key` as at time `when` (a request captured then and sent now).
    For IXFR, `serial` in the authority section's SOA (RFC 1995 3)."""
    query = dns.message.make_query(ZONE, qtype, use_edns=False)
    if serial is not None:
        query.authority.append(dns.rrset.from_text(ZONE, 0, "IN", "SOA", f". . {serial} 0 0 0 0"))
    wire = query.to_wire()
    rdata = dns.rdtypes.ANY.TSIG.TSIG(dns.rdataclass.ANY, dns.rdatatype.TSIG, key.algorithm, 0, 300, b"", query.id,
                                      0, b"")
    tsig, _ = dns.tsig.sign(wire, key, rdata, int(when), None, None, False)
    body = tsig.to_wire()
    record = key.name.to_wire() + struct.pack(">HHIH", dns.rdatatype.TSIG, dns.rdataclass.ANY, 0, len(body)) + body
    arcount = struct.unpack_from(">H", wire, 10)[0] + 1
    return wire[:10] + struct.pack(">H", arcount) + wire[12:] + record


def first_reply(port: int, wire: bytes) -> dns.message.Message:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(frame(wire))
        return dns.message.from_wire(FrameReader(sock).expect(), keyring=False)


def metric(server: McsdnsServer, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    status, body = server.http("/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics: {status}")
    return total(body, name, **labels)


class Rss:
    """The server's RSS sampled every 50 ms (and its kernel peak, VmHWM, reset at the start) until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.before = procstat.rss_mb([pid])
        self.peak = self.before
        self.hwm_reset = procstat.reset_hwm([pid])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, procstat.rss_mb([self.pid]))

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        peak = max(self.peak, procstat.hwm_mb([self.pid]) if self.hwm_reset else 0.0)
        return {"before": round(self.before, 1), "peak": round(peak, 1)}


class Timer:
    """The UDP query timer (transfer_cost.query_latencies) over one phase."""

    def __init__(self, port: int) -> None:
        self.out: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=query_latencies, args=(port, self._stop, self.out), daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        ms, out = 1000.0, self.out
        return {"p50": round(statistics.median(out) * ms, 2), "p99": round(percentile(out, 0.99) * ms, 2),
                "max": round(max(out) * ms, 2), "queries": len(out), "lost": out.count(LOST)}


def idle(port: int, seconds: float = 3.0) -> dict[str, float]:
    timer = Timer(port)
    time.sleep(seconds)
    return timer.stop()


def many_at_once(server: McsdnsServer) -> dict[str, Any]:
    pid = server.proc.pid  # type: ignore[union-attr]
    rss = Rss(pid)
    timer = Timer(server.dns_port)
    results: list[dict[str, Any]] = []
    failed: list[str] = []

    def client() -> None:
        try:
            results.append(kdig_axfr(server.dns_port))
        except RuntimeError as exc:
            failed.append(" / ".join(str(exc).strip().splitlines()[-3:]))

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    queries = timer.stop()
    memory = rss.stop()
    time.sleep(2.0)
    memory["after"] = round(procstat.rss_mb([pid]), 1)
    records = sorted({r["records"] for r in results})
    return {"seconds": round(seconds, 2), "completed": len(results), "failed": failed, "records": records,
            "bytes": results[0]["bytes"] if results else 0, "messages": results[0]["messages"] if results else 0,
            "refused": sum(r["refused"] for r in results), "dropped": [d for r in results for d in r["dropped"]],
            "client_seconds": {"min": min(r["seconds"] for r in results), "max": max(r["seconds"] for r in results)}
            if results else None,
            "query_ms": queries, "rss_mb": memory,
            "busy_metric": metric(server, "mcsdns_transfers_total", result="busy")}


def tcp_state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


def closed(server: McsdnsServer) -> float:
    """Connections the server closed for not reading or idling (the stuck client's way out)."""
    return sum(metric(server, "mcsdns_tcp_connections_closed_total", reason=r) for r in ("not_reading", "idle_timeout"))


def never_reads(server: McsdnsServer) -> dict[str, Any]:
    pid = server.proc.pid  # type: ignore[union-attr]
    closed_before = closed(server)
    rss = Rss(pid)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.dns_port))
    sock.sendall(frame(signed_wire("AXFR", KEY, time.time())))
    asked = time.monotonic()
    time.sleep(1.0)
    in_progress = metric(server, "mcsdns_transfers_in_progress")  # the stuck one holds its place
    other: dict[str, Any] = {}
    reader = threading.Thread(target=lambda: other.update(kdig_axfr(server.dns_port)))  # served meanwhile
    reader.start()
    dropped = client_saw = None
    while time.monotonic() - asked < IDLE_TIMEOUT * 3 + 30 and (dropped is None or client_saw is None):
        if dropped is None and closed(server) > closed_before:
            dropped = time.monotonic() - asked
        if client_saw is None and tcp_state(sock) != TCP_ESTABLISHED:
            client_saw = time.monotonic() - asked
        if dropped is not None and client_saw is None and time.monotonic() - asked > dropped + CLIENT_SEES:
            break
        time.sleep(0.1)
    reader.join()
    sock.close()
    memory = rss.stop()
    memory["after"] = round(procstat.rss_mb([pid]), 1)
    return {"dropped_after_s": round(dropped, 1) if dropped is not None else None,
            "client_saw_reset_after_s": round(client_saw, 1) if client_saw is not None else None,
            "idle_timeout_s": IDLE_TIMEOUT, "other_client": other, "in_progress_while_stuck": in_progress,
            "rss_mb": memory, "closed_reasons": {r: metric(server, "mcsdns_tcp_connections_closed_total", reason=r)
                                                 for r in ("not_reading", "idle_timeout")}}


def ixfr_purged(server: McsdnsServer, churn: Path, axfr_records: int) -> dict[str, Any]:
    port = server.dns_port
    old = serial_of(port)
    churn.write_text(headless("abuse", [("abuse-0", "10.201.0.1"), ("abuse-1", "10.201.0.2")]))
    server.signal(signal.SIGHUP)
    deadline = time.monotonic() + 600
    while serial_of(port) == old:
        if time.monotonic() > deadline:
            raise RuntimeError("the change was not served")
        time.sleep(0.05)
    fallbacks = metric(server, "mcsdns_ixfr_fallbacks_total", reason="purged")
    # Read by kdig (a C client: parsing a million records here would take the server's CPU), which checks
    # every message's TSIG; its records go to a file, of which the first two and the count are read.
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.run([*CLIENT_PREFIX, tool_path("kdig") or "kdig", "-p", str(port), "@127.0.0.1", "-y",
                               f"hmac-sha256:xfr-key:{SECRET}", ZONE, f"IXFR={old}", "+noall", "+answer", "+stats",
                               "+time=300"], stdout=out, stderr=subprocess.PIPE, text=True, timeout=900)
        seconds = time.perf_counter() - started
        out.seek(0)
        head = [line.split()[3] for line, _ in zip(out, range(2))]
        out.seek(0)
        got = re.search(r"Received (\d+) B \((\d+) messages, (\d+) records\)", out.read())
    if proc.returncode != 0 or got is None:
        raise RuntimeError(f"kdig IXFR failed: {proc.stderr}")
    return {"from_serial": old, "to_serial": serial_of(port), "seconds": round(seconds, 2),
            "whole_zone": len(head) == 2 and head[0] == "SOA" and head[1] != "SOA",
            "first_types": head, "records": int(got[3]), "axfr_records": axfr_records, "messages": int(got[2]),
            "bytes": int(got[1]),
            "purged_metric": metric(server, "mcsdns_ixfr_fallbacks_total", reason="purged") - fallbacks}


def bad_tsig(server: McsdnsServer) -> dict[str, Any]:
    port = server.dns_port
    out: dict[str, Any] = {}
    for case, key, when, result in (("wrong_secret", WRONG, time.time(), "badsig"),
                                    ("replayed_400s_later", KEY, time.time() - 400, "badtime")):
        before = metric(server, "mcsdns_transfers_total", type="axfr", result=result)
        reply = first_reply(port, signed_wire("AXFR", key, when))
        tsig = reply.tsig[0] if reply.tsig else None
        time.sleep(0.2)  # the log line and the counter
        out[case] = {"rcode": dns.rcode.to_text(reply.rcode()),
                     "tsig_error": TSIG_ERRORS.get(tsig.error, str(tsig.error)) if tsig is not None else None,
                     "answer_records": sum(len(r) for r in reply.answer),
                     "counted": metric(server, "mcsdns_transfers_total", type="axfr", result=result) - before,
                     "logged": [line.split(": ", 1)[-1] for line in server.log().splitlines()
                                if f"TSIG {result.upper()}" in line][-1:]}
    return out


def serial_of(port: int) -> int:
    """The served SOA serial; asked again while unanswered (a reload of 50,000 imports holds the server)."""
    query = dns.message.make_query(ZONE, "SOA")
    for _ in range(60):
        try:
            return dns.query.udp(query, "127.0.0.1", port=port, timeout=5).answer[0][0].serial
        except dns.exception.Timeout:
            continue
    raise RuntimeError("no SOA answer in 300 s")


def compiled(server: McsdnsServer, timeout: float = 900) -> None:
    """Wait until the services the initial sync left to compile while serving are compiled: until then the
    server's loop is busy with them, and the idle queries would measure that."""
    deadline = time.monotonic() + timeout
    while metric(server, "mcsdns_services_behind") > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("services still behind")
        time.sleep(0.5)


def step(name: str, figures: dict[str, Any]) -> dict[str, Any]:
    """A step's figures, printed as it ends (a later step's failure keeps them)."""
    print(f"  {name}: {json.dumps(figures)}", flush=True)
    return figures


def pinned() -> str:
    """With two CPUs or more: this process (so the server it starts, and the query timer) on the first, the
    kdig clients on the others, so the 20 clients' parsing does not take the server's CPU (real secondaries
    run elsewhere). The machine's other load still shares both."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or shutil.which("taskset") is None:
        return "not pinned"
    os.sched_setaffinity(0, {cpus[0]})
    CLIENT_PREFIX[:] = ["taskset", "-c", ",".join(map(str, cpus[1:]))]
    return f"server and query timer on CPU {cpus[0]}, kdig clients on {','.join(map(str, cpus[1:]))}"


def measure(size: int, work: Path, max_transfers: int | None = None) -> dict[str, Any]:
    manifests = dataset.write_manifests(dataset.Spec(imports=size), work / f"set-{size}.json")
    churn = work / f"abuse-{size}.yaml"
    churn.write_text(headless("abuse", [("abuse-0", "10.201.0.1")]))
    key = work / "tsig.key"
    key.write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    load = os.getloadavg()
    cpus = sorted(os.sched_getaffinity(0))
    pinning = pinned()
    limit = ("--max-transfers", str(max_transfers)) if max_transfers else ()
    server = McsdnsServer("--manifests", str(manifests), "--manifests", str(churn), "--ns-address", "127.0.0.1",
                          "--transfer-to", "127.0.0.1", "--tsig-key-file", str(key), "--ixfr-journal-bytes", "1", *limit)
    server.start(timeout=900)
    try:
        compiled(server)
        idle_before = step("idle before", idle(server.dns_port))
        twenty = step("20 at once", many_at_once(server))
        idle_after = step("idle after", idle(server.dns_port))
        stuck = step("never reads", never_reads(server))
        ixfr = step("IXFR from a purged serial", ixfr_purged(server, churn, twenty["records"][0] if twenty["records"] else 0))
        tsig = step("bad TSIG", bad_tsig(server))
    finally:
        server.stop()
        os.sched_setaffinity(0, cpus)
    idle_p99 = min(idle_before["p99"], idle_after["p99"])  # the stricter of the two
    return {"imports": size, "max_transfers": max_transfers or "default", "cpus": pinning,
            "load_average_at_start": [round(x, 2) for x in load],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "query_ms_idle_before": idle_before, "query_ms_idle_after": idle_after,
            "twenty_at_once": twenty, "p99_ratio": round(twenty["query_ms"]["p99"] / idle_p99, 2),
            "never_reads": stuck, "ixfr_purged": ixfr, "bad_tsig": tsig}


def markdown(figures: list[dict[str, Any]]) -> str:
    """The tables docs/transfers.md quotes (tests/test_transfer_abuse.py holds the page to the stored run)."""
    rows = ["| imports | 20 AXFR at once: all done | retried: refused, dropped | query p50 / p99 / max during | query p99 idle "
            "(before, after) | p99 ratio | RSS before / peak / after |",
            "|---|---|---|---|---|---|---|"]
    for f in figures:
        t, q, b, a = f["twenty_at_once"], f["twenty_at_once"]["query_ms"], f["query_ms_idle_before"], f["query_ms_idle_after"]
        m = t["rss_mb"]
        rows.append(f"| {f['imports']:,} | {t['seconds']:.1f} s ({t['completed']} of {CLIENTS}) | {t['refused']}, "
                    f"{len(t['dropped'])} | "
                    f"{q['p50']:.1f} / {q['p99']:.1f} / {q['max']:.0f} ms | {b['p99']:.1f}, {a['p99']:.1f} ms | "
                    f"{f['p99_ratio']:.2f} | {m['before']:.0f} / {m['peak']:.0f} / {m['after']:.0f} MB |")
    rows += ["", "| imports | never reads: dropped after | next client's AXFR | RSS before / peak | "
             "IXFR from a purged serial | wrong secret | replayed 400 s later |", "|---|---|---|---|---|---|---|"]
    for f in figures:
        s, i, t = f["never_reads"], f["ixfr_purged"], f["bad_tsig"]
        whole = "whole zone" if i["whole_zone"] else "NOT the whole zone"
        rows.append(f"| {f['imports']:,} | {s['dropped_after_s']} s | {s['other_client']['seconds']:.1f} s | "
                    f"{s['rss_mb']['before']:.0f} / {s['rss_mb']['peak']:.0f} MB | "
                    f"{whole}, {i['records']:,} records in {i['seconds']:.1f} s | "
                    f"{t['wrong_secret']['rcode']} {t['wrong_secret']['tsig_error']} | "
                    f"{t['replayed_400s_later']['rcode']} {t['replayed_400s_later']['tsig_error']} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transfer_abuse", description=__doc__.splitlines()[0])
    flags.add_sizes(parser, default="50000")
    parser.add_argument("--max-transfers", type=flags.count, default=None,
                        help="the server's --max-transfers (default: the server's default)")
    args = parser.parse_args(argv)
    limit = args.max_transfers
    return flags.run_sizes(args, "transfer-abuse", lambda size, work: measure(size, work, limit), _line, markdown)


def _line(size: int, got: dict[str, Any]) -> str:
    t, s, i = got["twenty_at_once"], got["never_reads"], got["ixfr_purged"]
    return (f"{size} imports (load {got['load_average_at_start']}): 20 AXFR at once in {t['seconds']} s "
            f"({t['completed']} complete, {t['refused']} refusals retried, failed {t['failed']}); query ms during "
            f"{t['query_ms']}, idle {got['query_ms_idle_before']} / {got['query_ms_idle_after']}, p99 ratio "
            f"{got['p99_ratio']}; RSS MB {t['rss_mb']}; never reads: dropped after {s['dropped_after_s']} s, other "
            f"client {s['other_client']['seconds']} s, RSS {s['rss_mb']}; IXFR from {i['from_serial']}: whole zone "
            f"{i['whole_zone']}, {i['records']} records (AXFR {i['axfr_records']}), purged counted "
            f"{i['purged_metric']}; TSIG {got['bad_tsig']}")


if __name__ == "__main__":
    sys.exit(main())
