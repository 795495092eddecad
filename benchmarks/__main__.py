"""`python -m benchmarks run [options]`: measure and write benchmarks/results/.

`python -m benchmarks report DIR` re-renders DIR/results.json (tables, CSV, plots).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import flags, report, suite
from .queries import MIXES

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the measurements and write the report",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report directory")
    r.add_argument("--smoke", action="store_true", help="seconds-long run: every peer starts, every mix runs (CI)")
    r.add_argument("--imports", type=int, default=1000, help="ClusterSetIP imports in the throughput data set")
    r.add_argument("--servers", type=_names, default=suite.SERVERS, help="servers to measure")
    r.add_argument("--variants", type=_names, default=(), help="extra servers: mcsdns-wN (N workers, unpinned), coredns-cacheN (CoreDNS with `cache N`)")
    r.add_argument("--mixes", type=flags.mixes, default=MIXES, help="query mixes")
    r.add_argument("--probe-seconds", type=float, default=2.0)
    r.add_argument("--step-seconds", type=float, default=4.0, help="length of each rate step")
    r.add_argument("--steps", type=int, default=5, help="rate steps per server and mix")
    r.add_argument("--latency-seconds", type=float, default=6.0)
    r.add_argument("--common-rate", type=flags.rate, default=suite.Options.common_rate,
                   help="q/s of one more latency run, the same for every server (where it is at most half the "
                        "server's max rate; 0 = none)")
    r.add_argument("--cost-rate", type=flags.rate, default=suite.Options.cost_rate,
                   help="q/s of one more rate step, the same for every server and mix, for CPU per query at one "
                        "rate (where it is at most 80%% of the server's max rate; 0 = none)")
    r.add_argument("--sizes", type=flags.sizes, default=(1000, 10000, 50000), help="imports per scale step")
    r.add_argument("--scale-headless", type=flags.sizes, default=(10, 100, 1000), help="headless services (endpoints each) at every scale step")
    r.add_argument("--changes", type=int, default=200, help="writes timed for propagation")
    r.add_argument("--workers", type=int, default=1, help="mcsdns --workers in the main runs")
    r.add_argument("--server-cpu", default="1", help="CPU list the servers are pinned to ('' = no pinning)")
    r.add_argument("--load-cpu", default="0", help="CPU list dnsperf is pinned to ('' = no pinning)")
    r.add_argument("--uncached-lines", type=int, default=suite.Options.uncached_lines,
                   help="query lines of the random-case and random-subdomain mixes (more than any reply cache holds)")
    r.add_argument("--check-rate", type=float, default=suite.Options.check_rate,
                   help="answer checker queries per second beside dnsperf (0 = no checker; a wrong answer fails the run)")
    r.add_argument("--edns", choices=("large", "all", "none"), default=suite.Options.edns,
                   help="EDNS in the queries: only for mixes whose answers exceed 512 bytes (a pod's resolver sends "
                        "none), every mix (as the earlier suite did), or none")
    r.add_argument("--retries", type=int, default=1,
                   help="re-measure a server x mix this often when other processes took >5%% of the server's CPU")
    r.add_argument("--quiet-wait", type=float, default=30.0,
                   help="seconds to wait, before each measurement, for the server's CPU to be idle")
    r.add_argument("--nice", type=int, default=-10, help="nice value of the servers and dnsperf (root only; 0 = unchanged)")
    r.add_argument("--skip-throughput", action="store_true")
    r.add_argument("--skip-scale", action="store_true")
    r.add_argument("--skip-propagation", action="store_true")
    r.add_argument("--keep-workdir", action="store_true", help="keep generated files and server logs")
    r.add_argument("--merge", type=Path, default=None, metavar="DIR",
                   help="complete this run from DIR/results.json: the sections it skipped, and the throughput cells "
                        "(server x mix) it did not measure; a re-measured cell records the one it replaced")
    p = sub.add_parser("report", help="re-render a results directory from its results.json")
    p.add_argument("dir", type=Path, nargs="?", default=DEFAULT_OUT)
    p.add_argument("--readme", type=Path, default=None, metavar="README",
                   help="also rewrite README's generated benchmark summary (the table of rates) from DIR/results.json")
    p.add_argument("--performance", type=Path, default=None, metavar="PAGE",
                   help="also rewrite the generated targets table of this page (docs/performance.md)")
    args = parser.parse_args(argv)

    if args.command == "report":
        results = json.loads((args.dir / "results.json").read_text())
        for path in report.render(results, args.dir):
            print(path)
        if args.readme is not None:
            if not report.update_readme(results, args.readme):
                print(f"{args.readme}: no generated block ({report.README_BEGIN!r} ... {report.README_END!r})",
                      file=sys.stderr)
                return 1
            print(args.readme)
        if args.performance is not None:
            if not report.update_performance(results, args.performance):
                print(f"{args.performance}: no generated block ({report.PERFORMANCE_BEGIN!r} ... "
                      f"{report.PERFORMANCE_END!r})", file=sys.stderr)
                return 1
            print(args.performance)
        return 0

    common = dict(
        servers=args.servers, extra_variants=args.variants, mixes=args.mixes, workers=args.workers,
        server_cpu=args.server_cpu or None, load_cpu=args.load_cpu or None, skip_throughput=args.skip_throughput,
        skip_scale=args.skip_scale, skip_propagation=args.skip_propagation, keep_workdir=args.keep_workdir,
        edns=args.edns,
    )
    if not args.smoke or args.check_rate != suite.Options.check_rate:
        common.update(check_rate=args.check_rate)
    if not args.smoke or args.uncached_lines != suite.Options.uncached_lines:
        common.update(uncached_lines=args.uncached_lines)
    if not args.smoke:
        common.update(retries=args.retries, quiet_wait=args.quiet_wait)
    import os

    if (os.cpu_count() or 1) < 2:
        common["server_cpu"] = common["load_cpu"] = None  # nothing to separate
    if args.smoke:
        opts = suite.Options.smoke_options(args.out, **common)
    else:
        opts = suite.Options(
            out=args.out, imports=args.imports, probe_seconds=args.probe_seconds, step_seconds=args.step_seconds,
            steps=args.steps, latency_seconds=args.latency_seconds, common_rate=args.common_rate,
            cost_rate=args.cost_rate, sizes=args.sizes,
            scale_headless=args.scale_headless, changes=args.changes, **common,
        )
    from . import servers

    servers.NICE = args.nice
    results = suite.run(opts)
    if args.merge is not None:
        old = json.loads((args.merge / "results.json").read_text())
        results = suite.merge(old, results, {"throughput": args.skip_throughput, "scale": args.skip_scale,
                                             "propagation": args.skip_propagation})
    for path in report.render(results, args.out):
        print(path)
    return 1 if results.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
