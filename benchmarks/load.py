"""dnsperf runs, the search for the maximum sustained rate, and latency percentiles.

Method (docs/performance.md explains why):

1. A closed-loop probe (no rate limit, bounded outstanding queries) gives a
   rough capacity C.
2. Rate steps with `dnsperf -Q R`: a step passes when under 0.1% of the sent
   queries were lost (no answer within the timeout) and the achieved rate is
   at least 97% of R (dnsperf could not send faster because too many queries
   were outstanding: the server was not keeping up). The search starts at
   0.9 C, bisects between the best pass and the lowest failure, and reports
   the achieved rate of the best passing step, with the server's CPU seconds
   during that step.
3. Latency: one more run at 50% of that rate with `dnsperf -v`, which prints
   every query's latency; p50/p99/p99.9 are computed from those samples. With
   a common rate (the suite's `--common-rate`), one more such run at that rate,
   the same offered load for every server, where it is at most half the
   server's max rate (`Capacity.common`): at half load a fast server is driven
   several times harder than a slow one, and its tail then says more about the
   load generator and the machine than about the server.
4. CPU per query at one rate (the suite's `--cost-rate`): one more rate step
   at that rate, the same for every server and mix, where it is at most 80%
   of the server's max rate (`Capacity.cost`). The CPU per query of step 2 is
   taken at each server's and mix's own max rate, and a Python server's cost
   per query falls steeply with the rate (more datagrams per recvmmsg and per
   trip through the event loop), so two mixes whose maxima differ by 10% look
   10% apart in cost however alike their code paths are; at one rate, the
   figures compare what each query costs. Both are reported. The common
   latency run's CPU is kept too (`Capacity.common`): the cost at light load.
5. What limited the rate: at the failing step above the best pass that got
   the most answers, was the server's core saturated (`server`)? If not, and
   dnsperf's was, or dnsperf fell short of the asked rate while losing nothing
   (it could not send faster; the server had CPU to spare), the figure is the
   `load generator`'s limit, a lower bound of the server's. A loss with neither
   core saturated is `unclear` (a stalled server, or another process); no
   failing step at all: `not reached` (a lower bound).

The answer checker (checker.py) runs beside dnsperf for the whole measurement.
"""

from __future__ import annotations

import math
import re
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .checker import Checker

LOSS_LIMIT = 0.001  # a passing step loses under 0.1% of its queries
WARMUP = 0.5  # seconds of a latency run whose samples are dropped
ACHIEVED = 0.97  # ... and sends at least 97% of the asked rate
SATURATED = 0.85  # a core this busy during a step (share of its wall time) is the step's limit
CLIENTS = 16  # dnsperf client sockets (-c) of the probe and the rate steps
OUTSTANDING = 2000  # queries in flight (-q): enough that dnsperf never waits for a fast server
COST_SHARE = 0.8  # the one-rate CPU step runs where its rate is at most this share of the max rate
# What dnsperf is told to keep quiet about. Not "unexpected": dnsperf 2.10 (Debian 12's) counts a
# suppressed unexpected reply (one that came after its query timed out) as completed too, so the
# answered and timed-out counts exceed the sent count, its receiving thread waits forever for a
# negative number of outstanding queries and the run never ends (docs/reliability.md, "dnsperf runs
# that never ended"; fixed upstream in 2.11.0).
SUPPRESS = "timeout"
LATE_WARNING = "unexpected (maybe timed out) id"  # dnsperf's warning per reply that came after its timeout


@dataclass
class Run:
    rate: float | None  # asked rate (-Q), None = closed loop
    sent: int = 0
    completed: int = 0
    lost: int = 0
    qps: float = 0.0
    seconds: float = 0.0
    rcodes: dict[str, int] = field(default_factory=dict)
    latencies: list[float] | None = None  # seconds, per completed query (verbose runs)
    cpu: float = 0.0  # server CPU seconds during the run
    gen_cpu: float = 0.0  # dnsperf's CPU seconds during the run
    wall: float = 0.0  # seconds from starting dnsperf until it exited (start-up and the final timeout included)
    # CPU seconds per second of the server and of dnsperf while dnsperf was sending (from 20% to 90% of
    # its run): its start-up and its final wait for late replies left out.
    server_busy: float = 0.0
    gen_busy: float = 0.0
    note: str = ""  # why a run got no figures (dnsperf's last words, or that it hung)
    late: int = 0  # replies that came after their query had timed out (counted lost, not completed)

    @property
    def loss(self) -> float:
        return self.lost / self.sent if self.sent else 1.0

    @property
    def passed(self) -> bool:
        return self.sent > 0 and self.loss < LOSS_LIMIT and (self.rate is None or self.qps >= ACHIEVED * self.rate)

    @property
    def cpu_per_100k(self) -> float | None:
        return self.cpu / self.completed * 1e5 if self.completed else None


_NUM = r"([0-9.]+)"


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)  # dnsperf runs are the only children reaped meanwhile
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)  # the suite: reading dnsperf's output, the answer checker
    return r.ru_utime + r.ru_stime


def dnsperf(port: int, qfile: Path, *, seconds: float, rate: float | None = None, clients: int = CLIENTS,
            outstanding: int = OUTSTANDING, verbose: bool = False, timeout: float = 1.0, cpu: str | None = None,
            edns: bool = True, meter: Callable[[], float] | None = None) -> Run:
    """One dnsperf run against 127.0.0.1:`port`; `meter` reads the server's CPU seconds."""
    argv = ["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", str(qfile), "-l", f"{seconds:g}",
            "-c", str(clients), "-q", str(outstanding), "-t", f"{timeout:g}", "-O", f"suppress={SUPPRESS}"]
    if edns:
        argv.append("-e")
    if rate is not None:
        argv += ["-Q", str(max(1, int(rate)))]
    if verbose:
        argv.append("-v")
    from .servers import prefix

    argv = prefix(cpu) + argv
    before, gen0, wall0 = (meter() if meter else 0.0), _children_cpu(), time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outputs: list[str] = []
    reader = threading.Thread(target=lambda: outputs.extend(proc.communicate()), daemon=True)
    reader.start()  # dnsperf -v writes a line per query: its pipe is drained while the busy shares are read
    busy = _busy_window(proc, wall0, seconds, meter) if meter else None
    reader.join(seconds + timeout + 30)
    if reader.is_alive():  # a dnsperf that does not end: a failed run, with what it was doing
        return Run(rate=rate, latencies=[] if verbose else None,
                   note=f"dnsperf did not exit within {seconds + timeout + 30:g} s: {_interrupt(proc, reader, outputs)}")
    after, wall = (meter() if meter else 0.0), time.monotonic() - wall0
    proc = subprocess.CompletedProcess(argv, proc.returncode, *outputs)
    out = proc.stdout
    if proc.returncode != 0 and "Queries sent" not in out:
        raise RuntimeError(f"dnsperf failed ({proc.returncode}): {proc.stderr.strip() or out[-500:]}")
    run = Run(rate=rate, cpu=after - before, gen_cpu=_children_cpu() - gen0, wall=wall,
              note=f"dnsperf exited {proc.returncode} after {wall:.1f} s: " + " | ".join((proc.stderr + out).strip().splitlines()[-6:]))
    if busy is not None:
        run.server_busy, run.gen_busy = busy
    else:
        run.server_busy, run.gen_busy = run.cpu / max(wall, 1e-9), run.gen_cpu / max(wall, 1e-9)
    run.sent = int(_grab(r"Queries sent:\s+(\d+)", out))
    run.completed = int(_grab(r"Queries completed:\s+(\d+)", out))
    run.lost = int(_grab(r"Queries lost:\s+(\d+)", out))
    run.qps = _grab(r"Queries per second:\s+" + _NUM, out)
    run.seconds = _grab(r"Run time \(s\):\s+" + _NUM, out)
    run.late = proc.stderr.count(LATE_WARNING)
    m = re.search(r"Response codes:\s+(.*)", out)
    if m:
        for code, n in re.findall(r"([A-Z]+) (\d+) \(", m.group(1)):
            run.rcodes[code] = int(n)
    if verbose:
        lat = []
        for line in out.splitlines():
            if line.startswith("> ") and not line.startswith("> T "):
                try:
                    lat.append(float(line.rsplit(" ", 1)[1]))
                except ValueError:
                    pass
        run.latencies = lat
    return run


def _interrupt(proc: subprocess.Popen, reader: threading.Thread, outputs: list[str]) -> str:
    """Stop a dnsperf that did not exit; what it was doing, and its own statistics if it printed them.

    Its threads' wait channels are read first; then SIGINT, on which dnsperf ends the test
    ("interruption") and prints its statistics, so the note says whether the server had been
    answering (a killed dnsperf printed nothing, and such a run looked like one with no answer at
    all); SIGKILL only if it does not exit within 5 s of that.
    """
    waits: dict[str, int] = {}
    for task in sorted(Path(f"/proc/{proc.pid}/task").glob("*")):  # each thread's wait channel
        try:
            where = (task / "wchan").read_text().strip() or "-"
        except OSError:
            continue
        waits[where] = waits.get(where, 0) + 1
    state = ["threads waiting in " + ", ".join(f"{k} x{n}" for k, n in sorted(waits.items()))] if waits else []
    proc.send_signal(signal.SIGINT)
    reader.join(5)
    if reader.is_alive():
        proc.kill()
        reader.join()
        return "; ".join(state + ["killed: no statistics"])
    out = outputs[0] if outputs else ""
    said = [line.strip() for line in out.splitlines() if line.strip().startswith(("Queries sent", "Queries completed", "Run time"))]
    return "; ".join(state + ["interrupted"] + said)


def _busy_window(proc: subprocess.Popen, start: float, seconds: float,
                 meter: Callable[[], float]) -> tuple[float, float] | None:
    """(server, dnsperf) CPU seconds per second from 20% to 90% of a run; None if dnsperf exited first."""
    from . import procstat

    samples = []
    for at in (0.2, 0.9):
        time.sleep(max(0.0, start + at * seconds - time.monotonic()))
        if proc.poll() is not None:
            return None
        samples.append((time.monotonic(), meter(), procstat.cpu_seconds([proc.pid])))
    (t0, s0, g0), (t1, s1, g1) = samples
    span = max(t1 - t0, 1e-9)
    return (s1 - s0) / span, (g1 - g0) / span


def _grab(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    return float(m.group(1)) if m else 0.0


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Capacity:
    """The outcome of one server x mix measurement."""

    max_qps: float = 0.0  # achieved rate of the best passing step
    probe_qps: float = 0.0  # closed-loop rate (for reference)
    cpu_per_100k: float | None = None  # server CPU seconds per 100k queries at max_qps
    p50: float | None = None  # seconds, at 50% of max_qps
    p99: float | None = None
    p999: float | None = None
    latency_loss: float | None = None
    # Latency at the common offered load (step 3): {"rate", "p50", "p99", "p999" (seconds), "loss"}; None
    # when not asked, or when that rate is over half this server's max rate (not measured: it would be
    # near saturation)
    common: dict | None = None
    # CPU per query at the suite's one rate (step 4): {"rate", "qps", "cpu_per_100k", "loss", "passed"};
    # None when not asked or when that rate is over COST_SHARE of max_qps
    cost: dict | None = None
    rcodes: dict[str, int] = field(default_factory=dict)  # from the latency run
    # (asked, achieved, loss, passed, server core busy, dnsperf core busy): busy as a share of the step's time
    steps: list[tuple[float, float, float, bool, float, float]] = field(default_factory=list)
    # What set max_qps: "server", "load generator", "not reached" (no step failed: a lower bound) or
    # "unclear" (a step failed with neither core saturated); see the module docstring.
    limit: str | None = None
    error: str | None = None
    # CPU time other processes took on the server's CPUs during the measurement, as a fraction of its
    # wall time: a figure measured with more than a few percent of it is noisy and should be re-run.
    interference: float | None = None
    # The same for dnsperf's CPUs (dnsperf's own CPU time subtracted): a stalled load generator
    # delays the replies it reads, which shows up as server latency.
    load_interference: float | None = None
    # Share of the wall time the server's threads were runnable but waiting for a CPU (schedstat).
    run_delay: float | None = None
    attempts: int = 1  # measurements made (the least disturbed one is kept)
    waited_for_quiet: float = 0.0  # seconds waited for the server's CPU to be idle first
    # Every attempt's summary (max_qps, p99, interference, ...), the kept one included: a re-measured
    # cell keeps the measurements it replaced.
    attempt_log: list[dict] = field(default_factory=list)
    # The answer checker's tally (checker.Tally as a dict): sent, checked, wrong, unanswered, examples.
    check: dict | None = None

    def summary(self) -> dict:
        """The figures of this measurement that a later one may replace (kept in attempt_log)."""
        return {"max_qps": round(self.max_qps), "cpu_per_100k": self.cpu_per_100k, "p99": self.p99,
                "p999": self.p999, "interference": self.interference, "load_interference": self.load_interference,
                "limit": self.limit, "error": self.error}


def measure(port: int, qfile: Path, *, meter: Callable[[], float], cpu: str | None, probe_seconds: float,
            step_seconds: float, steps: int, latency_seconds: float, timeout: float = 1.0,
            server_cpus: str | None = None, delay: Callable[[], float] | None = None,
            checker: "Checker | None" = None, edns: bool = True, common_rate: float = 0.0,
            cost_rate: float = 0.0) -> Capacity:
    """Max sustained rate, CPU per 100k and latency at half of it and at `common_rate`, CPU per 100k at
    `cost_rate` (module docstring), with an interference check and, when given, the answer `checker` running throughout."""
    import time

    from . import procstat

    cores = procstat.cpu_list(server_cpus) if server_cpus else None
    load_cores = procstat.cpu_list(cpu) if cpu and server_cpus else None
    wall0, own0, gen0, self0 = time.monotonic(), meter(), _children_cpu(), _self_cpu()
    delay0 = delay() if delay else 0.0
    busy0 = procstat.busy_seconds(cores) if cores else 0.0
    lbusy0 = procstat.busy_seconds(load_cores) if load_cores else 0.0
    shares = (len(cores or procstat.cpu_list(None)), len(procstat.cpu_list(cpu)))
    if checker is not None:
        checker.start()
    try:
        cap = _measure(port, qfile, meter=meter, cpu=cpu, probe_seconds=probe_seconds, step_seconds=step_seconds,
                       steps=steps, latency_seconds=latency_seconds, timeout=timeout, cores=shares, edns=edns,
                       common_rate=common_rate, cost_rate=cost_rate)
    finally:
        if checker is not None:
            cap_check = checker.stop()
    if checker is not None:
        cap.check = asdict(cap_check)
    wall = max(time.monotonic() - wall0, 1e-9)
    if delay:
        cap.run_delay = round((delay() - delay0) / wall, 4)
    if cores:  # other processes' CPU on the server's cores: their busy time minus the server's own
        cap.interference = procstat.foreign_share(procstat.busy_seconds(cores) - busy0, meter() - own0, wall, len(cores))
    if load_cores:  # ... and on dnsperf's: minus dnsperf's and the suite's own (output reading, the checker)
        own = (_children_cpu() - gen0) + (_self_cpu() - self0)
        cap.load_interference = procstat.foreign_share(procstat.busy_seconds(load_cores) - lbusy0, own, wall,
                                                       len(load_cores))
    return cap


def _step(run: Run, cores: tuple[int, int]) -> tuple[float, float, float, bool, float, float]:
    return (run.rate or 0.0, run.qps, run.loss, run.passed, round(run.server_busy / cores[0], 3),
            round(run.gen_busy / cores[1], 3))


def limit_of(steps: list[tuple], best_rate: float) -> str:
    """What limited the best passing rate (module docstring, item 4), from the steps above it."""
    above = [s for s in steps if len(s) >= 6 and not s[3] and s[0] > best_rate]
    if not above:
        return "not reached"
    top = max(above, key=lambda s: s[1])
    if top[4] >= SATURATED:
        return "server"
    if top[5] >= SATURATED or top[2] < LOSS_LIMIT:
        return "load generator"
    return "unclear"


def _measure(port: int, qfile: Path, *, meter: Callable[[], float], cpu: str | None, probe_seconds: float,
             step_seconds: float, steps: int, latency_seconds: float, timeout: float = 1.0,
             cores: tuple[int, int] = (1, 1), edns: bool = True, common_rate: float = 0.0,
             cost_rate: float = 0.0) -> Capacity:
    cap = Capacity()
    if steps == 0:  # smoke: one verbose run at a modest fixed rate proves the path works, measures nothing
        run = dnsperf(port, qfile, seconds=step_seconds, rate=2000, outstanding=200, verbose=True, cpu=cpu,
                      meter=meter, timeout=timeout, edns=edns)
        cap.max_qps = cap.probe_qps = run.qps
        cap.cpu_per_100k = run.cpu_per_100k
        values = run.latencies or []
        cap.p50, cap.p99, cap.p999 = (percentile(values, q) for q in (0.50, 0.99, 0.999))
        cap.latency_loss, cap.rcodes = run.loss, run.rcodes
        cap.steps.append(_step(run, cores))
        cap.limit = limit_of(cap.steps, 2000)
        if not run.completed:
            cap.error = f"no answers ({run.note})"
        cap.cost = _cost(port, qfile, cost_rate, cap.max_qps, seconds=step_seconds, cpu=cpu, meter=meter,
                         timeout=timeout, edns=edns)
        return cap
    probe = dnsperf(port, qfile, seconds=probe_seconds, cpu=cpu, meter=meter, timeout=timeout, edns=edns)
    cap.probe_qps = probe.qps
    best: Run | None = None
    low_fail = None
    rate = max(100.0, probe.qps * 0.9)
    for _ in range(steps):
        run = dnsperf(port, qfile, seconds=step_seconds, rate=rate, cpu=cpu, meter=meter, timeout=timeout, edns=edns)
        cap.steps.append(_step(run, cores))
        if run.passed:
            if best is None or run.qps > best.qps:
                best = run
            lo = rate
            rate = (lo + low_fail) / 2 if low_fail else lo * 1.15
        else:
            low_fail = rate if low_fail is None else min(low_fail, rate)
            rate = (best.rate + low_fail) / 2 if best is not None else rate * 0.7
    if best is None:  # keep going down until something passes (bounded)
        for _ in range(6):
            run = dnsperf(port, qfile, seconds=step_seconds, rate=rate, cpu=cpu, meter=meter, timeout=timeout, edns=edns)
            cap.steps.append(_step(run, cores))
            if run.passed:
                best = run
                break
            rate *= 0.6
    if best is None:
        cap.error = "no rate step passed"
        return cap
    cap.max_qps = best.qps
    cap.cpu_per_100k = best.cpu_per_100k
    cap.limit = limit_of(cap.steps, best.rate or 0.0)
    rate = best.qps * 0.5
    lat, (cap.p50, cap.p99, cap.p999) = _latency(port, qfile, rate, latency_seconds, cpu=cpu, meter=meter,
                                                 timeout=timeout, edns=edns)
    cap.latency_loss = lat.loss
    cap.rcodes = lat.rcodes
    if common_rate and common_rate <= rate:
        run, (p50, p99, p999) = _latency(port, qfile, common_rate, latency_seconds, cpu=cpu, meter=meter,
                                         timeout=timeout, edns=edns)
        cap.common = {"rate": common_rate, "p50": p50, "p99": p99, "p999": p999, "loss": run.loss,
                      "cpu_per_100k": run.cpu_per_100k}
    cap.cost = _cost(port, qfile, cost_rate, cap.max_qps, seconds=step_seconds, cpu=cpu, meter=meter,
                     timeout=timeout, edns=edns)
    return cap


def _cost(port: int, qfile: Path, rate: float, max_qps: float, *, seconds: float, cpu: str | None,
          meter: Callable[[], float], timeout: float, edns: bool) -> dict | None:
    """`Capacity.cost`: one rate step at `rate` (module docstring, item 4), None when `rate` is 0 or over
    COST_SHARE of `max_qps`."""
    if not rate or rate > COST_SHARE * max_qps:
        return None
    run = dnsperf(port, qfile, seconds=seconds, rate=rate, cpu=cpu, meter=meter, timeout=timeout, edns=edns)
    return {"rate": rate, "qps": run.qps, "cpu_per_100k": run.cpu_per_100k, "loss": run.loss, "passed": run.passed}


def _latency(port: int, qfile: Path, rate: float, seconds: float, *, cpu: str | None, meter: Callable[[], float],
             timeout: float, edns: bool) -> tuple[Run, tuple[float | None, float | None, float | None]]:
    """One verbose run at `rate`: the run, and p50/p99/p99.9 of its latencies after the warm-up."""
    run = dnsperf(port, qfile, seconds=seconds + WARMUP, rate=rate, outstanding=1000, verbose=True,
                  cpu=cpu, meter=meter, timeout=timeout, edns=edns)
    values = (run.latencies or [])[int(rate * WARMUP):]  # dnsperf's own start-up is not the server's latency
    return run, tuple(percentile(values, q) for q in (0.50, 0.99, 0.999))  # type: ignore[return-value]
