"""The pure-Python floor at light load: mcsdns's resolver in the barest loop Python can run (a reference server).

Issue #34 asks mcsdns for at most 1.15x Knot's CPU per query at 20,000 q/s, where each wakeup
carries one to three datagrams. This server tells how much of the distance any Python server
would have to cover: it answers from mcsdns's own `Resolver` (the same compiled table, packet cache
and lanes) with the same system calls per wakeup as mcsdns's batched UDP path (epoll_wait,
recvmmsg, sendmmsg through `mcsdns.serve.mmsg`), and does nothing else: no asyncio loop, no TCP, no
HTTP listener, one counter per reply code instead of CoreDNS's metrics, no query log, no forwarding.
What mcsdns costs above it is its serving around the resolver (the event loop, the transport's
layers, the metrics); what it costs above Knot is Python's own wakeup and the resolver.

`benchmarks.light_cost --ours floor` measures it against Knot in place of mcsdns. Not a DNS server
to run: it serves one UDP socket on 127.0.0.1 until killed.

usage: python -m benchmarks.floor --port PORT --manifests FILE
"""

from __future__ import annotations

import argparse
import select
import socket
from pathlib import Path

from mcsdns.serve import mmsg
from mcsdns.serve.transport import UDP_BATCH
from testsupport.inprocess import build_resolver

from . import dataset


def serve(port: int, manifests: Path) -> None:
    """Answer UDP queries on 127.0.0.1:`port` from the objects in `manifests`, forever."""
    resolver = build_resolver(manifests=[manifests], zones=(dataset.ZONE,), ttl=dataset.TTL, synced=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", port))
    sock.setblocking(False)
    fd = sock.fileno()
    batch = mmsg.Batch(UDP_BATCH)  # datagrams per recvmmsg, as mcsdns's
    poll = select.epoll()
    poll.register(fd, select.EPOLLIN)
    resolve = resolver.resolve
    rcodes = [0] * 16  # replies by rcode: the one thing this server counts
    while True:
        poll.poll()
        try:
            n = batch.recv(fd)
        except mmsg.Unsupported:  # (ENOSYS: no recvmmsg in this kernel) the floor measures nothing then
            raise
        except OSError:  # (an ICMP error surfacing on the socket, EINTR): as mcsdns, skip it
            continue
        j = 0
        for i in range(n):
            reply = resolve(batch.data(i), False)[0]
            if type(reply) is bytes and batch.put(j, i, reply):
                rcodes[reply[3] & 0x0F] += 1
                j += 1
        if j:
            batch.send(fd, j)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="UDP port on 127.0.0.1")
    parser.add_argument("--manifests", type=Path, required=True, help="the data set's objects (dataset.write_manifests)")
    args = parser.parse_args(argv)
    try:
        serve(args.port, args.manifests)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
