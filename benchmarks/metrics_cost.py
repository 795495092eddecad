"""What counting (the CoreDNS metric families) adds to a UDP packet's cost (prints figures).

The listener's own code (`DnsServer._on_udp`) drains batches of 64 queued queries from a real
loopback socket and sends the replies, once with no observer ("bare") and once with
`Metrics.observe` ("counted": every CoreDNS family, the duration clock included). The two are
alternated batch by batch and the best batch of each kept, so a busy machine inflates both alike;
the queries are plain A questions for 64 names of the benchmark data set (packet-cache hits after
the first batch, the path where counting weighs most). Target: counted <= 1.5x bare.
This replaces a timed unit test (speed targets live in benchmarks, not in tests).

usage: python -m benchmarks.metrics_cost [--batches N]
"""

from __future__ import annotations

import argparse
import logging
import socket
import time

from prometheus_client import CollectorRegistry

from mcsdns.metrics import Metrics, Views
from mcsdns.serve.transport import DnsServer, Listener

from . import dataset as ds
from .resolve_cost import build, packet

BATCH = 64  # transport.UDP_BATCH: what one wakeup drains
TARGET = 1.5  # counted / bare


def per_packet(batches: int) -> tuple[dict[str, float], float]:
    """Best seconds per packet, bare and counted, and how many requests the metrics counted."""
    resolver = build()
    registry = CollectorRegistry()
    metrics = Metrics(registry, Views(resolver.table, lambda: {}, lambda: ["dns://127.0.0.1:53"]))
    spec = ds.Spec(imports=1000)
    queries = [packet(ds.svc_name(spec, i), 1, i) for i in range(BATCH)]
    servers = {"bare": DnsServer(resolver), "counted": DnsServer(resolver, observe=metrics.observe)}
    where = Listener("dns://127.0.0.1:53", "udp", 1)
    best = {name: float("inf") for name in servers}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as srv, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as cli:
        for sock in (srv, cli):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            sock.bind(("127.0.0.1", 0))
            sock.setblocking(False)
        to = srv.getsockname()
        for _ in range(batches):
            for name, server in servers.items():
                for wire in queries:
                    cli.sendto(wire, to)
                started = time.perf_counter()
                server._on_udp(srv, where)
                best[name] = min(best[name], (time.perf_counter() - started) / BATCH)
                answered = 0
                while True:
                    try:
                        cli.recv(512)
                        answered += 1
                    except BlockingIOError:
                        break
                if answered != BATCH:
                    raise SystemExit(f"{name}: {answered} of {BATCH} queries answered")
    counted = sum(s.value for fam in registry.collect() if fam.name == "coredns_dns_requests"
                  for s in fam.samples if s.name == "coredns_dns_requests_total")
    return best, counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200, help="batches of 64 queries per variant")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    best, counted = per_packet(args.batches)
    if counted != args.batches * BATCH:
        raise SystemExit(f"the metrics counted {counted} requests, not {args.batches * BATCH}")
    ratio = best["counted"] / best["bare"]
    print(f"bare     {best['bare'] * 1e6:6.2f} us/packet (receive, resolve, send)")
    print(f"counted  {best['counted'] * 1e6:6.2f} us/packet (+ Metrics.observe: {counted:.0f} requests counted)")
    print(f"ratio    {ratio:6.2f}x  (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
