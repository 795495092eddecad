"""The cyclic garbage collector's pauses while `Resolver.resolve` answers (prints figures).

A collection stops the event loop: every query that arrives meanwhile waits, so one long full
collection is a p99.9 outlier. This drives `--queries` packets (default 1M) through the resolver
in process, drawn at random from more distinct packets than the packet cache holds (1,000
ClusterSetIP services x A/AAAA/SRV/TXT/SOA/MX, each plain, with EDNS, with DO and without RD,
plus 10,000 per-endpoint names), so the cache fills, empties and fills again as under a wide
mix, and reports per generation how many collections ran and their CPU time (`gc.callbacks`,
thread CPU time, so another process taking the core does not count), and the longest single
calls, for the same sequence and for a random-subdomain flood (every stall, whatever its cause:
emptying the set of sighted missing names at once was one). The table is built as the
server builds it: objects first, then the sync that compiles them (`Table._compile_everything`),
then `gc.collect()` and `gc.freeze()` as `App.start` does before it opens the listeners.

usage: python -m benchmarks.gc_pauses [--queries N] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import logging
import random
import subprocess
import time
from array import array
from pathlib import Path

from mcsdns.serve.resolve import Resolver
from testsupport.inprocess import KINDS, build_table

from . import dataset as ds
from .resolve_cost import packet


def build() -> Resolver:
    """The benchmark table, compiled by the initial sync as in the server (objects, then sync)."""
    table = build_table(objects=ds.objects(ds.Spec(imports=1000, endpoints=10, headless=(10, 100))), zones=(ds.ZONE,),
                        ttl=ds.TTL)
    for kind in KINDS:
        table.store.mark_synced(kind)
    resolver = Resolver(table)
    gc.collect()
    gc.freeze()
    return resolver


def pool() -> list[bytes]:
    spec = ds.Spec(imports=1000)
    names = [ds.svc_name(spec, i) for i in range(spec.imports)]
    out = []
    for name in names:
        for qtype in (1, 28, 33, 16, 6, 15):
            out.append(packet(name, qtype))
            edns = packet(name, qtype, edns=True)
            out += [edns, edns[:-4] + b"\x80" + edns[-3:]]  # EDNS, and EDNS with DO
            plain = packet(name, qtype)
            out.append(plain[:2] + b"\x00" + plain[3:])  # RD clear
    for i in range(spec.imports):
        for k in range(spec.endpoints):
            out.append(packet(f"{ds.dashed(ds.endpoint_ip(i, k, spec.endpoints))}.{ds.CLUSTER}.{names[i]}"))
    return out


def measure(queries: int) -> dict:
    resolver = build()
    packets = pool()
    rng = random.Random(1)
    sequence = [packets[rng.randrange(len(packets))] for _ in range(queries)]
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]
    order: list[tuple[int, float]] = []  # (generation, seconds) of each collection in turn

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.thread_time()
        else:
            pauses[info["generation"]].append(time.thread_time() - started[0])
            order.append((info["generation"], time.thread_time() - started[0]))

    gc.callbacks.append(timed)
    try:
        resolve = resolver.resolve
        cpu = time.process_time()
        for data in sequence:
            resolve(data)
        cpu = time.process_time() - cpu
    finally:
        gc.callbacks.remove(timed)
    flood = [packet(f"{rng.getrandbits(40):x}.{ds.svc_name(ds.Spec(imports=1000), rng.randrange(1000))}", 1, 7)
             for _ in range(min(queries, 200_000))]
    return {
        "queries": queries,
        "distinct packets": len(packets),
        "us per query": round(cpu / queries * 1e6, 2),
        "tracked objects at the end": len(gc.get_objects()),
        "frozen objects": gc.get_freeze_count(),
        "first collections (generation, ms)": [(g, round(t * 1e3, 2)) for g, t in order[:3]],
        "collections": {f"generation {g}": {"count": len(p), "max ms": round(max(p, default=0) * 1e3, 2),
                                            "total ms": round(sum(p) * 1e3, 1)} for g, p in pauses.items()},
        # Every stall, not only the collector's: the longest single resolve() calls (CPU ms), the same
        # sequence again, and a random-subdomain flood (unique missing names, each seen once).
        "longest calls, the same sequence (ms)": longest(resolver, sequence),
        f"longest calls, {len(flood):,} unique missing names (ms)": longest(resolver, flood),
    }


def longest(resolver: Resolver, sequence: list[bytes], keep: int = 5) -> list[float]:
    """The `keep` longest `resolver.resolve` calls over `sequence`, in thread CPU milliseconds (a call
    that stops the loop this long delays every query that arrives meanwhile), from a flushed cache."""
    resolver.flush()
    resolve, clock = resolver.resolve, time.thread_time
    times = array("d", bytes(8 * len(sequence)))  # machine floats: no object per call for the collector to scan
    for i, data in enumerate(sequence):
        started = clock()
        resolve(data)
        times[i] = clock() - started
    return [round(t * 1e3, 3) for t in heapq.nlargest(keep, times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    figures = measure(args.queries)
    print(json.dumps(figures, indent=2))
    if args.out is not None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        figures = {"command": "python -m benchmarks.gc_pauses --out " + str(args.out),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, **figures}
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
