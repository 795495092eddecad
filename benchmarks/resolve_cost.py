"""CPU per query of `Resolver.resolve` for the query classes no packet cache helps (prints figures).

No sockets: this isolates the resolver's share of a query (the transport's is the same for
every class). 1,000 ClusterSetIP imports of the benchmark dataset; each class is 100,000
packets; the figure is the best of `rounds` passes, each after emptying the caches.

usage: python -m benchmarks.resolve_cost [--rounds N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from mcsdns.serve import resolve
from mcsdns.serve.resolve import Resolver
from testsupport.inprocess import build_resolver

from . import dataset as ds

PACKETS = 100_000


def build() -> Resolver:
    spec = ds.Spec(imports=1000, endpoints=10, headless=(10, 100))
    return build_resolver(objects=ds.objects(spec), zones=(ds.ZONE,), ttl=ds.TTL, synced=True)


def packet(name: str, qtype: int = 1, qid: int = 0, edns: bool = False) -> bytes:
    """A plain query (one question, no EDNS), as dnsperf and stub resolvers send; with `edns`, an
    OPT record without options (4096 bytes, as `dnsperf -e` sends) follows the question."""
    wire = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00"
    head = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
    return head + wire + struct.pack(">HH", qtype, 1) + (OPT_4096 if edns else b"")


OPT_4096 = b"\x00" + struct.pack(">HHIH", 41, 4096, 0, 0)


def classes(rng: random.Random) -> dict[str, list[bytes]]:
    spec = ds.Spec(imports=1000)
    names = [ds.svc_name(spec, i) for i in range(spec.imports)]

    def mixed(name: str) -> str:
        return "".join(ch.upper() if rng.random() < 0.5 else ch for ch in name)

    def qid() -> int:
        return rng.randrange(65536)

    headless = ds.headless_name(100)
    srv_named = ["_http._tcp." + n for n in names]
    return {
        "cached A (1,000 names repeated)": [packet(n, 1, 7) for n in names] * (PACKETS // len(names)),
        "cached SRV (1,000 names repeated)": [packet(n, 33, 7) for n in names] * (PACKETS // len(names)),
        "random letter case A (1,000 names)": [packet(mixed(rng.choice(names)), 1, qid()) for _ in range(PACKETS)],
        "random letter case A, packet cache off": [packet(mixed(rng.choice(names)), 1, qid()) for _ in range(PACKETS)],
        "random letter case SRV (1,000 names)": [packet(mixed(rng.choice(names)), 33, qid()) for _ in range(PACKETS)],
        "random letter case SRV _http._tcp": [packet(mixed(rng.choice(srv_named)), 33, qid()) for _ in range(PACKETS)],
        "cached A of 100-endpoint headless, EDNS": [packet(headless, 1, 7, True)] * PACKETS,
        "random letter case A of 100-endpoint, EDNS": [packet(mixed(headless), 1, qid(), True) for _ in range(PACKETS)],
        "random subdomain NXDOMAIN, EDNS (unique)": [packet(f"{rng.getrandbits(40):x}.{rng.choice(names)}", 1, qid(), True)
                                                     for _ in range(PACKETS)],
        "random subdomain NXDOMAIN (unique)": [packet(f"{rng.getrandbits(40):x}.{rng.choice(names)}", 1, qid())
                                               for _ in range(PACKETS)],
        "missing names NXDOMAIN (1,000 repeated)": [packet(f"missing-{i}.bench-1.svc.{ds.ZONE}", 1, 7) for i in range(1000)]
                                                   * (PACKETS // 1000),
        "missing service NXDOMAIN (unique)": [packet(f"x{rng.getrandbits(40):x}.bench-1.svc.{ds.ZONE}", 1, qid())
                                              for _ in range(PACKETS)],
    }


def measure(resolver: Resolver, packets: list[bytes], rounds: int) -> float:
    """Best CPU seconds per packet over `rounds` passes, each from empty caches."""
    resolve: Callable[[bytes], object] = resolver.resolve
    best = float("inf")
    for _ in range(rounds):
        resolver.flush()
        started = time.process_time()
        for data in packets:
            resolve(data)
        best = min(best, time.process_time() - started)
    return best / len(packets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    resolver = build()
    figures: dict[str, float] = {}
    for label, packets in classes(random.Random(7)).items():
        saved = resolve.PACKET_CACHE_ENTRIES
        if "packet cache off" in label:
            resolve.PACKET_CACHE_ENTRIES = 0  # every store empties the cache first: no hit is possible
        try:
            figures[label] = measure(resolver, packets, args.rounds)
        finally:
            resolve.PACKET_CACHE_ENTRIES = saved
        print(f"{label:42s} {figures[label] * 1e6:6.2f} us/query")
    if args.out is not None:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        args.out.write_text(json.dumps({
            "command": "python -m benchmarks.resolve_cost --out " + str(args.out),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "commit": commit,
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}",
            "us_per_query": {k: round(v * 1e6, 2) for k, v in figures.items()},
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
