"""How fast and how small a Knot secondary follows mcsdns by NOTIFY and IXFR (prints figures; --out stores JSON).

For each size, mcsdns serves the benchmark's data set (dataset.Spec: ClusterSetIP imports with 10
endpoints each) plus one headless service in a second manifests file, with `--transfer-to`, a TSIG
key and `--notify` to a Knot 3 secondary (testsupport/secondaries.py) that loaded the zone. Then one
endpoint of the headless service is added or removed, 20 times: after each the file is rewritten and
mcsdns reloads it (SIGHUP); the time from mcsdns answering the change (polled every 2 ms) to Knot
answering it is the follow time, and Knot's own log gives each transfer's kind and bytes, and how long
each refresh took inside Knot ("zone updated, N seconds": from its SOA query to the new zone in place).

usage: python -m benchmarks.ixfr_follow [--sizes 1000,10000] [--changes 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import base64
import re
import signal
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode

from testsupport.churn import headless
from testsupport.secondaries import KnotSecondary
from testsupport.mcsdnsserver import McsdnsServer

from . import dataset, flags

NAME = "follow.demo.svc.clusterset.local."
SECRET = base64.b64encode(bytes(range(50, 82))).decode()


def addresses(port: int) -> set[str] | None:
    try:
        reply = dns.query.udp(dns.message.make_query(NAME, "A"), "127.0.0.1", port=port, timeout=1)
    except Exception:
        return None
    if reply.rcode() != dns.rcode.NOERROR:
        return None
    return {rd.address for rrset in reply.answer for rd in rrset}


def wait_for(port: int, want: set[str], timeout: float = 60) -> float:
    """Poll until `port` answers `want`; returns the moment it did (perf_counter)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if addresses(port) == want:
            return time.perf_counter()
        time.sleep(0.002)
    raise RuntimeError(f"127.0.0.1:{port} did not answer {want} within {timeout} s")


def measure(size: int, changes: int, work: Path) -> dict[str, Any]:
    manifests = dataset.write_manifests(dataset.Spec(imports=size), work / f"set-{size}.json")
    churn = work / f"follow-{size}.yaml"
    base = [("follow-0", "10.201.0.1")]

    def write(extra: bool) -> set[str]:
        endpoints = base + ([("follow-1", "10.201.0.2")] if extra else [])
        churn.write_text(headless("follow", endpoints))
        return {a for _, a in endpoints}

    write(False)
    (work / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    server = McsdnsServer("--manifests", str(manifests), "--manifests", str(churn), "--ns-address", "127.0.0.1",
                    "--transfer-to", "127.0.0.1", "--tsig-key-file", str(work / "key"), "--log-level", "DEBUG")
    knot = KnotSecondary(work / f"knot-{size}", server.dns_port, ("xfr-key", "hmac-sha256", SECRET), load_timeout=600)
    server.args += ["--notify", f"127.0.0.1:{knot.port}"]
    follow: list[float] = []
    moments: list[tuple[float, float]] = []  # (served, Knot answering), wall clock, as mcsdns's log has it
    server.start(timeout=600)
    try:
        with knot:
            for i in range(changes):
                want = write(i % 2 == 0)
                server.signal(signal.SIGHUP)
                served = wait_for(server.dns_port, want)
                served_wall = time.time()
                follow.append(wait_for(knot.port, want) - served)
                moments.append((served_wall, served_wall + follow[-1]))
            log = knot.log()
    finally:
        server.stop()
    transfers = re.findall(r"(AXFR|IXFR), incoming, .*?finished, .*? (\d+) messages, (\d+) bytes", log)
    ixfr = [int(b) for kind, _, b in transfers if kind == "IXFR"]
    # Knot's own time per refresh after the first load (serial N -> M, not "none -> M"), to 10 ms.
    refreshes = [float(s) for s in re.findall(r"zone updated, ([\d.]+) seconds, serial \d+ -> ", log)]
    ms = 1000.0
    return {
        "imports": size, "changes": changes,
        "follow_ms": {"p50": round(statistics.median(follow) * ms, 1), "max": round(max(follow) * ms, 1)},
        "knot_transfers": {"axfr": sum(1 for t in transfers if t[0] == "AXFR"), "ixfr": len(ixfr),
                           "axfr_style_ixfr": log.count("AXFR-style")},
        "ixfr_bytes": {"min": min(ixfr), "max": max(ixfr)} if ixfr else None,
        "breakdown_ms": breakdown(server.log(), moments),
        "knot_refresh_ms": ({"p50": round(statistics.median(refreshes) * ms), "max": round(max(refreshes) * ms),
                             "of": len(refreshes)} if refreshes else None),
        "knot_log_last_change": [line for line in log.splitlines()[-12:] if "IXFR" in line or "notify" in line.lower()],
    }


_EVENT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) DEBUG mcsdns(?:\.\w+)+: "
                    r"(NOTIFY to \S+ sent|NOTIFY to \S+ acknowledged|ixfr request: ixfr)$", re.M)


def breakdown(log: str, moments: list[tuple[float, float]]) -> dict[str, Any]:
    """Where a change's follow time goes, from mcsdns's DEBUG log (ms timestamps): for each change, the
    first NOTIFY sent, its acknowledgement and the IXFR answered after mcsdns answered the change, in ms
    after it (p50 and max over the changes); Knot's own part is the rest, up to its answering."""
    events = [(datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f").timestamp(), what.split()[-1])
              for t, what in _EVENT.findall(log)]
    steps: dict[str, list[float]] = {"sent": [], "acknowledged": [], "ixfr": [], "knot": []}
    for served, answered in moments:
        for step in ("sent", "acknowledged", "ixfr"):
            # From a little before `served`: the poll sees the change up to 2 ms (and a log line's ms) late.
            at = next((t for t, what in events if what == step and served - 0.01 <= t <= answered), None)
            if at is not None:
                steps[step].append(at - served)
        steps["knot"].append(answered - served)
    ms = 1000.0
    return {step: {"p50": round(statistics.median(v) * ms, 1), "max": round(max(v) * ms, 1), "of": len(v)}
            for step, v in steps.items() if v}


def markdown(figures: list[dict[str, Any]]) -> str:
    """The table docs/transfers.md quotes (tests/test_ixfr.py holds the page to the stored run)."""
    rows = ["| imports | changes | Knot after mcsdns, p50 | max | NOTIFY sent, p50 | IXFR answered, p50 "
            "| Knot's own refresh, p50 (its log) | Knot's transfers | IXFR bytes (Knot's log) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for f in figures:
        t, b, steps = f["knot_transfers"], f["ixfr_bytes"], f["breakdown_ms"]
        size = str(b["min"]) if b["min"] == b["max"] else f"{b['min']}-{b['max']}"
        rows.append(f"| {f['imports']:,} | {f['changes']} | {f['follow_ms']['p50']:.0f} ms | {f['follow_ms']['max']:.0f} ms | "
                    f"{_p50(steps, 'sent')} | {_p50(steps, 'ixfr')} | {_refresh(f)} | "
                    f"{t['axfr']} AXFR, then {t['ixfr']} IXFR | {size} |")
    return "\n".join(rows) + "\n"


def _refresh(figures: dict[str, Any]) -> str:
    own = figures.get("knot_refresh_ms")
    return f"{own['p50']} ms" if own else "not logged"


def _p50(steps: dict[str, Any], step: str) -> str:
    return f"{steps[step]['p50']:.0f} ms" if step in steps else "not logged"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ixfr_follow", description=__doc__.splitlines()[0])
    flags.add_sizes(parser)
    parser.add_argument("--changes", type=int, default=20, help="endpoint additions and removals per size")
    args = parser.parse_args(argv)
    return flags.run_sizes(args, "ixfr-follow", lambda size, tmp: measure(size, args.changes, tmp), _line, markdown)


def _line(size: int, got: dict[str, Any]) -> str:
    return (f"{size} imports: {got['changes']} changes, Knot answered each {got['follow_ms']['p50']} ms (p50), "
            f"{got['follow_ms']['max']} ms (max) after mcsdns; Knot's transfers: {got['knot_transfers']}; "
            f"IXFR bytes {got['ixfr_bytes']}; after mcsdns answered (ms): {got['breakdown_ms']}; "
            f"Knot's own refresh (ms): {got['knot_refresh_ms']}")


if __name__ == "__main__":
    sys.exit(main())
