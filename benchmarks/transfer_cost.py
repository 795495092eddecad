"""What an AXFR of the benchmark's cluster set costs (prints figures; --out stores them as JSON).

For each size, mcsdns serves the data set (dataset.Spec: ClusterSetIP imports with 10 endpoints
each, and the two headless imports) from manifests with `--transfer-to 127.0.0.1`, and one client
reads the zone over TCP: the time to the first message of a new serial's transfer (read by a
socket, which then hangs up), the first whole transfer (which packs the zone's messages as it
reads them) and a second one of the same serial (the packed messages reused), each read by kdig
and timed from its start to its exit, with the bytes, messages and records. A UDP query is timed every 10 ms during the first transfer (the
packing), idle, and while 20 clients transfer at once (at most 16 are served at once: the others are
REFUSED, as a secondary retries): p50, p99 and the longest a query waited.

usage: python -m benchmarks.transfer_cost [--sizes 1000,10000] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query

from testsupport.framing import FrameReader, frame
from testsupport.mcsdnsserver import McsdnsServer

from . import dataset, flags
from .servers import tool_path

ZONE = "clusterset.local."
LOST = 5.0  # what an unanswered query counts as (its timeout)


def axfr(port: int) -> dict[str, Any]:
    """One AXFR read to the end by kdig (a C client, so the Python query timer does not compete with
    it for the GIL): seconds, bytes, messages, records as kdig counts them."""
    started = time.perf_counter()
    proc = subprocess.run([tool_path("kdig"), "-p", str(port), "@127.0.0.1", ZONE, "AXFR", "+noall", "+stats",
                           "+time=300"],
                          capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    got = re.search(r"Received (\d+) B \((\d+) messages, (\d+) records\)", proc.stdout)
    if proc.returncode != 0 or got is None:
        raise RuntimeError(f"kdig failed: {proc.stdout}{proc.stderr}")
    return {"seconds": round(seconds, 4), "bytes": int(got[1]), "messages": int(got[2]), "records": int(got[3])}


def first_message(port: int) -> float:
    """Seconds from sending an AXFR to holding its first message whole (the zone not packed yet: a new
    serial's first transfer); the connection is then closed."""
    wire = dns.message.make_query(ZONE, "AXFR").to_wire()
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        sock.sendall(frame(wire))
        if FrameReader(sock).read() is None:
            raise RuntimeError("closed before the first message")
    return time.perf_counter() - started


def query_latencies(port: int, stop: threading.Event, out: list[float]) -> None:
    """Time one UDP query every 10 ms until `stop`; a query unanswered in 5 s counts as 5 s (and as lost)."""
    query = dns.message.make_query(f"svc-7.{dataset.Spec().namespace(7)}.svc.{ZONE}", "A")
    while not stop.is_set():
        started = time.perf_counter()
        try:
            dns.query.udp(query, "127.0.0.1", port=port, timeout=5)
        except dns.exception.Timeout:
            out.append(LOST)
            continue
        out.append(time.perf_counter() - started)
        time.sleep(0.01)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def measure(size: int, work: Path) -> dict[str, Any]:
    manifests = dataset.write_manifests(dataset.Spec(imports=size), work / f"set-{size}.json")
    with McsdnsServer("--manifests", str(manifests), "--transfer-to", "127.0.0.1", "--ns-address", "127.0.0.1") as server:
        packing: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=query_latencies, args=(server.dns_port, stop, packing), daemon=True)
        thread.start()
        ttfb = first_message(server.dns_port)
        first = axfr(server.dns_port)
        stop.set()
        thread.join()
        second = axfr(server.dns_port)
        quiet: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=query_latencies, args=(server.dns_port, stop, quiet), daemon=True)
        thread.start()
        time.sleep(1.0)
        stop.set()
        thread.join()
        busy: list[float] = []
        stop = threading.Event()
        thread = threading.Thread(target=query_latencies, args=(server.dns_port, stop, busy), daemon=True)
        thread.start()
        results: list[Any] = []
        failed: list[str] = []

        def client() -> None:
            try:
                results.append(axfr(server.dns_port))
            except RuntimeError as exc:  # e.g. REFUSED beyond MAX_TRANSFERS at once: a secondary retries
                failed.append(str(exc).strip().splitlines()[-1])

        clients = [threading.Thread(target=client) for _ in range(20)]
        started = time.perf_counter()
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        twenty = time.perf_counter() - started
        stop.set()
        thread.join()
    ms = 1000.0
    return {
        "imports": size, "first_message_s": round(ttfb, 4), "first_axfr": first, "second_axfr": second,
        "twenty_at_once": {"seconds": round(twenty, 3), "completed": len(results), "failed": failed},
        "query_ms_during_first": {"p50": round(statistics.median(packing) * ms, 2),
                                  "p99": round(percentile(packing, 0.99) * ms, 2), "max": round(max(packing) * ms, 2),
                                  "lost": packing.count(LOST)},
        "query_ms_before": {"p50": round(statistics.median(quiet) * ms, 2), "p99": round(percentile(quiet, 0.99) * ms, 2)},
        "query_ms_during": {"p50": round(statistics.median(busy) * ms, 2), "p99": round(percentile(busy, 0.99) * ms, 2),
                            "max": round(max(busy) * ms, 2), "queries": len(busy), "lost": busy.count(LOST)},
    }


def markdown(figures: list[dict[str, Any]]) -> str:
    """The table docs/transfers.md quotes (tests/test_transfer.py holds the page to the stored run)."""
    rows = ["| imports | records | bytes | messages | first message | first AXFR (packs) | next AXFR "
            "| query p99 / max, first AXFR | query p99 idle | 20 at once: complete, refused | query p99 / max, 20 at once |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in figures:
        a, q1, q0, q20, t = (f["first_axfr"], f["query_ms_during_first"], f["query_ms_before"], f["query_ms_during"],
                             f["twenty_at_once"])
        rows.append(f"| {f['imports']:,} | {a['records']:,} | {a['bytes'] / 1e6:.1f} MB | {a['messages']} | "
                    f"{f['first_message_s'] * 1000:.0f} ms | {a['seconds']:.1f} s | {f['second_axfr']['seconds']:.2f} s | "
                    f"{q1['p99']:.0f} / {q1['max']:.0f} ms | {q0['p99']:.0f} ms | {t['completed']}, {len(t['failed'])} | "
                    f"{q20['p99']:.0f} / {q20['max']:.0f} ms |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transfer_cost", description=__doc__.splitlines()[0])
    flags.add_sizes(parser)
    return flags.run_sizes(parser.parse_args(argv), "transfer-cost", measure, _line, markdown)


def _line(size: int, got: dict[str, Any]) -> str:
    return (f"{size} imports: AXFR {got['first_axfr']['records']} records, {got['first_axfr']['bytes']} bytes in "
            f"{got['first_axfr']['messages']} messages; first message after {got['first_message_s']} s, "
            f"first AXFR {got['first_axfr']['seconds']} s (packs), "
            f"second {got['second_axfr']['seconds']} s; 20 at once {got['twenty_at_once']['seconds']} s "
            f"({got['twenty_at_once']['completed']} complete, failed: {got['twenty_at_once']['failed']}); "
            f"query ms p50/p99/max during the first {got['query_ms_during_first']['p50']}/"
            f"{got['query_ms_during_first']['p99']}/{got['query_ms_during_first']['max']}, idle {got['query_ms_before']['p50']}/{got['query_ms_before']['p99']}, during "
            f"{got['query_ms_during']['p50']}/{got['query_ms_during']['p99']} (max {got['query_ms_during']['max']}) "
            "with 20 at once")


if __name__ == "__main__":
    sys.exit(main())
