"""Time the initial sync from the API server alone, as the scale section measures it (prints figures).

usage: python -m benchmarks.sync_cost [--imports 10000] [--rounds 3] [--servers mcsdns-api,coredns]
       python -m benchmarks.sync_cost --hold            # load once, print the kubeconfig, keep the test bed up
       python -m benchmarks.sync_cost --kubeconfig PATH  # time against a test bed already loaded (--hold)
       python -m benchmarks.sync_cost --kubeconfig PATH --imports 50000 --loaded 10000  # grow it first

"Sync" is the scale section's figure: from starting the process (pinned to --cpu, at the suite's
nice value) until the probe name (the last import) answers with data, i.e. the whole data set is
served; beside it, the CPU time the server used until then (less sensitive to other load on a
shared machine than the wall time), and when its CPU went quiet after that (`Server.settle`: mcsdns
answers from the sync on and compiles the rest of its table while answering; the RSS is taken then). The data are the scale section's (dataset.Spec with 10/100/1000-endpoint headless
services). Servers are started one at a time, round after round, so a slow phase of the shared
machine hits all of them alike; the minimum and median of the rounds are printed.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import queries
from .dataset import Spec
from .servers import CoreDns, Mcsdns, Server
from .suite import Options, Suite, log


def make(label: str, work: Path, cpu: str | None, kubeconfig: Path, coredns_bin: Path | None) -> Server:
    if label == "coredns":
        assert coredns_bin is not None
        return CoreDns(label, work, cpu, binary=coredns_bin, kubeconfig=kubeconfig)
    return Mcsdns(label, work, cpu, kubeconfig=kubeconfig)


def time_servers(args: argparse.Namespace, work: Path, kubeconfig: Path,
                 coredns_bin: Path | None) -> dict[str, tuple[float, float, float]]:
    """Print each server's sync figures; return them: label -> (median wall s, median CPU s, max RSS MB)."""
    spec = Spec(imports=args.imports, headless=(10, 100, 1000))
    probe = queries.probe_name(spec)
    labels = args.servers.split(",")
    times: dict[str, list[float]] = {label: [] for label in labels}
    rss: dict[str, list[float]] = {label: [] for label in labels}
    cpu: dict[str, list[float]] = {label: [] for label in labels}
    quiet: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    for round_ in range(args.rounds):
        for label in labels:
            server = make(label, work, args.cpu or None, kubeconfig, coredns_bin)
            try:
                seconds = server.start(probe, timeout=900)
                cpu[label].append(server.cpu_seconds())  # less sensitive to other load than the wall time
                quiet[label].append(server.settle())  # and what it did after answering (mcsdns: compiling)
                rss[label].append(server.rss_mb())
            finally:
                server.stop()
            times[label].append(seconds)
            log(f"round {round_ + 1} {label}: synced in {seconds:.2f}s ({cpu[label][-1]:.2f} s CPU); "
                f"CPU quiet after {quiet[label][-1][0]:.2f} s ({quiet[label][-1][1]:.2f} s CPU)")
    figures = {}
    for label in labels:
        v = times[label]
        quiet_at = statistics.median(q[0] for q in quiet[label])
        print(f"{args.imports} imports, {label}: sync min {min(v):.2f} s, median {statistics.median(v):.2f} s, "
              f"max {max(v):.2f} s over {len(v)} rounds (cpu {args.cpu or 'any'}); CPU used by then: median "
              f"{statistics.median(cpu[label]):.2f} s; CPU quiet after: median "
              f"{quiet_at:.2f} s, {statistics.median(q[1] for q in quiet[label]):.2f} s "
              f"CPU; RSS then {max(rss[label]):.0f} MB")
        figures[label] = (statistics.median(v), statistics.median(cpu[label]), max(rss[label]), quiet_at)
    return figures


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sync_cost", description=__doc__.splitlines()[0])
    p.add_argument("--imports", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--servers", default="mcsdns-api,coredns", help="comma-separated: mcsdns-api, coredns")
    p.add_argument("--cpu", default="1", help="CPU the servers are pinned to, as in the suite ('' = any)")
    p.add_argument("--kubeconfig", type=Path, help="a test bed already loaded with --imports (see --hold)")
    p.add_argument("--loaded", type=int, help="with --kubeconfig: imports already there; the rest of --imports is created")
    p.add_argument("--hold", action="store_true", help="start and load the test bed, then wait (Ctrl-C or SIGTERM ends)")
    args = p.parse_args(argv)
    suite = Suite(Options(out=Path(tempfile.gettempdir())))
    try:
        _run(args, suite)
    finally:
        shutil.rmtree(suite.work, ignore_errors=True)  # the servers' logs and Corefiles, as versions.py does


def _run(args: argparse.Namespace, suite: Suite) -> None:
    if args.kubeconfig is not None:
        from testsupport.testbed import KubeClient, find_testbin

        if args.loaded is not None:
            suite.client = KubeClient.from_kubeconfig(args.kubeconfig)
            suite.loaded_imports, suite.loaded_headless = args.loaded, {10, 100, 1000}
            log(f"loading imports {args.loaded} to {args.imports}")
            suite.load_api(Spec(imports=args.imports, headless=(10, 100, 1000)))
        time_servers(args, suite.work, args.kubeconfig, find_testbin() / "bin" / "coredns")
        return
    try:
        suite.start_testbed()
        assert suite.testbed is not None
        log(f"loading {args.imports} imports")
        suite.load_api(Spec(imports=args.imports, headless=(10, 100, 1000)))
        if args.hold:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a `kill PID` stops the test bed too
            print(f"kubeconfig: {suite.testbed.kubeconfig_path}", flush=True)
            while True:
                time.sleep(3600)
        time_servers(args, suite.work, suite.testbed.kubeconfig_path, suite.coredns_bin)
    except KeyboardInterrupt:
        pass
    finally:
        if suite.testbed is not None:
            suite.testbed.stop()


if __name__ == "__main__":
    sys.exit(main())
