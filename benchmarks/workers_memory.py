"""Memory of `--workers N`: what each extra DNS worker costs next to the process that compiled the table.

    python3 -m benchmarks.workers_memory --imports 10000 --workers 4 [--out benchmarks/results/workers-memory.json]

Serves the benchmark data set (benchmarks/dataset.py, as a manifests file) twice: with `--workers 1`
(one process) and with `--workers N` (a supervisor that watches and compiles, N forked workers). After
the server is ready (each worker's memory is read here too), every service name is asked from 32 source ports (so, as the kernel spreads
source ports over the workers, every worker answers every name and touches every compiled answer it
serves), then each process's memory is read from /proc/PID/smaps_rollup:

* rss: resident pages, shared ones included (what `ps` shows; summing it over forked workers counts
  the shared table N times);
* private (USS): pages only this process maps: what the process adds to the pod's memory;
* pss: resident pages with shared ones divided among their sharers (sums to the pod's total).

The target (issue 17): each extra worker's private memory <= 25% of the one-process RSS.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import socket
import tempfile
import time
from pathlib import Path

import dns.message

from benchmarks.dataset import Spec, svc_name, write_manifests
from testsupport.mcsdnsserver import McsdnsServer


def smaps(pid: int) -> dict[str, float]:
    """rss, pss and private (USS) of `pid` in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    mb = lambda kb: round(kb / 1024, 1)  # noqa: E731
    return {"rss": mb(fields["Rss"]), "pss": mb(fields["Pss"]),
            "private": mb(fields["Private_Clean"] + fields["Private_Dirty"])}


def ask_everything(port: int, names: list[str], sockets: int = 32) -> int:
    """Every name from each of `sockets` source ports (in bursts of 50); returns the replies received."""
    got = 0
    wires = [dns.message.make_query(n, "A").to_wire() for n in names]
    for _ in range(sockets):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            sock.settimeout(2.0)
            for start in range(0, len(wires), 50):
                burst = wires[start : start + 50]
                for wire in burst:
                    sock.sendto(wire, ("127.0.0.1", port))
                for _ in burst:
                    try:
                        sock.recv(4096)
                        got += 1
                    except OSError:
                        break
    return got


def worker_pids(log: str) -> dict[int, int]:
    latest: dict[int, int] = {}
    for k, pid in re.findall(r"worker (\d+) started \(pid (\d+)\)", log):
        latest[int(k)] = int(pid)
    return latest


def measure(manifests: Path, workers: int, names: list[str]) -> dict:
    server = McsdnsServer("--manifests", str(manifests), "--workers", str(workers), "--upstream", "none")
    server.start(timeout=300)
    try:
        idle = {k: smaps(pid) for k, pid in sorted(worker_pids(server.log()).items())}
        answered = ask_everything(server.dns_port, names)
        time.sleep(1.0)
        out = {"workers": workers, "answered": answered, "process": smaps(server.proc.pid)}
        if workers > 1:
            out["worker"] = {k: smaps(pid) for k, pid in sorted(worker_pids(server.log()).items())}
            out["worker_before_queries"] = idle
        return out
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imports", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    spec = Spec(imports=args.imports)
    with tempfile.TemporaryDirectory() as tmp:
        manifests = write_manifests(spec, Path(tmp) / "objects.json")
        names = [svc_name(spec, i) for i in range(spec.imports)]
        one = measure(manifests, 1, names)
        many = measure(manifests, args.workers, names)
    first = one["process"]["rss"]
    extra = max(w["private"] for w in many["worker"].values())
    result = {
        "command": f"python3 -m benchmarks.workers_memory --imports {args.imports} --workers {args.workers}",
        "machine": f"{platform.machine()}, python {platform.python_version()}",
        "imports": args.imports, "endpoints_per_import": spec.endpoints,
        "one_process": one, "supervisor_and_workers": many,
        "extra_worker_private_mb": extra, "one_process_rss_mb": first,
        "extra_worker_share": round(extra / first, 3),
        "extra_worker_private_before_queries_mb": max(w["private"] for w in many["worker_before_queries"].values()),
        "pod_pss_mb": {"workers_1": one["process"]["pss"],
                       f"workers_{args.workers}": round(many["process"]["pss"] + sum(w["pss"] for w in many["worker"].values()), 1)},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
