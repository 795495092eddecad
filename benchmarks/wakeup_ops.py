"""Python work per UDP wakeup: mcsdns (its App, in process) against the floor's loop (prints figures).

At light load each wakeup brings a datagram or two, and what mcsdns costs above `benchmarks/floor.py`
is the Python it runs around the same resolver and the same three system calls. CPU time per query
on this shared 2-core VM moves by more than one idea changes it (light_cost's rounds spread by 10%);
the bytecodes a wakeup executes do not. This counts them, per function, with the interpreter's
opcode trace (`sys.settrace`, `f_trace_opcodes`) and the C functions called (`sys.setprofile`), over
`--wakeups` wakeups of `--datagrams` queries each, sent from a client socket on loopback before each
wakeup:

- floor: `benchmarks/floor.py`'s loop body (epoll_wait, recvmmsg, resolve, sendmmsg) on its own socket;
- mcsdns: one pass of the App's selector (`DispatchSelector.select(0)`: the epoll_wait, the UDP reader,
  the transport, the resolver, the metrics), started from `--manifests` of the benchmark's data set;
- mcsdns without metrics: the same App with its transport's observers removed.

Then it times wakeups without the trace (wall clock per wakeup, the client's send and receive
included, the same for every row: compare differences). A change's effect on the Python per wakeup
is the difference of two runs of this from two checkouts (`cd CHECKOUT && PYTHONPATH=$PWD python -m
benchmarks.wakeup_ops`); its effect on CPU time is light_cost's to measure.

usage: python -m benchmarks.wakeup_ops [--mix MIX] [--wakeups N] [--datagrams K] [--no-timing] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import select
import socket
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, NamedTuple

import dns.message

from mcsdns.serve import mmsg
from mcsdns.serve.transport import UDP_BATCH
from testsupport.inprocess import build_resolver

from . import dataset, provenance, queries

TIMED_WAKEUPS = 20_000  # per timed pass; the best of TIMED_PASSES is printed
TIMED_PASSES = 5


class Trace:
    """Bytecodes executed per function (file:name) and C functions called, while `on`."""

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def _frame(self, frame: Any, event: str, arg: Any) -> Callable | None:
        frame.f_trace_opcodes = True
        code = frame.f_code
        key = f"{Path(code.co_filename).name}:{code.co_name}"
        ops = self.ops

        def local(frame: Any, event: str, arg: Any) -> Callable:
            if event == "opcode":
                ops[key] += 1
            return local

        return local

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            self.calls[getattr(arg, "__qualname__", repr(arg))] += 1

    def run(self, fn: Callable[[], Any]) -> None:
        sys.settrace(self._frame)
        sys.setprofile(self._profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
            sys.settrace(None)


class Packets:
    """The queries to send, in order: a cached mix's repeat; an uncached mix's (unique names, random
    case) are each sent once, so no row answers one from a cache another row (or its own warm-up) filled."""

    def __init__(self, packets: list[bytes], repeat: bool) -> None:
        self.packets = packets
        self.repeat = repeat
        self.next = 0

    def take(self, n: int) -> list[bytes]:
        if self.repeat:
            start, count = self.next, len(self.packets)
            self.next += n
            return [self.packets[(start + i) % count] for i in range(n)]
        if self.next + n > len(self.packets):
            raise SystemExit(f"the mix has {len(self.packets)} distinct queries, fewer than this run sends: fewer --wakeups")
        taken = self.packets[self.next : self.next + n]
        self.next += n
        return taken


class Client:
    """A UDP socket on loopback that sends `datagrams` queries per wakeup and reads every reply."""

    def __init__(self, port: int, packets: Packets, datagrams: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(2.0)  # a reply that does not come is an error, not a hang
        self.packets = packets
        self.datagrams = datagrams

    def drive(self, wake: Callable[[], Any], wakeups: int, trace: Trace | None = None) -> None:
        """`wakeups` times: send the next datagrams, run `wake` (traced, with `trace`), read the replies."""
        datagrams = self.datagrams
        packets = self.packets.take(wakeups * datagrams)
        send, recv = self.sock.send, self.sock.recv
        for w in range(wakeups):
            for i in range(w * datagrams, (w + 1) * datagrams):
                send(packets[i])
            if trace is None:
                wake()
            else:
                trace.run(wake)
            for _ in range(datagrams):
                recv(65535)

    def close(self) -> None:
        self.sock.close()


def measure(name: str, client: Client, wake: Callable[[], Any], wakeups: int, timing: int) -> dict[str, Any]:
    """One row: `wakeups` traced, then TIMED_PASSES of `timing` untraced wakeups (0: none)."""
    if client.packets.repeat:
        client.drive(wake, len(client.packets.packets) // client.datagrams + 1)  # every packet once: caches filled
    trace = Trace()
    client.drive(wake, wakeups, trace)
    # (settrace and setprofile themselves: the trace's own two calls, left out)
    c_calls = {k: round(n / wakeups, 1) for k, n in trace.calls.most_common() if k not in ("settrace", "setprofile")}
    row: dict[str, Any] = {
        "name": name,
        "bytecodes_per_wakeup": round(sum(trace.ops.values()) / wakeups, 1),
        "c_calls_per_wakeup": round(sum(c_calls.values()), 1),
        "by_function": {k: round(n / wakeups, 1) for k, n in trace.ops.most_common()},
        "c_calls": c_calls,
    }
    if timing > 0:
        passes = []
        for _ in range(TIMED_PASSES):
            t = time.perf_counter()
            client.drive(wake, timing)
            passes.append((time.perf_counter() - t) / timing * 1e6)
        row["timed_wakeups"] = timing
        row["wall_us_per_wakeup"] = round(min(passes), 2)
        row["wall_us_passes"] = [round(p, 2) for p in passes]
    return row


class Passes(NamedTuple):
    """What each row measures: traced wakeups, datagrams per wakeup, wakeups per timed pass (0: none)."""

    wakeups: int
    datagrams: int
    timed: int


def floor_row(manifests: Path, packets: Packets, passes: Passes) -> dict[str, Any]:
    resolver = build_resolver(manifests=[manifests], zones=(dataset.ZONE,), ttl=dataset.TTL, synced=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    fd = sock.fileno()
    batch = mmsg.Batch(UDP_BATCH)
    poll = select.epoll()
    poll.register(fd, select.EPOLLIN)
    resolve = resolver.resolve
    rcodes = [0] * 16

    def wake() -> None:  # floor.py's loop body as it stands there, less its receive-error handling (none happens here)
        poll.poll(0)
        n = batch.recv(fd)
        j = 0
        for i in range(n):
            reply = resolve(batch.data(i), False)[0]
            if type(reply) is bytes and batch.put(j, i, reply):
                rcodes[reply[3] & 0x0F] += 1
                j += 1
        if j:
            batch.send(fd, j)

    client = Client(sock.getsockname()[1], packets, passes.datagrams)
    try:
        return measure("floor", client, wake, passes.wakeups, passes.timed)
    finally:
        client.close()
        poll.close()
        batch.close()
        sock.close()


async def mcsdns_rows(manifests: Path, packets: Packets, passes: Passes) -> list[dict[str, Any]]:
    from mcsdns.app import App
    from mcsdns.cli import build_parser, config_from_args

    config = config_from_args(build_parser().parse_args([
        "serve", "--manifests", str(manifests), "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        "--lameduck", "0", "--upstream", "none", "--log-level", "WARNING"]))
    app = App(config)
    await app.start()
    # The services the sync left to compile are compiled by a task of the loop, as in the server; the
    # rows below call the selector alone, which runs no task: wait for them first.
    deadline = time.monotonic() + 60
    while app.table.behind and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    if not hasattr(selector, "direct"):
        raise SystemExit("mcsdns's loop has no dispatch selector here (not Linux?): nothing to count")
    client = Client(app.server.addresses[0][1], packets, passes.datagrams)
    try:
        rows = [measure("mcsdns", client, lambda: selector.select(0), passes.wakeups, passes.timed)]
        app.server.observe = None
        app.server.observe_batch = None
        rows.append(measure("mcsdns without metrics", client, lambda: selector.select(0), passes.wakeups, passes.timed))
        return rows
    finally:
        client.close()
        await app.shutdown()


def report(rows: list[dict[str, Any]], top: int = 12) -> list[str]:
    floor = next((r for r in rows if r["name"] == "floor"), None)
    lines = []
    for row in rows:
        extra = ""
        if floor is not None and row is not floor:
            extra = f"  ({row['bytecodes_per_wakeup'] - floor['bytecodes_per_wakeup']:+.1f} over the floor)"
        wall = (f"; wall {row['wall_us_per_wakeup']} us per wakeup (best of {TIMED_PASSES} passes of {row['timed_wakeups']})"
                if "wall_us_per_wakeup" in row else "")
        lines.append(f"== {row['name']}: {row['bytecodes_per_wakeup']} bytecodes and {row['c_calls_per_wakeup']} C calls per wakeup{extra}{wall}")
        for key, n in list(row["by_function"].items())[:top]:
            lines.append(f"   {n:7.1f}  {key}")
        lines.append("   C calls: " + ", ".join(f"{k} {n}" for k, n in list(row["c_calls"].items())[:top]))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wakeup_ops", description=__doc__.splitlines()[0])
    parser.add_argument("--mix", default="clusterset_a", help="query mix (benchmarks.queries), cached by default")
    parser.add_argument("--wakeups", type=int, default=300, help="traced wakeups per server")
    parser.add_argument("--datagrams", type=int, default=2, help="queries per wakeup (about 2 at 20,000 q/s)")
    parser.add_argument("--no-timing", dest="timing", action="store_false", help="skip the untraced wall-clock passes")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.wakeups <= 10_000 or not 1 <= args.datagrams <= UDP_BATCH:
        parser.error(f"--wakeups must be in 1..10000 and --datagrams in 1..{UDP_BATCH}")
    if args.mix not in queries.MIXES:
        parser.error(f"--mix: one of {', '.join(queries.MIXES)}")
    spec = dataset.Spec(imports=1000, headless=(10, 100))  # the suite's (and light_cost's) data set
    with tempfile.TemporaryDirectory(prefix="wakeup-ops-") as work:
        manifests = dataset.write_manifests(spec, Path(work) / "objects.json")
        edns = queries.needs_edns(args.mix)
        options: dict[str, Any] = {"use_edns": 0, "payload": 4096} if edns else {"use_edns": False}  # as dnsperf (-e)
        lines = queries.read(queries.write(args.mix, spec, Path(work)))
        repeat = queries.cached(args.mix)
        # An uncached mix's distinct queries are shared out among the three rows' timed passes.
        timed = 0 if not args.timing else TIMED_WAKEUPS if repeat else min(
            TIMED_WAKEUPS, (len(lines) // 3 - args.wakeups * args.datagrams) // (TIMED_PASSES * args.datagrams))
        passes = Passes(args.wakeups, args.datagrams, timed)
        packets = Packets([dns.message.make_query(name, rdtype, **options).to_wire()
                           for name, rdtype in (lines[:4000] if repeat else lines)], repeat)
        rows = [floor_row(manifests, packets, passes)]
        from mcsdns.serve import selector

        loop = selector.new_loop()
        try:
            rows += loop.run_until_complete(mcsdns_rows(manifests, packets, passes))
        finally:
            loop.close()
    print("\n".join(report(rows)))
    if args.out is not None:
        args.out.write_text(json.dumps({
            "command": "python -m benchmarks.wakeup_ops " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": provenance.now(), "commit": provenance.commit(), "machine": provenance.machine(),
            "mix": args.mix, "wakeups": args.wakeups, "datagrams": args.datagrams, "rows": rows,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
