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
is stopped. Prints a table and stores JSON. The holder and the prober are testsupport.tcpclients's,
shared with tests/test_overload.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks import flags, provenance
from benchmarks.servers import CoreDns, Mcsdns, Server
from mcsdns.sources.manifests import default_paths
from testsupport import tcpclients
from testsupport.tcpclients import PAYLOADS, QNAME, pipelined, raise_open_files

# --------------------------------------------------------------------------- one attack on one server


def attack(server: Server, connections: int, sources: int, seconds: float, mode: str) -> dict[str, Any]:
    rss = [server.rss_mb()]

    def sample(stop: threading.Event) -> None:
        while not stop.wait(0.5):
            rss.append(server.rss_mb())

    payloads = PAYLOADS if mode == "hold" else (pipelined(),)
    result = tcpclients.attack(("127.0.0.1", server.port), connections, sources, seconds, payloads, beside=sample)
    return {"server": server.label, "mode": mode, "connections": connections, "sources": sources, "seconds": seconds,
            **result, "rss_mb_before": round(rss[0], 1), "rss_mb_max": round(max(rss), 1)}


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
    """The stored run as the table benchmarks/results/HISTORY.md quotes (tests/test_overload.py checks the quote)."""
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
    flags.add_markdown(parser, "benchmarks/results/HISTORY.md")
    args = parser.parse_args(argv)
    if args.markdown is not None:
        return flags.print_markdown(parser, args.markdown, markdown)
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
