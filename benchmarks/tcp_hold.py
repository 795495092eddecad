"""One client holds thousands of TCP connections open; does another still get answers? (docs/reliability.md)

    python -m benchmarks.tcp_hold [--connections 2000,10000] [--sources 1,1000] [--seconds 20]
                                  [--servers mcsdns,coredns] [--out benchmarks/results/tcp_hold.json]

For each server and each (connections, sources) pair, in one run:

* the **holder** (its own process) opens `connections` TCP connections to the server, from `sources`
  loopback addresses (127.10.x.y; 1 = 127.0.0.1 alone), and on each sends (`--modes hold`) one of:
  nothing, half a length prefix, or a prefix promising 4,000 bytes followed by ten; or (`pipeline`)
  100 queries at once, and never reads a reply. Any connection the server closes is opened again at
  once, so the server never gets a slot back for free;
* once the holder has its connections up (or 10 s passed), the **prober** asks for `--seconds`:
  20 TCP queries a second, each on a new connection (as a resolver retries a truncated answer), and
  20 UDP queries a second, `db.demo.svc.clusterset.local SRV` from the bundled example. A query
  counts as answered when a reply with the SRV records arrives within 1 s;
* the server's RSS is sampled twice a second.

Servers: mcsdns as `mcsdns serve --manifests <example>` with its default flags, and CoreDNS (the
testbin's, `kubernetes ... multicluster clusterset.local` over the same objects applied to the
repository's etcd + kube-apiserver test bed) as its users run it. Loopback only; everything started
is stopped. Prints a table and stores JSON.
"""

from __future__ import annotations

import argparse
import errno
import json
import multiprocessing as mp
import resource
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rdatatype
import yaml

from benchmarks import provenance
from benchmarks.servers import CoreDns, Mcsdns, Server
from mcsdns.sources.manifests import default_paths

QNAME = "db.demo.svc.clusterset.local."
QTYPE = "SRV"
PROBES_PER_SECOND = 20  # per protocol
DEADLINE = 1.0  # seconds: an answer later than this counts as a failure
# What each held connection sends, in turn: nothing, half a length prefix, a prefix that lies.
PAYLOADS = (b"", b"\x00", struct.pack(">H", 4000) + b"\x00" * 10)


def source_address(i: int, sources: int) -> str | None:
    """Connection i's source: None (127.0.0.1) with one source, else one of `sources` in 127.10.0.0/16."""
    if sources <= 1:
        return None
    k = i % sources
    return f"127.10.{k // 250}.{k % 250 + 1}"


def raise_open_files(want: int) -> int:
    """Raise this process's soft open-file limit towards `want` (the hard limit caps it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


# --------------------------------------------------------------------------- the holder


def pipelined(count: int = 100) -> bytes:
    """`count` framed queries for QNAME SRV in one write (for --mode pipeline: asked, never read)."""
    wire = dns.message.make_query(QNAME, QTYPE, use_edns=False).to_wire()
    return (struct.pack(">H", len(wire)) + wire) * count


def hold(server: tuple[str, int], connections: int, sources: int, seconds: float, report: Any,
         payloads: tuple[bytes, ...] = PAYLOADS) -> None:
    """Keep `connections` connections open to `server` for `seconds`, reopening any the server closes.
    Puts ("up", seconds to establish) once they are, then the final counts (a dict) on `report`."""
    raise_open_files(connections + 256)
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed_by_server": 0, "connect_errors": 0, "open_samples": []}
    state: dict[socket.socket, tuple[int, bool]] = {}  # socket -> (index, connected)

    def open_one(i: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        src = source_address(i, sources)
        try:
            if src is not None:
                sock.bind((src, 0))
            err = sock.connect_ex(server)
        except OSError:
            err = -1
        if err not in (0, errno.EINPROGRESS):
            stats["connect_errors"] += 1
            sock.close()
            return
        stats["opened"] += 1
        state[sock] = (i, False)
        sel.register(sock, selectors.EVENT_WRITE)

    started = time.monotonic()
    for i in range(connections):
        open_one(i)
    announced = False
    deadline = started + seconds
    last_sample = 0.0
    pending_reopen: list[int] = []
    while time.monotonic() < deadline:
        for key, events in sel.select(timeout=0.05):
            sock = key.fileobj
            i, connected = state[sock]  # type: ignore[index]
            if not connected:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):  # type: ignore[union-attr]
                    stats["connect_errors"] += 1
                    sel.unregister(sock)
                    del state[sock]  # type: ignore[arg-type]
                    sock.close()  # type: ignore[union-attr]
                    pending_reopen.append(i)
                    continue
                state[sock] = (i, True)  # type: ignore[index]
                payload = payloads[i % len(payloads)]
                try:
                    if payload:
                        sock.send(payload)  # type: ignore[union-attr]
                except OSError:
                    pass
                sel.modify(sock, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(65536)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                continue  # (nothing is asked, so nothing should come; read and ignore)
            stats["closed_by_server"] += 1
            sel.unregister(sock)
            del state[sock]  # type: ignore[arg-type]
            sock.close()  # type: ignore[union-attr]
            pending_reopen.append(i)
        while pending_reopen:
            open_one(pending_reopen.pop())
        now = time.monotonic()
        connected = sum(1 for _, up in state.values() if up)
        if not announced and (connected >= connections or now - started > 10):
            report.put(("up", now - started, connected))
            announced = True
        if announced and now - last_sample >= 0.5:
            stats["open_samples"].append(connected)
            last_sample = now
    for sock in list(state):
        sock.close()
    samples = sorted(stats.pop("open_samples")) or [0]
    stats["held_median"] = samples[len(samples) // 2]
    stats["held_min"] = samples[0]
    report.put(("done", stats))


# --------------------------------------------------------------------------- the prober


def probe_once(port: int, tcp: bool, qname: str = QNAME, qtype: str = QTYPE) -> float | None:
    """Seconds until an answer holding `qtype` records, None if none within DEADLINE."""
    q = dns.message.make_query(qname, qtype)
    started = time.monotonic()
    try:
        if tcp:
            reply = dns.query.tcp(q, "127.0.0.1", port=port, timeout=DEADLINE)
        else:
            reply = dns.query.udp(q, "127.0.0.1", port=port, timeout=DEADLINE)
    except Exception:
        return None
    took = time.monotonic() - started
    if took > DEADLINE or not any(r.rdtype == dns.rdatatype.from_text(qtype) for r in reply.answer):
        return None
    return took


def probe(port: int, seconds: float, qname: str = QNAME, qtype: str = QTYPE) -> dict[str, Any]:
    """PROBES_PER_SECOND TCP and UDP queries a second for `seconds`: counts and latencies per protocol."""
    results: dict[str, list] = {"tcp": [], "udp": []}
    lock = threading.Lock()

    def one(proto: str) -> None:
        took = probe_once(port, proto == "tcp", qname, qtype)
        with lock:
            results[proto].append(took)

    with ThreadPoolExecutor(max_workers=64) as pool:
        start = time.monotonic()
        n = int(seconds * PROBES_PER_SECOND)
        for k in range(n):
            delay = start + k / PROBES_PER_SECOND - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, "tcp")
            pool.submit(one, "udp")
    out: dict[str, Any] = {}
    for proto, values in results.items():
        ok = sorted(v for v in values if v is not None)
        out[proto] = {
            "sent": len(values),
            "answered": len(ok),
            "answered_pct": round(100.0 * len(ok) / len(values), 2) if values else 0.0,
            "p50_ms": round(1000 * ok[len(ok) // 2], 1) if ok else None,
            "p99_ms": round(1000 * ok[min(len(ok) - 1, int(len(ok) * 0.99))], 1) if ok else None,
            "max_ms": round(1000 * ok[-1], 1) if ok else None,
        }
    return out


# --------------------------------------------------------------------------- one attack on one server


def attack(server: Server, connections: int, sources: int, seconds: float, mode: str) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    report = ctx.Queue()
    payloads = PAYLOADS if mode == "hold" else (pipelined(),)
    holder = ctx.Process(target=hold, args=(("127.0.0.1", server.port), connections, sources, seconds + 12, report,
                                            payloads), daemon=True)
    rss: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            rss.append(server.rss_mb())

    rss.append(server.rss_mb())
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    holder.start()
    try:
        _, up_after, connected = report.get(timeout=30)
        probed = probe(server.port, seconds)
    finally:
        stop.set()
        sampler.join()
    _, held = report.get(timeout=60)
    holder.join(10)
    if holder.is_alive():
        holder.kill()
    return {
        "server": server.label, "mode": mode, "connections": connections, "sources": sources, "seconds": seconds,
        "holder_up_after_s": round(up_after, 2), "holder_connected_at_start": connected, **held,
        **probed, "rss_mb_before": round(rss[0], 1), "rss_mb_max": round(max(rss), 1),
    }


# --------------------------------------------------------------------------- set-up and report


def start_servers(names: list[str], work: Path) -> tuple[list[Server], Any]:
    """mcsdns from the example manifests; CoreDNS over the same objects in the test bed (started here)."""
    example = default_paths()[0]
    servers: list[Server] = []
    testbed = None
    if "mcsdns" in names:
        mcsdns = Mcsdns("mcsdns", work, manifests=example)
        mcsdns.start(QNAME)
        servers.append(mcsdns)
    if "coredns" in names:
        from testsupport.testbed import Testbed, find_testbin

        cache = find_testbin()
        testbed = Testbed(cache)
        testbed.start()
        testbed.install_crd("v0.5.0")
        for path in sorted(example.glob("*.yaml")):
            for obj in yaml.safe_load_all(path.read_text()):
                if obj:
                    testbed.apply(obj)
        coredns = CoreDns("coredns", work, binary=cache / "bin" / "coredns", kubeconfig=testbed.kubeconfig_path)
        coredns.start(QNAME)
        servers.append(coredns)
    return servers, testbed


def print_table(rows: list[dict[str, Any]], header: bool = True) -> None:
    if header:
        print(f"{'server':<8} {'mode':<8} {'held':>6} {'srcs':>5} | {'TCP answered <1s':>18} {'p50':>6} {'p99':>6} {'max':>6} | "
              f"{'UDP answered':>14} | {'RSS MB':>13} | {'reopened':>8}")
    for r in rows:
        t, u = r["tcp"], r["udp"]
        print(f"{r['server']:<8} {r['mode']:<8} {r['held_median']:>6} {r['sources']:>5} | "
              f"{t['answered']:>6}/{t['sent']:<4} {t['answered_pct']:>6.2f}% {t['p50_ms'] or '-':>6} {t['p99_ms'] or '-':>6} "
              f"{t['max_ms'] or '-':>6} | {u['answered']:>5}/{u['sent']:<4} {u['answered_pct']:>3.0f}% | "
              f"{r['rss_mb_before']:>5} -> {r['rss_mb_max']:<5} | {r['closed_by_server']:>8}")


def markdown(stored: dict[str, Any]) -> str:
    """The stored run as the table docs/reliability.md quotes (tests/test_overload.py checks the quote)."""
    lines = ["| server | connections held (median) | sources | TCP answered within 1 s | TCP p50 / p99 / max ms | "
             "UDP answered | server RSS MB before -> max | connections the server closed |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, title in (("hold", "silent, half a prefix, or a prefix that lies"), ("pipeline", "100 queries pipelined, none read")):
        rows = [r for r in stored["rows"] if r["mode"] == mode]
        if rows:
            lines.append(f"| **{title}** | | | | | | | |")
        for r in rows:
            t, u = r["tcp"], r["udp"]
            lines.append(f"| {r['server']} | {r['held_median']:,} of {r['connections']:,} | {r['sources']:,} | "
                         f"{t['answered']}/{t['sent']} ({t['answered_pct']:g}%) | {t['p50_ms']} / {t['p99_ms']} / "
                         f"{t['max_ms']} | {u['answered']}/{u['sent']} | {r['rss_mb_before']} -> {r['rss_mb_max']} | "
                         f"{r['closed_by_server']:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tcp_hold", description=__doc__.split("\n")[0])
    parser.add_argument("--connections", default="2000,10000", help="connections the holder keeps open (comma list)")
    parser.add_argument("--sources", default="1,1000", help="source addresses the holder uses (comma list)")
    parser.add_argument("--seconds", type=float, default=20.0, help="probing time per attack")
    parser.add_argument("--servers", default="mcsdns,coredns", help="mcsdns, coredns (comma list)")
    parser.add_argument("--modes", default="hold,pipeline",
                        help="hold: each connection sends nothing, half a prefix or a lying prefix; pipeline: 100 "
                        "queries, and never reads a reply (comma list)")
    parser.add_argument("--out", type=Path, help="store the rows as JSON here")
    parser.add_argument("--markdown", type=Path, metavar="JSON",
                        help="print the table docs/reliability.md quotes from a stored run, and run nothing")
    args = parser.parse_args(argv)
    if args.markdown is not None:
        try:
            print(markdown(json.loads(args.markdown.read_text())), end="")
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--markdown {args.markdown}: {exc}")
        return 0
    try:
        counts = [int(x) for x in args.connections.split(",")]
        sources = [int(x) for x in args.sources.split(",")]
    except ValueError:
        parser.error("--connections and --sources take comma-separated integers")
    names = [x.strip() for x in args.servers.split(",") if x.strip()]
    modes = [x.strip() for x in args.modes.split(",") if x.strip()]
    if not modes or set(modes) - {"hold", "pipeline"}:
        parser.error(f"--modes takes hold and/or pipeline: {args.modes!r}")
    if not names or set(names) - {"mcsdns", "coredns"}:
        parser.error(f"--servers takes mcsdns and/or coredns: {args.servers!r}")
    if any(c < 1 or c > 60000 for c in counts) or any(s < 1 or s > 60000 for s in sources):
        parser.error("--connections and --sources must be in [1, 60000]")
    if not 1 <= args.seconds <= 600:
        parser.error("--seconds must be in [1, 600]")
    raise_open_files(max(counts) + 1024)  # the servers started here inherit it
    machine = provenance.machine()  # (its load average is the one before the run)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tcp-hold-") as tmp:
        servers, testbed = start_servers(names, Path(tmp))
        try:
            for server in servers:
                for mode in modes:
                    for n in counts:
                        for s in sources:
                            rows.append(attack(server, n, s, args.seconds, mode))
                            print_table(rows[-1:], header=len(rows) == 1)
                            time.sleep(4)  # the holder's connections leave the server before the next attack
                            if server.proc is not None and server.proc.poll() is not None:
                                raise RuntimeError(f"{server.label} exited during the attack:\n{server.tail()}")
        finally:
            for server in servers:
                server.stop()
            if testbed is not None:
                testbed.stop()
    print()
    print_table(rows)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        stored = {"when": provenance.now(), "commit": provenance.commit(), "machine": machine,
                  "command": "python -m benchmarks.tcp_hold " + " ".join(argv if argv is not None else sys.argv[1:]),
                  "rows": rows}
        args.out.write_text(json.dumps(stored, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
