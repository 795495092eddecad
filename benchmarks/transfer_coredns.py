"""AXFR of the benchmark's cluster set from mcsdns and from CoreDNS's `transfer` plugin, both on the
same kube-apiserver (prints figures; --out stores them as JSON).

The test bed (etcd + kube-apiserver) is loaded once with the data set (dataset.Spec: ClusterSetIP
imports with 10 endpoints each, and the two headless imports). Then, round after round and
alternating which goes first, each server is started on it alone (pinned to --cpu), synced (the
last import answers), and transferred three times: the time to the first message of its first
transfer (a socket that then hangs up), one whole AXFR and a second one, each read by kdig and
timed from its start to its exit, with kdig's bytes, messages and records; then the server's RSS,
and it is stopped. mcsdns runs with `--transfer-to 127.0.0.1`; CoreDNS (the testbin build, which
has `transfer`) with `transfer { to * }` beside `kubernetes ... { multicluster clusterset.local }`.
The two hold different records (CoreDNS's layout, docs/transfers.md): the record counts say how.

usage: python -m benchmarks.transfer_coredns [--imports 50000] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import queries
from .dataset import Spec
from .servers import CoreDns, Mcsdns, Server
from .suite import Options, Suite, log
from .transfer_cost import axfr, first_message

LABELS = ("mcsdns", "coredns")


def make(label: str, suite: Suite, cpu: str | None) -> Server:
    assert suite.testbed is not None and suite.coredns_bin is not None
    kubeconfig = suite.testbed.kubeconfig_path
    if label == "coredns":
        return CoreDns(label, suite.work, cpu, binary=suite.coredns_bin, kubeconfig=kubeconfig, transfer=True)
    return Mcsdns(label, suite.work, cpu, kubeconfig=kubeconfig,
                  extra=("--transfer-to", "127.0.0.1", "--ns-address", "127.0.0.1"))


def one_round(label: str, suite: Suite, cpu: str | None, probe: str) -> dict[str, Any]:
    server = make(label, suite, cpu)
    try:
        synced = server.start(probe, timeout=900)
        ttfb = first_message(server.port)
        first = axfr(server.port)
        second = axfr(server.port)
        rss = server.rss_mb()
    finally:
        server.stop()
    log(f"{label}: synced in {synced:.1f} s; first message {ttfb:.3f} s; AXFR {first['seconds']} s, "
        f"{first['bytes']} B, {first['records']} records; again {second['seconds']} s; RSS {rss:.0f} MB")
    return {"synced_s": round(synced, 2), "first_message_s": round(ttfb, 4), "first_axfr": first,
            "second_axfr": second, "rss_mb": round(rss)}


def summary(imports: int, rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"imports": imports}
    for label, runs in rounds.items():
        first = [r["first_axfr"]["seconds"] for r in runs]
        second = [r["second_axfr"]["seconds"] for r in runs]
        ttfb = [r["first_message_s"] for r in runs]
        out[label] = {
            "records": runs[0]["first_axfr"]["records"], "bytes": runs[0]["first_axfr"]["bytes"],
            "messages": runs[0]["first_axfr"]["messages"],
            "first_axfr_s": {"median": round(statistics.median(first), 2), "min": min(first), "max": max(first)},
            "second_axfr_s": {"median": round(statistics.median(second), 2), "min": min(second), "max": max(second)},
            "first_message_s": {"median": round(statistics.median(ttfb), 3), "max": max(ttfb)},
            "rss_mb": max(r["rss_mb"] for r in runs), "rounds": runs,
        }
    m, c = out["mcsdns"], out["coredns"]
    out["first_axfr_ratio"] = round(m["first_axfr_s"]["median"] / c["first_axfr_s"]["median"], 2)
    return out


def markdown(got: dict[str, Any]) -> str:
    """The table docs/transfers.md quotes (tests/test_transfer.py holds the page to the stored run)."""
    rows = ["| server | records | bytes | messages | first message | whole AXFR, median (range) | again | RSS |",
            "|---|---|---|---|---|---|---|---|"]
    for label in LABELS:
        f = got[label]
        first = f["first_axfr_s"]
        rows.append(f"| {label} | {f['records']:,} | {f['bytes'] / 1e6:.1f} MB | {f['messages']:,} | "
                    f"{f['first_message_s']['median'] * 1000:.0f} ms | {first['median']:.1f} s "
                    f"({first['min']:.1f}-{first['max']:.1f}) | {f['second_axfr_s']['median']:.1f} s | {f['rss_mb']} MB |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transfer_coredns", description=__doc__.splitlines()[0])
    parser.add_argument("--imports", type=int, default=50000, help="ClusterSetIP imports in the test bed")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each server once a round")
    parser.add_argument("--cpu", default="1", help="CPU the servers are pinned to ('' = any)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args(argv)
    spec = Spec(imports=args.imports)
    suite = Suite(Options(out=Path(tempfile.gettempdir())))
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in LABELS}
    try:
        suite.start_testbed()
        log(f"loading {args.imports} imports")
        suite.load_api(spec)
        for n in range(args.rounds):
            for label in LABELS if n % 2 == 0 else LABELS[::-1]:
                rounds[label].append(one_round(label, suite, args.cpu or None, queries.probe_name(spec)))
    finally:
        if suite.testbed is not None:
            suite.testbed.stop()
    got = summary(args.imports, rounds)
    for label in LABELS:
        f = got[label]
        print(f"{args.imports} imports, {label}: AXFR {f['records']} records, {f['bytes']} bytes in {f['messages']} "
              f"messages; first message after {f['first_message_s']['median']} s; whole AXFR median "
              f"{f['first_axfr_s']['median']} s ({f['first_axfr_s']['min']}-{f['first_axfr_s']['max']}), again "
              f"{f['second_axfr_s']['median']} s; RSS {f['rss_mb']} MB")
    print(f"mcsdns/CoreDNS, first whole AXFR: {got['first_axfr_ratio']}x")
    if args.out:
        args.out.write_text(json.dumps(got, indent=1) + "\n")
    print(markdown(got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
