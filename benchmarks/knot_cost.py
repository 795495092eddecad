"""mcsdns's CPU per query against Knot's at fixed rates, in alternating rounds (prints figures).

The suite measures each cell once: CPU per query at each server's own maximum and at one rate. The
ratio of two such figures moves between runs by more than the target's margin (1.17x, 1.46x and
1.44x at most in three runs of the same code paths: benchmarks/results/HISTORY.md), so one run cannot settle
"cached CPU per query <= 1.25x Knot's". This takes the cached mixes of one to ten records at fixed
rates below both servers' maxima and measures mcsdns (from manifests) and Knot in turns, `rounds`
times, the first server alternating per round, on the suite's data set, pinning and dnsperf
settings. Each round gives one ratio per mix and rate from two runs minutes apart; the figure is
the median of the rounds' ratios, with their range beside it.

usage: python -m benchmarks.knot_cost [--rounds N] [--rates R,R] [--mixes M,M] [--seconds S] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from . import dataset, flags, load, provenance, queries
from .report import CPU_LIMITS
from .servers import Floor, Knot, Mcsdns, Server, tool_path
from .suite import Options, own_cpu, wait_quiet

# The mixes the Knot target is read on (results.md, "cached mixes"): every cached mix but the
# 100-endpoint answer (where Knot assembles 100 records per query and mcsdns needs less CPU) and
# the random-subdomain flood (never cached).
MIXES = tuple(m for m in queries.BASE_MIXES if m not in ("headless100_a", queries.RANDOM_SUBDOMAIN))
RATES = (50000.0, 90000.0)  # below the lowest maximum of either server on these mixes (~114k q/s)
TARGET = CPU_LIMITS[2]  # results.md's target: cached mixes, CPU per query <= 1.25x Knot's
WARMUP_SECONDS = 1.0  # one unmeasured run per server and mix first: the packet cache fills, as in the suite


Step = Callable[[Server, Path, Any, bool], dict[str, Any]]  # (server, query file, rate, EDNS) -> one run's figures


def measure_server(server: Server, probe: str, qfiles: dict[str, Path], rates: tuple[Any, ...], opts: Options,
                   step: Step) -> dict[str, dict[Any, dict[str, Any]]]:
    """Start `server`, run `step` on every mix at every rate (after a warm-up at the lowest rate given
    as a number), each after waiting for a quiet core, stop it: {mix: {rate: figures}}."""
    got: dict[str, dict[Any, dict[str, Any]]] = {}
    warm = min((r for r in rates if isinstance(r, float)), default=2000.0)
    server.start(probe, timeout=120)
    try:
        time.sleep(2.0)  # as the suite: the start-up's own work done before the first measurement
        for mix, qfile in qfiles.items():
            edns = queries.needs_edns(mix)
            load.dnsperf(server.port, qfile, seconds=WARMUP_SECONDS, rate=warm, cpu=opts.load_cpu,
                         timeout=opts.timeout, edns=edns)
            for rate in rates:
                wait_quiet(server.cpu, opts.quiet_wait)
                got.setdefault(mix, {})[rate] = step(server, qfile, rate, edns)
    finally:
        server.stop()
    return got


def rated(seconds: float, opts: Options) -> Step:
    """knot_cost's step: one dnsperf run of `seconds` at the rate; throughput, loss and CPU per 100k queries."""
    def step(server: Server, qfile: Path, rate: float, edns: bool) -> dict[str, Any]:
        run = load.dnsperf(server.port, qfile, seconds=seconds, rate=rate, cpu=opts.load_cpu,
                           meter=server.cpu_seconds, timeout=opts.timeout, edns=edns)
        return {"qps": round(run.qps), "loss": round(run.loss, 5), "passed": run.passed, "cpu_per_100k": run.cpu_per_100k}
    return step


def summarize(rounds: list[dict[str, dict[str, dict[float, dict[str, Any]]]]], base: str = "knot") -> dict[str, dict[str, Any]]:
    """Per mix and rate: each round's figures and ratio of mcsdns's CPU per query over `base`'s (Knot's,
    or the floor's), the median ratio and its range.

    A round's ratio counts only where both runs passed (the rate held, under 0.1% lost): a run that
    fell behind its rate measured another load, and its CPU per query is not comparable.
    """
    out: dict[str, dict[str, Any]] = {}
    for mix in rounds[0]["mcsdns"]:
        for rate in rounds[0]["mcsdns"][mix]:
            ours, knots, ratios = [], [], []
            for r in rounds:
                a, k = r["mcsdns"][mix][rate], r[base][mix][rate]
                ours.append(a["cpu_per_100k"])
                knots.append(k["cpu_per_100k"])
                if a["passed"] and k["passed"] and a["cpu_per_100k"] and k["cpu_per_100k"]:
                    ratios.append(a["cpu_per_100k"] / k["cpu_per_100k"])
            cell: dict[str, Any] = {
                "mcsdns_cpu_per_100k": [_round(v) for v in ours], f"{base}_cpu_per_100k": [_round(v) for v in knots],
                "ratios": [round(v, 3) for v in ratios], "pairs": len(ratios),
            }
            if ratios:
                cell.update(median=round(statistics.median(ratios), 3), low=round(min(ratios), 3),
                            high=round(max(ratios), 3))
            out.setdefault(mix, {})[rate if isinstance(rate, str) else f"{rate:g}"] = cell  # (light_cost's "max")
    return out


def verdicts(cells: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per rate: the highest median ratio over the mixes, and on how many mixes the median meets TARGET."""
    by_rate: dict[str, dict[str, Any]] = {}
    for mix, per_rate in cells.items():
        for rate, cell in per_rate.items():
            if "median" not in cell:
                continue
            v = by_rate.setdefault(rate, {"mixes": 0, "met": 0, "highest": 0.0, "highest_mix": None})
            v["mixes"] += 1
            v["met"] += cell["median"] <= TARGET
            if cell["median"] > v["highest"]:
                v["highest"], v["highest_mix"] = cell["median"], mix
    return by_rate


def missing_tools(prog: str) -> int | None:
    """Exit status 1, with a message, when dnsperf or knotd is not installed; None when both are."""
    missing = [tool for tool in ("dnsperf", "knotd") if tool_path(tool) is None]
    if not missing:
        return None
    print(f"{prog}: {', '.join(missing)} not found (apt install dnsperf knot)", file=sys.stderr)
    return 1


OURS: dict[str, Callable[..., Server]] = {"mcsdns": Mcsdns, "floor": Floor}  # what stands in the "mcsdns" column
Measure = Callable[[Server, str, dict[str, Path]], dict[str, dict[Any, dict[str, Any]]]]


def alternate(imports: int, mixes: tuple[str, ...], rounds: int, opts: Options, measure: Measure,
              ours: str = "mcsdns", floor: bool = False) -> list[dict[str, Any]]:
    """The suite's data set and the mixes' query files written once, then `rounds` rounds of `measure`
    (server, probe name, {mix: query file}) on mcsdns (from manifests) and Knot, the first alternating:
    [{"mcsdns": figures, "knot": figures}] per round. `ours="floor"` measures benchmarks/floor.py (mcsdns's
    resolver in the barest Python loop) in mcsdns's place, under the same key; `floor=True` measures it
    as a third server (key "floor"), the order rotating per round so each goes first in turn."""
    spec = dataset.Spec(imports=imports, headless=(10, 100))
    work = Path(tempfile.mkdtemp(prefix="mcsdns-knot-cost-"))
    out = []
    try:
        manifests = dataset.write_manifests(spec, work / "objects.json")
        zone = dataset.write_zone(spec, work / "clusterset.local.zone")
        qdir = work / "queries"
        qdir.mkdir()
        qfiles = {mix: queries.write(mix, spec, qdir) for mix in mixes}
        probe = queries.probe_name(spec)
        with own_cpu(opts.load_cpu):
            labels = ("mcsdns", "floor", "knot") if floor else ("mcsdns", "knot")
            for i in range(rounds):
                shift = i % len(labels)
                order = labels[shift:] + labels[:shift]
                this: dict[str, Any] = {}
                for label in order:
                    server: Server = (OURS[ours](label, work, opts.server_cpu, manifests=manifests) if label == "mcsdns"
                                      else Floor(label, work, opts.server_cpu, manifests=manifests) if label == "floor"
                                      else Knot(label, work, opts.server_cpu, zonefile=zone))
                    this[label] = measure(server, probe, qfiles)
                out.append(this)
                print(f"round {i + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _positive(text: str) -> float:
    value = flags.rate(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"seconds above 0, not {text!r}")
    return value


def _rounds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least one round, not {text!r}")
    return value


def add_flags(parser: argparse.ArgumentParser, rounds: int, rates: tuple[float, ...], mixes: tuple[str, ...],
              quiet_wait: float) -> None:
    """The flags of an alternating-rounds benchmark (this one and light_cost), with their defaults."""
    parser.add_argument("--rounds", type=_rounds, default=rounds, help="times each server measures every mix and rate")
    parser.add_argument("--rates", type=flags.rates, default=rates, help="q/s, comma-separated (default: %(default)s)")
    parser.add_argument("--mixes", type=flags.mixes, default=mixes, help="query mixes, comma-separated")
    parser.add_argument("--seconds", type=_positive, default=4.0, help="seconds per measured run (the suite's step)")
    parser.add_argument("--imports", type=int, default=1000, help="ClusterSetIP imports in the data set (the suite's)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    parser.add_argument("--quiet-wait", type=float, default=quiet_wait,
                        help="seconds to wait for an idle server core before each run (default: %(default)s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.knot_cost", description=__doc__.splitlines()[0])
    add_flags(parser, 5, RATES, MIXES, Options.quiet_wait)
    args = parser.parse_args(argv)
    if (missing := missing_tools("knot_cost")) is not None:
        return missing
    opts = Options(out=Path("."), quiet_wait=args.quiet_wait)
    started = provenance.now()
    rounds = alternate(args.imports, args.mixes, args.rounds, opts,
                       lambda server, probe, qfiles: measure_server(server, probe, qfiles, args.rates, opts,
                                                                    rated(args.seconds, opts)))
    cells = summarize(rounds)
    summary = verdicts(cells)
    for mix, per_rate in cells.items():
        for rate, cell in per_rate.items():
            med = f"{cell['median']:.2f}x ({cell['low']:.2f}-{cell['high']:.2f})" if "median" in cell else "no passed pair"
            print(f"{mix:14s} {float(rate):8.0f} q/s  mcsdns/Knot CPU per query: {med}  over {cell['pairs']} rounds")
    for rate, v in summary.items():
        print(f"at {float(rate):.0f} q/s: median <= {TARGET}x on {v['met']} of {v['mixes']} mixes; "
              f"highest {v['highest']:.2f}x ({v['highest_mix']})")
    if args.out is not None:
        command = "python -m benchmarks.knot_cost " + " ".join(argv if argv is not None else sys.argv[1:])
        args.out.write_text(json.dumps({
            "command": command.strip(), "date": started, "commit": provenance.commit(),
            "machine": provenance.machine(), "rounds": args.rounds, "seconds": args.seconds,
            "target": TARGET, "by_rate": summary, "cells": cells,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
