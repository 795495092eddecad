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


def irq_time_in_tasks() -> bool:
    """Whether the kernel charges interrupt time to the task it interrupted.

    With tick-based accounting (the default; no CONFIG_IRQ_TIME_ACCOUNTING) a tick that lands in a
    softirq counts as `softirq` in /proc/stat *and* as the current task's stime, so the server's own
    loopback delivery of its replies is in both. With CONFIG_IRQ_TIME_ACCOUNTING it is in /proc/stat
    only. Unknown kernel configuration: assume ticks (the check may then fire on the server's own
    interrupt work, never miss another process).
    """
    import gzip
    import platform

    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{platform.release()}")):
        try:
            raw = path.read_bytes()
            text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode(errors="replace")
        except OSError:
            continue
        return "CONFIG_IRQ_TIME_ACCOUNTING=y" not in text
    return True


IRQ_IN_TASKS = irq_time_in_tasks()


def busy_seconds(cpus: list[int], irq: bool | None = None) -> float:
    """Time these CPUs were not idle (user+nice+system+steal, plus irq+softirq when `irq`), /proc/stat.

    Subtract a process's utime+stime from this to get what *other* processes took on its CPU; for
    that, irq and softirq must be counted exactly when the kernel charges them to tasks too (`irq`
    defaults to `IRQ_IN_TASKS`). Counting them only on one side masks other processes: with tick
    accounting the server's stime includes its softirq share (a large part of a DNS server's CPU
    on loopback), so leaving irq out of this sum hid up to that much foreign work on the server's core.
    """
    if irq is None:
        irq = IRQ_IN_TASKS
    want = {f"cpu{c}" for c in cpus}
    total = 0
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            parts = line.split()
            if parts and parts[0] in want:
                v = [int(x) for x in parts[1:9]]
                total += v[0] + v[1] + v[2] + v[7] + ((v[5] + v[6]) if irq else 0)
    except OSError:
        return 0.0
    return total / CLK_TCK


def foreign_share(busy: float, own: float, wall: float, cores: int) -> float:
    """The share of `cores` CPUs' wall time that processes other than ours took (busy minus own CPU)."""
    return round(max(0.0, busy - own) / max(wall, 1e-9) / max(cores, 1), 4)


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
