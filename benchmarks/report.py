"""results.json -> results.md (tables + target check), CSV files and PNG plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from .queries import DESCRIPTIONS, MIXES

ORDER = ("mcsdns", "mcsdns-api", "coredns", "knot")
NAMES = {"mcsdns": "mcsdns (manifests)", "mcsdns-api": "mcsdns (API)", "coredns": "CoreDNS", "knot": "Knot"}
MCSDNS = ("mcsdns", "mcsdns-api")
NOISY = 0.05  # other processes took more than 5% of the server's CPU during a measurement


def noisy(d: dict | None) -> bool:
    return bool(d) and noise(d) > NOISY


def noise(d: dict) -> float:
    """The worse of: foreign CPU on the server's core, on dnsperf's core."""
    return max(d.get("interference") or 0, d.get("load_interference") or 0)


def _servers(results: dict) -> list[str]:
    seen: list[str] = []
    for per_mix in results.get("throughput", {}).values():
        for label in per_mix:
            if label not in seen:
                seen.append(label)
    return sorted(seen, key=lambda l: (ORDER.index(l) if l in ORDER else len(ORDER), l))


def _mixes(results: dict) -> list[str]:
    present = list(results.get("throughput", {}))
    return [m for m in MIXES if m in present] + [m for m in present if m not in MIXES]


def _get(results: dict, mix: str, label: str) -> dict | None:
    return results.get("throughput", {}).get(mix, {}).get(label)


def ratio(results: dict, mix: str, label: str, peer: str) -> float | None:
    a, b = _get(results, mix, label), _get(results, mix, peer)
    if not a or not b or not a.get("max_qps") or not b.get("max_qps"):
        return None
    return a["max_qps"] / b["max_qps"]


def _f(v: Any, fmt: str = "{:.0f}", none: str = "n/a") -> str:
    return none if v is None else fmt.format(v)


def _us(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1e6:.0f}"


# --------------------------------------------------------------------------- targets


def targets(results: dict) -> list[dict]:
    """Each performance target (docs/performance.md, "Targets") with the measured value and whether it is met (None: not measured)."""
    out: list[dict] = []

    def add(name: str, value: str, met: bool | None, note: str = "") -> None:
        out.append({"target": name, "measured": value, "met": met, "note": note})

    labels = [l for l in MCSDNS if any(l in d for d in results.get("throughput", {}).values())]
    for label in labels:
        r = ratio(results, "clusterset_a", label, "coredns")
        add(f"{NAMES[label]}: ClusterSetIP A >= 1.5x CoreDNS", _f(r, "{:.2f}x"), None if r is None else r >= 1.5)
        r = ratio(results, "clusterset_a", label, "knot")
        add(f"{NAMES[label]}: ClusterSetIP A >= 0.6x Knot", _f(r, "{:.2f}x"), None if r is None else r >= 0.6)
        worst, worst_mix = None, None
        for mix in _mixes(results):
            if mix == "clusterset_a":
                continue
            r = ratio(results, mix, label, "coredns")
            if r is not None and (worst is None or r < worst):
                worst, worst_mix = r, mix
        add(f"{NAMES[label]}: every other mix >= 1.0x CoreDNS", _f(worst, "{:.2f}x") + (f" (lowest: {worst_mix})" if worst_mix else ""),
            None if worst is None else worst >= 1.0)
        p99s = [(d[label]["p99"], m) for m, d in results.get("throughput", {}).items() if label in d and d[label].get("p99") is not None]
        if p99s:
            worst_p99, mix = max(p99s)
            add(f"{NAMES[label]}: p99 latency at 50% load <= 1 ms", f"{worst_p99 * 1e3:.3f} ms (highest: {mix})", worst_p99 <= 0.001)
    scale = results.get("scale", [])
    row10k = next((r for r in scale if r.get("imports") == 10000), None)
    if row10k is None and scale:
        row10k = min(scale, key=lambda r: abs(r["imports"] - 10000))
    if row10k and "mcsdns-api" in row10k and "coredns" in row10k:
        a, b = row10k["mcsdns-api"].get("steady_rss_mb") or row10k["mcsdns-api"].get("rss_mb"), \
            row10k["coredns"].get("steady_rss_mb") or row10k["coredns"].get("rss_mb")
        if a and b:
            add(f"RSS at {row10k['imports']} imports <= 1.5x CoreDNS", f"{a:.0f} MB vs {b:.0f} MB = {a / b:.2f}x", a / b <= 1.5)
    peaks = [(r["mcsdns-api"]["relist_peak_ratio"], r["imports"]) for r in scale
             if "mcsdns-api" in r and r["mcsdns-api"].get("relist_peak_ratio") is not None]
    if peaks:
        worst, size = max(peaks)
        add("relist peak <= 1.3x steady RSS (mcsdns API)", f"{worst:.2f}x (at {size} imports)", worst <= 1.3)
    prop = results.get("propagation", {})
    if "mcsdns-api" in prop and prop["mcsdns-api"].get("p99_ms") is not None:
        p = prop["mcsdns-api"]["p99_ms"]
        add("propagation p99 <= 100 ms", f"{p:.1f} ms", p <= 100)
        c = prop.get("coredns", {}).get("p99_ms")
        if c is not None:
            add("propagation p99 never slower than CoreDNS", f"{p:.1f} ms vs {c:.1f} ms", p <= c)
    for label in ("mcsdns-api", "mcsdns"):
        rates = [(r["imports"], r[label]["max_qps"]) for r in scale if label in r and r[label].get("max_qps")]
        if len(rates) >= 2:
            hi = max(q for _, q in rates)
            lo = min(q for _, q in rates)
            first, last = rates[0], rates[-1]
            drop = (first[1] - last[1]) / first[1]
            add(f"{NAMES[label]}: query rate flat (within 10%) from {first[0]} to {last[0]} imports",
                f"{first[1]:.0f} -> {last[1]:.0f} qps ({-drop * 100:+.1f}%; spread {(hi - lo) / hi * 100:.1f}%)",
                drop <= 0.10)
    return out


# --------------------------------------------------------------------------- markdown


def markdown(results: dict) -> str:
    env = results.get("environment", {})
    servers = _servers(results)
    mixes = _mixes(results)
    lines = ["# mcsdns benchmark results", ""]
    lines += [
        f"- Date: {env.get('date', '?')}; commit {env.get('commit', '?')}; run took {env.get('seconds', '?')} s"
        + (" (**smoke run: numbers are meaningless**)" if env.get("smoke") else ""),
        f"- Command: `{env.get('command', 'python -m benchmarks run')}`",
        *([f"- Sections {', '.join(env['merged']['sections'])} are from the run of {env['merged']['from']} "
           f"(`{env['merged']['command']}`)"] if env.get("merged", {}).get("sections") else []),
        f"- Machine: {env.get('cpus', '?')} CPUs ({env.get('cpu_model', '?')}); load average {env.get('loadavg_at_start', '?')} at start, "
        f"{env.get('loadavg_at_end', '?')} at end",
        f"- Pinning: each server on CPU {env.get('server_cpu')}, dnsperf on CPU {env.get('load_cpu')} (taskset), "
        f"nice {env.get('nice', 0)}; one server runs at a time",
        f"- Peers: {env.get('coredns', '?')}; {env.get('knotd', '?')}; load generator {env.get('dnsperf', '?')}; Python {env.get('python', '?')}",
        "",
    ]
    if results.get("throughput"):
        opts = env.get("options", {})
        lines += [f"## Throughput and latency ({opts.get('imports', '?')} ClusterSetIP imports x 10 endpoints, headless 10 and 100)", ""]
        lines += ["Max sustained rate (queries/s, <0.1% lost) and ratios:", ""]
        head = ["Mix"] + [NAMES.get(s, s) for s in servers]
        ratio_cols = []
        for label in MCSDNS:
            if label in servers:
                for peer in ("coredns", "knot"):
                    if peer in servers:
                        ratio_cols.append((label, peer))
                        head.append(f"{NAMES[label]} / {NAMES[peer]}")
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for mix in mixes:
            row = [mix]
            for s in servers:
                d = _get(results, mix, s)
                row.append("n/a" if not d else (f"{d['max_qps']:,.0f}" + (" †" if noisy(d) else "") if d.get("max_qps") else "failed"))
            for label, peer in ratio_cols:
                row.append(_f(ratio(results, mix, label, peer), "{:.2f}x"))
            lines.append("| " + " | ".join(row) + " |")
        noisy_cells = [(mix, s, noise(_get(results, mix, s))) for mix in mixes for s in servers if noisy(_get(results, mix, s))]
        if noisy_cells:
            lines += ["", f"† other processes used more than {NOISY:.0%} of the server's (or dnsperf's) CPU during this measurement "
                      "(machine not quiet): re-run these on a quiet machine: "
                      + ", ".join(f"{NAMES.get(s, s)}/{mix} ({v:.0%})" for mix, s, v in noisy_cells)]
        lines += ["", "Latency at 50% of each server's max rate, p50 / p99 / p99.9 in microseconds:", ""]
        head = ["Mix"] + [NAMES.get(s, s) for s in servers]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for mix in mixes:
            row = [mix]
            for s in servers:
                d = _get(results, mix, s)
                row.append("n/a" if not d else f"{_us(d.get('p50'))} / {_us(d.get('p99'))} / {_us(d.get('p999'))}")
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", "Server CPU seconds per 100k queries (at the max rate):", ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for mix in mixes:
            row = [mix]
            for s in servers:
                d = _get(results, mix, s)
                row.append(_f(d.get("cpu_per_100k") if d else None, "{:.2f}"))
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", "Mixes and the response codes seen (latency run of the first server):", ""]
        lines += ["| Mix | What | Response codes |", "|---|---|---|"]
        for mix in mixes:
            d = next((results["throughput"][mix][s] for s in servers if s in results["throughput"][mix]), {})
            total = sum(d.get("rcodes", {}).values()) or 1
            codes = ", ".join(f"{k} {v * 100 / total:.0f}%" for k, v in sorted(d.get("rcodes", {}).items(), key=lambda kv: -kv[1]))
            lines.append(f"| {mix} | {DESCRIPTIONS.get(mix, '')} | {codes or 'n/a'} |")
        srv = results.get("servers", {})
        if srv:
            lines += ["", "| Server | ready after (s) | RSS at start (MB) | RSS after the run (MB) | pinned to CPU |", "|---|---|---|---|---|"]
            for label, info in srv.items():
                lines.append(f"| {NAMES.get(label, label)} | {info.get('ready_seconds')} | {info.get('rss_mb')} | "
                             f"{info.get('rss_mb_after', 'n/a')} | {info.get('pinned') or 'no'} |")
        lines.append("")
    scale = results.get("scale", [])
    if scale:
        lines += ["## Scale (ClusterSetIP imports x 10 endpoints, plus headless services of "
                  f"{', '.join(str(h) for h in scale[0].get('headless', []))} endpoints)", ""]
        head = ["Imports", "Server", "Initial sync (s)", "RSS (MB)", "Relist peak (MB)", "Peak / steady",
                "One change applied (ms, p50)", "A max rate (q/s)", "p99 (us)"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in scale:
            for label in ("mcsdns-api", "mcsdns", "coredns"):
                r = row.get(label)
                if not r:
                    continue
                lines.append("| " + " | ".join([
                    f"{row['imports']:,}", NAMES.get(label, label), _f(r.get("sync_seconds"), "{:.2f}"),
                    _f(r.get("steady_rss_mb") or r.get("rss_mb"), "{:.0f}"), _f(r.get("relist_peak_mb"), "{:.0f}"),
                    _f(r.get("relist_peak_ratio"), "{:.2f}x"), _f(r.get("change_p50_ms"), "{:.1f}"),
                    _f(r.get("max_qps"), "{:,.0f}") + (" †" if noisy(r) else ""), _f(r.get("p99_us"), "{:.0f}"),
                ]) + " |")
        if any(noisy(row.get(l)) for row in scale for l in ("mcsdns-api", "mcsdns", "coredns")):
            lines += ["", f"† other processes used more than {NOISY:.0%} of the server's CPU during the rate and latency "
                      "measurement: re-run on a quiet machine."]
        lines.append("")
    prop = results.get("propagation", {})
    if prop:
        lines += [f"## Propagation ({prop.get('changes')} writes to the API, alternating ServiceImport VIP and "
                  "EndpointSlice changes; time from sending the write until the server answers the new data)", ""]
        lines += ["| Server | p50 (ms) | p99 (ms) | max (ms) | timeouts | ServiceImport p50/p99 | EndpointSlice p50/p99 |", "|---|---|---|---|---|---|---|"]
        for label in ("mcsdns-api", "coredns"):
            r = prop.get(label)
            if not r:
                continue
            bk = r.get("by_kind", {})
            si, es = bk.get("ServiceImport", {}), bk.get("EndpointSlice", {})
            lines.append(f"| {NAMES.get(label, label)} | {_f(r['p50_ms'], '{:.1f}')} | {_f(r['p99_ms'], '{:.1f}')} | "
                         f"{_f(r['max_ms'], '{:.1f}')} | {r['timeouts']} | {_f(si.get('p50_ms'), '{:.1f}')} / {_f(si.get('p99_ms'), '{:.1f}')} | "
                         f"{_f(es.get('p50_ms'), '{:.1f}')} / {_f(es.get('p99_ms'), '{:.1f}')} |")
        lines.append("")
    t = targets(results)
    if t:
        lines += ["## Targets", "", "| Target | Measured | Met |", "|---|---|---|"]
        for item in t:
            met = "n/a" if item["met"] is None else ("yes" if item["met"] else "**no**")
            lines.append(f"| {item['target']} | {item['measured']} | {met} |")
        lines.append("")
    errors = results.get("errors", [])
    if errors:
        lines += ["## Errors", ""]
        for e in errors:
            lines.append(f"- {e['where']}: {e['error']}")
        lines.append("")
    plots = [p for p in ("throughput.png", "latency_p99.png", "rss.png", "scale_qps.png") if p in results.get("plots", [])]
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- CSV


def write_csv(results: dict, out: Path) -> list[Path]:
    paths = []
    servers = _servers(results)
    if results.get("throughput"):
        p = out / "results.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["mix", "server", "max_qps", "probe_qps", "p50_us", "p99_us", "p999_us", "cpu_s_per_100k",
                        "ratio_coredns", "ratio_knot", "rcodes", "error"])
            for mix in _mixes(results):
                for s in servers:
                    d = _get(results, mix, s)
                    if not d:
                        continue
                    w.writerow([mix, s, round(d["max_qps"]), round(d["probe_qps"]), _us(d.get("p50")), _us(d.get("p99")),
                                _us(d.get("p999")), _f(d.get("cpu_per_100k"), "{:.3f}", ""),
                                _f(ratio(results, mix, s, "coredns"), "{:.3f}", ""), _f(ratio(results, mix, s, "knot"), "{:.3f}", ""),
                                " ".join(f"{k}={v}" for k, v in d.get("rcodes", {}).items()), d.get("error") or ""])
        paths.append(p)
    if results.get("scale"):
        p = out / "scale.csv"
        keys = ["sync_seconds", "rss_mb", "steady_rss_mb", "relist_peak_mb", "relist_peak_ratio", "change_p50_ms",
                "change_max_ms", "max_qps", "p99_us", "cpu_per_100k", "rss_mb_after_load"]
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["imports", "server", *keys])
            for row in results["scale"]:
                for label in ("mcsdns-api", "mcsdns", "coredns"):
                    if label in row:
                        w.writerow([row["imports"], label, *[row[label].get(k, "") for k in keys]])
        paths.append(p)
    if results.get("propagation"):
        p = out / "propagation.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["server", "changes", "p50_ms", "p99_ms", "max_ms", "mean_ms", "timeouts"])
            for label in ("mcsdns-api", "coredns"):
                r = results["propagation"].get(label)
                if r:
                    w.writerow([label, results["propagation"]["changes"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["mean_ms"], r["timeouts"]])
        paths.append(p)
    return paths


# --------------------------------------------------------------------------- plots


def plots(results: dict, out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    servers = _servers(results)
    mixes = _mixes(results)
    colors = {"mcsdns": "#1f77b4", "mcsdns-api": "#6baed6", "coredns": "#ff7f0e", "knot": "#2ca02c"}
    if mixes and servers:
        for fname, key, scale, ylabel in (("throughput.png", "max_qps", 1e-3, "max sustained rate (k queries/s)"),
                                          ("latency_p99.png", "p99", 1e3, "p99 latency at 50% load (ms)")):
            fig, ax = plt.subplots(figsize=(11, 4.5))
            width = 0.8 / len(servers)
            for k, s in enumerate(servers):
                vals = []
                for mix in mixes:
                    d = _get(results, mix, s)
                    v = d.get(key) if d else None
                    vals.append((v or 0) * scale)
                ax.bar([i + k * width for i in range(len(mixes))], vals, width, label=NAMES.get(s, s), color=colors.get(s))
            ax.set_xticks([i + width * (len(servers) - 1) / 2 for i in range(len(mixes))])
            ax.set_xticklabels(mixes, rotation=20, ha="right")
            ax.set_ylabel(ylabel)
            if key == "p99":
                ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="target 1 ms")
            ax.legend()
            ax.grid(axis="y", alpha=0.3)
            fig.tight_layout()
            fig.savefig(out / fname, dpi=110)
            plt.close(fig)
            made.append(fname)
    scale = results.get("scale", [])
    if scale:
        for fname, key, ylabel in (("rss.png", "rss", "RSS after initial sync (MB)"), ("scale_qps.png", "max_qps", "ClusterSetIP A max rate (queries/s)")):
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for label in ("mcsdns-api", "mcsdns", "coredns"):
                pts = []
                for row in scale:
                    r = row.get(label)
                    if r:
                        v = (r.get("steady_rss_mb") or r.get("rss_mb")) if key == "rss" else r.get(key)
                        if v:
                            pts.append((row["imports"], v))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=NAMES.get(label, label), color=colors.get(label))
                    if key == "rss":
                        peaks = [(row["imports"], row[label]["relist_peak_mb"]) for row in scale
                                 if label in row and row[label].get("relist_peak_mb")]
                        if peaks:
                            ax.plot([p[0] for p in peaks], [p[1] for p in peaks], marker="x", linestyle=":",
                                    label=f"{NAMES.get(label, label)} relist peak", color=colors.get(label))
            ax.set_xscale("log")
            ax.set_xlabel("ServiceImports (10 endpoints each)")
            ax.set_ylabel(ylabel)
            if key == "max_qps":
                ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend()
            fig.tight_layout()
            fig.savefig(out / fname, dpi=110)
            plt.close(fig)
            made.append(fname)
    return made


def render(results: dict, out: Path) -> list[Path]:
    """Write results.md, the CSV files and the plots into `out`; return the paths."""
    out.mkdir(parents=True, exist_ok=True)
    results["plots"] = plots(results, out)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    md = out / "results.md"
    md.write_text(markdown(results))
    return [md, *write_csv(results, out), *[out / p for p in results["plots"]]]
