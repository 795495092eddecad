"""Where a stored result came from: date, commit and machine, recorded beside its figures.

Shared by the benchmark suite (benchmarks/suite.py) and the soak checker
(benchmarks/soak.py), so every file under benchmarks/results/ says the same things
the same way.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The short commit of the checkout, `+dirty` if mcsdns/ has uncommitted changes, `?` without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=ROOT, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "mcsdns"], capture_output=True, text=True,
                                    cwd=ROOT, timeout=10).stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + ("+dirty" if dirty else "")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def load_average() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> dict:
    """CPUs, their model, memory, kernel, Python, and the 1-minute load average (is anything else running?)."""
    memory = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GB"
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "memory": memory, "kernel": platform.release(),
            "python": platform.python_version(), "loadavg_at_start": load_average()}
