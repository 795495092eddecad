"""CPU time and memory of a process tree, read from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def children(pid: int) -> list[int]:
    """Direct children of `pid` (all threads' child lists)."""
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out += [int(x) for x in (task / "children").read_text().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo += children(p)
    return seen


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of every process in `pids` (all threads included), in seconds."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / CLK_TCK


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb(pids: list[int]) -> float:
    return sum(_status_kb(p, "VmRSS") for p in pids) / 1024


def hwm_mb(pids: list[int]) -> float:
    """Peak RSS since start, or since `reset_hwm`."""
    return sum(_status_kb(p, "VmHWM") for p in pids) / 1024


def reset_hwm(pids: list[int]) -> bool:
    """Reset the peak-RSS counter (writing 5 to clear_refs); False where not permitted."""
    ok = True
    for p in pids:
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


def cpu_list(spec: str | None) -> list[int]:
    """`1`, `0-1`, `0,2` -> CPU numbers; None -> every CPU."""
    if not spec:
        return list(range(os.cpu_count() or 1))
    out: list[int] = []
    for part in spec.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        elif part.strip():
            out.append(int(part))
    return out


def busy_seconds(cpus: list[int]) -> float:
    """Time these CPUs ran tasks, or were stolen by the hypervisor (user+nice+system+steal), from /proc/stat.

    irq and softirq time are left out: with IRQ time accounting, the kernel's loopback delivery of the
    server's own replies is charged there rather than to the server, so it is not interference.
    """
    want = {f"cpu{c}" for c in cpus}
    total = 0
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            parts = line.split()
            if parts and parts[0] in want:
                v = [int(x) for x in parts[1:9]]
                total += v[0] + v[1] + v[2] + v[7]
    except OSError:
        return 0.0
    return total / CLK_TCK


def run_delay_seconds(pids: list[int]) -> float:
    """Time these processes' threads spent runnable but waiting for a CPU (/proc/PID/task/*/schedstat).

    For a pinned server this is the direct measure of interference: queries wait while it waits.
    """
    total = 0
    for pid in pids:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                try:
                    total += int((task / "schedstat").read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        except OSError:
            pass
    return total / 1e9
