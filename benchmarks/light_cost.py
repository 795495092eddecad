"""CPU per query at light load and at saturation, mcsdns against Knot, in alternating rounds (prints figures).

A cluster's DNS server spends its life far below its maximum, where each datagram is its own
wakeup: the event loop, the callback and the system calls run once per query, not once per batch.
This is `knot_cost`'s method (both servers measured in turns, the first alternating per round, on
the suite's data set, pinning and dnsperf settings; the figure is the median of the rounds'
mcsdns/Knot ratios, with their range) applied to what issue #34 asks:

* CPU per query at fixed light rates (default 20,000 and 5,000 q/s) offered to both servers, and
  at saturation (dnsperf unthrottled: each server's maximum on its core), on cached and off-cache
  mixes, the random-subdomain flood included;
* the flood's CPU per query over a cached NXDOMAIN's, per server (both mixes must be measured);
* latency mean and p99 at each fixed rate, beside Knot's (dnsperf -v; the first
  `load.WARMUP` seconds dropped, as the suite drops them).

A fixed-rate run counts only where both servers passed it (the rate held, under 0.1% lost); a
saturated run always counts (its loss is what saturation means). CoreDNS is not run here: it needs
the testbed's kube-apiserver; the suite measures it.

usage: python -m benchmarks.light_cost [--rounds N] [--rates R,R] [--mixes M,M] [--seconds S] [--no-max] [--out FILE]
       python -m benchmarks.light_cost --markdown FILE   (the table docs/performance.md quotes)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from . import flags, load, provenance, queries
from .knot_cost import OURS, Step, add_flags, alternate, measure_server, missing_tools, summarize
from .servers import Server
from .suite import Options

# Cached mixes, the letter-case ones (a new packet per query) and the flood (a new name per query).
MIXES = ("clusterset_a", "nxdomain", "headless100_a", "clusterset_a_case", "nxdomain_case", queries.RANDOM_SUBDOMAIN)
RATES = (20000.0, 5000.0)
MAX = "max"  # the saturated run's key beside the rates
TARGET = 1.15  # issue #34: CPU per query <= 1.15x Knot's on every mix, at each rate and at the maximum
FLOOR_TARGET = 1.10  # issue #50: CPU per query <= 1.10x the floor's (benchmarks/floor.py) at each light rate
FLOOD_TARGET = 1.3  # issue #34: the random-subdomain flood <= 1.3x a cached NXDOMAIN's CPU per query
QUIET_WAIT = 5.0  # seconds to wait for an idle server core before a run (the suite's 30 s is for a quiet machine)


class NoAnswer(RuntimeError):
    """A run in which the server answered nothing: the benchmark stops and says so."""


def stepper(seconds: float, opts: Options) -> Step:
    """light_cost's step: at a rate, a verbose dnsperf run (the latencies too); at MAX, an unthrottled one.

    A run in which nothing was answered raises `NoAnswer` with dnsperf's last words: it is a failure
    of the server or of the run, never measured again to hide it.
    """
    def step(server: Server, qfile: Path, rate: Any, edns: bool) -> dict[str, Any]:
        if rate == MAX:
            run = load.dnsperf(server.port, qfile, seconds=seconds, cpu=opts.load_cpu, meter=server.cpu_seconds,
                               timeout=opts.timeout, edns=edns)
            got = {"qps": round(run.qps), "loss": round(run.loss, 5), "passed": bool(run.completed),
                   "cpu_per_100k": run.cpu_per_100k}
        else:
            run = load.dnsperf(server.port, qfile, seconds=seconds + load.WARMUP, rate=rate, cpu=opts.load_cpu,
                               meter=server.cpu_seconds, timeout=opts.timeout, edns=edns, verbose=True,
                               outstanding=1000)
            got = figures(run, rate)
        if not run.completed:
            where = "saturated" if rate == MAX else f"at {rate:g} q/s"
            raise NoAnswer(f"{server.label} answered nothing of {qfile.stem} {where}: {run.sent} sent, "
                           f"{run.lost} lost; {run.note}")
        got["late"] = run.late
        return got
    return step


def figures(run: load.Run, rate: float) -> dict[str, Any]:
    """A fixed-rate run's figures: throughput, loss, CPU per 100k queries, latency mean and p99 (us)."""
    values = (run.latencies or [])[int(rate * load.WARMUP):]  # dnsperf's own start-up is not the server's latency
    p99 = load.percentile(values, 0.99)
    return {"qps": round(run.qps), "loss": round(run.loss, 5), "passed": run.passed, "cpu_per_100k": run.cpu_per_100k,
            "mean_us": round(statistics.fmean(values) * 1e6, 1) if values else None,
            "p99_us": None if p99 is None else round(p99 * 1e6, 1)}


def latency(rounds: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per mix and fixed rate: each server's median over the rounds of latency mean and p99 (us)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for mix, per_rate in rounds[0]["mcsdns"].items():
        for rate in per_rate:
            if rate == MAX:
                continue
            cell: dict[str, Any] = {}
            for label in ("mcsdns", "knot"):
                for key in ("mean_us", "p99_us"):
                    values = [r[label][mix][rate][key] for r in rounds if r[label][mix][rate].get(key) is not None]
                    cell[f"{label}_{key}"] = round(statistics.median(values), 1) if values else None
            out.setdefault(mix, {})[f"{rate:g}"] = cell
    return out


def flood_ratio(rounds: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per server and rate (or MAX): the random-subdomain flood's CPU per query over the cached NXDOMAIN
    mix's in the same round, median and range ({} unless both mixes were measured)."""
    flood, nx = queries.RANDOM_SUBDOMAIN, "nxdomain"
    if flood not in rounds[0]["mcsdns"] or nx not in rounds[0]["mcsdns"]:
        return {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label in [k for k in ("mcsdns", "floor", "knot") if k in rounds[0]]:
        for rate in rounds[0][label][flood]:
            ratios = []
            for r in rounds:
                a, b = r[label][flood][rate], r[label][nx][rate]
                if a["passed"] and b["passed"] and a["cpu_per_100k"] and b["cpu_per_100k"]:
                    ratios.append(a["cpu_per_100k"] / b["cpu_per_100k"])
            cell: dict[str, Any] = {"ratios": [round(v, 3) for v in ratios], "pairs": len(ratios)}
            if ratios:
                cell.update(median=round(statistics.median(ratios), 3), low=round(min(ratios), 3),
                            high=round(max(ratios), 3))
            out.setdefault(label, {})[_key(rate)] = cell
    return out


def _ratio_text(rate: Any, cell: dict[str, Any], base: str) -> tuple[str, str, str]:
    """A printed line's parts for one cell: where (rate or saturated), the median ratio over `base` with
    its range, and both servers' median CPU per query."""
    where = "saturated" if rate == MAX else f"{float(rate):.0f} q/s"
    med = f"{cell['median']:.2f}x ({cell['low']:.2f}-{cell['high']:.2f})" if "median" in cell else "no passed pair"
    us = [statistics.median(v) * 10 for v in (cell["mcsdns_cpu_per_100k"], cell[f"{base}_cpu_per_100k"])
          if None not in v] if cell["pairs"] else []
    return where, med, f"  ({us[0]:.2f} / {us[1]:.2f} us)" if len(us) == 2 else ""


def floor_report(cells: dict[str, dict[str, Any]]) -> list[str]:
    """The printed lines of `--beside-floor`: mcsdns's CPU per query over the floor's, per mix and rate."""
    lines = []
    for mix, per_rate in cells.items():
        for rate, cell in per_rate.items():
            where, med, per_query = _ratio_text(rate, cell, "floor")
            target = f" (target <= {FLOOR_TARGET}x)" if rate != MAX else ""
            lines.append(f"{mix:18s} {where:>10s}  mcsdns/floor CPU per query: {med}{per_query} over "
                         f"{cell['pairs']} rounds{target}")
    return lines


def _shown(label: str, ours: str) -> str:
    """A figures key as printed: the "mcsdns" column is named after what ran in it (`--ours`)."""
    return ours if label == "mcsdns" else label


def _key(rate: Any) -> str:
    return rate if rate == MAX else f"{rate:g}"


def report(cells: dict[str, dict[str, Any]], lat: dict[str, Any], flood: dict[str, Any], ours: str = "mcsdns") -> list[str]:
    """The printed lines: the ratio per mix and rate, the latency beside Knot's, the flood ratio (`ours`:
    what ran in mcsdns's column, see `--ours`)."""
    lines = []
    for mix, per_rate in cells.items():
        for rate, cell in per_rate.items():
            where, med, per_query = _ratio_text(rate, cell, "knot")
            lat_cell = lat.get(mix, {}).get(rate)
            text = ""
            if lat_cell:
                text = (f"  latency mean/p99 us: {ours} {lat_cell['mcsdns_mean_us']}/{lat_cell['mcsdns_p99_us']}, "
                        f"Knot {lat_cell['knot_mean_us']}/{lat_cell['knot_p99_us']}")
            lines.append(f"{mix:18s} {where:>10s}  {ours}/Knot CPU per query: {med}{per_query} over {cell['pairs']} "
                         f"rounds (target <= {TARGET}x){text}")
    for label, per_rate in flood.items():
        for rate, cell in per_rate.items():
            where = "saturated" if rate == MAX else f"{float(rate):.0f} q/s"
            med = f"{cell['median']:.2f}x ({cell['low']:.2f}-{cell['high']:.2f})" if "median" in cell else "no passed pair"
            lines.append(f"{_shown(label, ours)} flood / cached NXDOMAIN, {where}: {med} (target for mcsdns <= {FLOOD_TARGET}x)")
    return lines


def markdown(stored: dict[str, Any]) -> str:
    """The table docs/performance.md quotes from a stored run: per mix, mcsdns/Knot CPU per query at each
    rate and saturated (the median of the rounds' ratios, their range, how many rounds counted; then
    each server's median CPU per query over every run), and latency mean/p99 at the first rate."""
    cells, lat, flood = stored["cells"], stored["latency"], stored["flood"]
    ours = stored.get("ours", "mcsdns")
    keys = list(next(iter(cells.values())))
    first = next(k for k in keys if k != MAX)
    heads = [("saturated" if k == MAX else f"{float(k):,.0f} q/s") for k in keys]
    out = ["| mix | " + " | ".join(f"{ours} / Knot CPU per query, {h}" for h in heads)
           + f" | latency mean / p99 at {float(first):,.0f} q/s, {ours}; Knot (us) |",
           "|---|" + "---|" * (len(keys) + 1)]
    for mix, per_rate in cells.items():
        row = [mix] + _ratio_cells(per_rate, keys, "knot")
        lc = lat.get(mix, {}).get(first, {})
        row.append(f"{lc.get('mcsdns_mean_us')} / {lc.get('mcsdns_p99_us')}; {lc.get('knot_mean_us')} / {lc.get('knot_p99_us')}")
        out.append("| " + " | ".join(row) + " |")
    for label, per_rate in flood.items():
        parts = [f"{'saturated' if k == MAX else f'{float(k):,.0f} q/s'} {c['median']:.2f}x ({c['low']:.2f}-{c['high']:.2f})"
                 for k, c in per_rate.items() if "median" in c]
        out.append(f"\n{_shown(label, ours)}: random-subdomain flood / cached NXDOMAIN, CPU per query: " + ", ".join(parts) + ".")
    if stored.get("beside_floor"):
        out.append("\n" + floor_markdown(stored["beside_floor"], stored.get("floor_target", FLOOR_TARGET)).rstrip("\n"))
    return "\n".join(out) + "\n"


def _ratio_cells(per_rate: dict[str, Any], keys: list[str], base: str) -> list[str]:
    """A table row's cells for one mix: per rate, the median ratio over `base` (knot or floor), its range,
    the rounds counted, and each server's median CPU per query."""
    row = []
    for k in keys:
        cell = per_rate[k]
        if "median" not in cell:
            row.append("no passed pair")
            continue
        us = [statistics.median(v) * 10 for v in (cell["mcsdns_cpu_per_100k"], cell[f"{base}_cpu_per_100k"])]
        row.append(f"{cell['median']:.2f}x ({cell['low']:.2f}-{cell['high']:.2f}, {cell['pairs']} of "
                   f"{len(cell['mcsdns_cpu_per_100k'])} rounds); {us[0]:.1f} / {us[1]:.1f} us")
    return row


def floor_markdown(cells: dict[str, dict[str, Any]], target: float) -> str:
    """The table of a `--beside-floor` run: per mix and rate, mcsdns's CPU per query over the floor's
    (median of the rounds' ratios, range, rounds counted; then each one's median CPU per query)."""
    keys = list(next(iter(cells.values())))
    heads = [("saturated" if k == MAX else f"{float(k):,.0f} q/s") for k in keys]
    out = ["| mix | " + " | ".join(f"mcsdns / floor CPU per query, {h}" for h in heads) + " |",
           "|---|" + "---|" * len(keys)]
    for mix, per_rate in cells.items():
        out.append("| " + " | ".join([mix] + _ratio_cells(per_rate, keys, "floor")) + " |")
    out.append(f"\nTarget: mcsdns <= {target:.2f}x the floor at each light rate.")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.light_cost", description=__doc__.splitlines()[0])
    add_flags(parser, 3, RATES, MIXES, QUIET_WAIT)
    parser.add_argument("--no-max", action="store_true", help="skip the unthrottled (saturated) run per mix")
    parser.add_argument("--ours", choices=sorted(OURS), default="mcsdns",
                        help="what runs against Knot: mcsdns, or floor (benchmarks/floor.py: mcsdns's resolver in the "
                             "barest Python loop, the pure-Python floor)")
    parser.add_argument("--beside-floor", action="store_true",
                        help="also measure benchmarks/floor.py in every round, and mcsdns's CPU per query over its")
    flags.add_markdown(parser, "docs/performance.md")
    args = parser.parse_args(argv)
    if args.beside_floor and args.ours == "floor":
        parser.error("--beside-floor measures the floor beside mcsdns: not with --ours floor")
    if args.markdown is not None:
        return flags.print_markdown(parser, args.markdown, markdown)
    if (missing := missing_tools("light_cost")) is not None:
        return missing
    opts = Options(out=Path("."), quiet_wait=args.quiet_wait)
    keys = tuple(args.rates) + (() if args.no_max else (MAX,))
    started = provenance.now()
    try:
        rounds = alternate(args.imports, args.mixes, args.rounds, opts,
                           lambda server, probe, qfiles: measure_server(server, probe, qfiles, keys, opts,
                                                                        stepper(args.seconds, opts)), args.ours,
                           floor=args.beside_floor)
    except NoAnswer as e:
        print(f"light_cost: FAILED: {e}", file=sys.stderr)
        return 1
    cells = summarize(rounds)
    lat = latency(rounds)
    flood = flood_ratio(rounds)
    print("\n".join(report(cells, lat, flood, args.ours)))
    floor_cells = summarize(rounds, "floor") if args.beside_floor else None
    if floor_cells is not None:
        print("\n".join(floor_report(floor_cells)))
    if args.out is not None:
        command = "python -m benchmarks.light_cost " + " ".join(argv if argv is not None else sys.argv[1:])
        args.out.write_text(json.dumps({
            "command": command.strip(), "ours": args.ours, "date": started, "commit": provenance.commit(),
            "machine": provenance.machine(), "rounds": args.rounds, "seconds": args.seconds,
            "target": TARGET, "flood_target": FLOOD_TARGET, "cells": cells, "latency": lat, "flood": flood,
            **({"floor_target": FLOOR_TARGET, "beside_floor": floor_cells} if floor_cells is not None else {}),
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
