"""The servers under test, each a child process on loopback, optionally pinned to a CPU.

* `Mcsdns`: `python -m mcsdns serve` from a manifest file or a kubeconfig, its package
  byte-compiled first as the image is (`byte_compile`).
* `CoreDns`: the testbed's trimmed CoreDNS 1.14.x, `kubernetes` plugin with
  `multicluster`, reading the testbed's kube-apiserver (`CoreDns.corefile`
  below, bound to 127.0.0.1).
* `Knot`: knotd with a static zone file.

Every process is stopped by its PID (SIGTERM, then SIGKILL), and the kernel
kills it if the suite itself dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dns.message
import dns.query
import dns.rcode

from . import procstat
from testsupport.mcsdnsserver import mcsdns_command
from testsupport.testbed import DIE_WITH_PARENT, free_port, stop_popen

REPO = Path(__file__).resolve().parent.parent
# Servers and dnsperf run at this nice value (root only; 0 = as is): on a machine shared with other
# work, CFS then gives them ~90% of their core against a nice-0 CPU hog instead of ~50%. Every server
# gets the same, so comparisons stay fair; `--nice 0` turns it off.
NICE = -10


def byte_compile() -> None:
    """Byte-compile the checkout's `mcsdns` package (its __pycache__, ignored by git), as the image is.

    The Containerfile runs `compileall` over the installed package, so a deployed mcsdns starts
    from bytecode. Run from a checkout where nothing writes bytecode (PYTHONDONTWRITEBYTECODE, as
    on the test machines), every start would compile ~60 modules from source first: ~0.1 s of CPU
    that a deployed server never spends, charged to each startup and initial-sync figure. Python
    reads a cached file only while its source is unchanged, so an edit is never run stale.
    """
    compileall.compile_dir(REPO / "mcsdns", quiet=1)


def prefix(cpu: str | None) -> list[str]:
    """taskset/nice in front of a command (both exec, so the PID stays the command's own)."""
    out: list[str] = []
    if cpu is not None and shutil.which("taskset"):
        out += ["taskset", "-c", cpu]
    if NICE and os.geteuid() == 0 and shutil.which("nice"):
        out += ["nice", "-n", str(NICE)]
    return out


def udp_rcvbuf(port: int) -> int | None:
    """The receive buffer (bytes) of the UDP socket bound to 127.0.0.1:`port`, from `ss -m`; None if unknown."""
    import re

    try:
        out = subprocess.run(["ss", "-uanmH", "sport", "=", f":{port}"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\brb(\d+)", out)
    return int(m.group(1)) if m else None


def mcsdns_rcvbuf() -> int:
    """The buffer the kernel gives mcsdns's UDP socket: it asks SO_RCVBUF = transport.UDP_RCVBUF, the
    kernel caps that at net.core.rmem_max and doubles it (the doubled figure is what `ss` shows)."""
    from mcsdns.serve.transport import UDP_RCVBUF

    try:
        cap = int(Path("/proc/sys/net/core/rmem_max").read_text())
    except (OSError, ValueError):
        cap = UDP_RCVBUF
    return 2 * min(UDP_RCVBUF, cap)


class rmem_default:
    """Set net.core.rmem_default inside the block (root only), restored after; `applied` says if it was.

    Knot has no setting for its UDP receive buffer and keeps the system default (212,992 bytes on
    most Linux systems), while mcsdns asks for 1 MiB. A socket takes rmem_default when it is created,
    so the default is raised only while knotd starts: every other process keeps its own buffers
    (sockets created in that second by other processes get the larger default too; harmless).
    """

    PATH = Path("/proc/sys/net/core/rmem_default")

    def __init__(self, value: int) -> None:
        self.value = value
        self.saved: str | None = None
        self.applied = False

    def __enter__(self) -> "rmem_default":
        if os.geteuid() != 0:
            return self
        try:
            self.saved = self.PATH.read_text().strip()
            self.PATH.write_text(str(self.value))
            self.applied = True
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            self.PATH.write_text(self.saved)


def query(port: int, name: str, rdtype: str = "A", timeout: float = 0.5) -> dns.message.Message | None:
    try:
        return dns.query.udp(dns.message.make_query(name, rdtype), "127.0.0.1", port=port, timeout=timeout)
    except Exception:
        return None


def answers(port: int, name: str, rdtype: str = "A", timeout: float = 0.5) -> set[str]:
    """The record data the server returns for `name`, empty when none (or no reply)."""
    reply = query(port, name, rdtype, timeout)
    if reply is None or reply.rcode() != dns.rcode.NOERROR:
        return set()
    return {rd.to_text() for rrset in reply.answer for rd in rrset}


PROBE_WAIT = 0.02  # seconds a start-up probe waits for its answer (see Server.start)


def tool_path(tool: str) -> str | None:
    """Where a load generator or peer the benchmarks run is installed: on PATH, or in /usr/sbin (where
    Debian puts knotd, and which a non-root PATH lacks); None when it is not."""
    found = shutil.which(tool)
    if found is None and Path(f"/usr/sbin/{tool}").exists():
        found = f"/usr/sbin/{tool}"
    return found


class Server:
    """One server process; subclasses say how to start it."""

    kind = "server"

    def __init__(self, label: str, workdir: Path, cpu: str | None = None) -> None:
        self.label = label
        self.workdir = workdir
        self.cpu = cpu
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"{label}.log"
        self.started_at = 0.0
        self.ready_after: float | None = None
        self.repinned = 0  # threads `repin` moved back onto `cpu` after the start
        self.cwd = REPO  # where the process starts (`python -m` imports from there first)

    def argv(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        return None

    def start(self, probe: str, timeout: float = 120.0) -> float:
        """Start; return seconds until `probe` answers with data (the whole data set is served)."""
        argv = prefix(self.cpu) + self.argv()
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
            preexec_fn=DIE_WITH_PARENT,  # noqa: PLW1509
        )
        log.close()
        deadline = self.started_at + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with {self.proc.returncode}:\n{self.tail()}")
            # A short wait per probe: a server that binds its port only once synced (mcsdns) leaves each
            # probe before that unanswered, so the wait is the resolution of the time measured (with 0.2 s,
            # every mcsdns sync time was rounded up to a step of ~0.22 s). An answer takes well under 20 ms.
            if answers(self.port, probe, timeout=PROBE_WAIT):
                self.ready_after = time.monotonic() - self.started_at
                self.repinned = self.repin()
                return self.ready_after
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{self.label} did not answer {probe} within {timeout:.0f}s:\n{self.tail()}")

    def repin(self) -> int:
        """Put back on the server's CPUs every thread that moved itself off them; how many moved.

        `taskset` pins the process, but a server may set its own threads' affinity after that:
        knotd binds UDP worker i to CPU i % ncpus (`udp_master`), so with one worker its answering
        thread ran on CPU 0, beside dnsperf, and the whole Knot column measured two programs sharing
        the load generator's core (the load-interference flag on every Knot cell). Threads started
        later (none of the measured servers starts any) are not seen.
        """
        if self.cpu is None or self.proc is None:
            return 0
        want = set(procstat.cpu_list(self.cpu))
        moved = 0
        for pid in self.pids():
            try:
                tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
            except OSError:
                continue
            for tid in tids:
                try:
                    if not os.sched_getaffinity(tid) <= want:
                        os.sched_setaffinity(tid, want)
                        moved += 1
                except OSError:
                    pass  # the thread ended
        return moved

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pids(self) -> list[int]:
        """The server's processes (a `taskset` wrapper execs, so the PID is the server's own)."""
        return procstat.tree(self.pid) if self.proc is not None else []

    def cpu_seconds(self) -> float:
        return procstat.cpu_seconds(self.pids())

    def rss_mb(self) -> float:
        return procstat.rss_mb(self.pids())

    def settle(self, quiet: float = 0.3, poll: float = 0.05, timeout: float = 600.0) -> tuple[float, float]:
        """Wait until the server's CPU time stops growing for `quiet` seconds; return (seconds from its
        start to its last CPU use seen, its CPU seconds then).

        What a server still does after its first answer (mcsdns compiles the services the sync left
        while answering: `Table.compile_behind`; a Go server's collector runs) counts here, so a figure
        taken at the first answer alone cannot hide work moved past it. The resolution is `poll` plus a
        clock tick (10 ms) of CPU time."""
        cpu = self.cpu_seconds()
        last = time.monotonic()
        deadline = last + timeout
        while time.monotonic() < deadline:
            time.sleep(poll)
            now = self.cpu_seconds()
            if now > cpu:
                cpu, last = now, time.monotonic()
            elif time.monotonic() - last >= quiet:
                break
        return last - self.started_at, cpu

    def rcvbuf(self) -> int | None:
        """Its UDP socket's receive buffer in bytes (None if unknown)."""
        return udp_rcvbuf(self.port)

    def run_delay(self) -> float:
        return procstat.run_delay_seconds(self.pids())

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is not None:
            stop_popen(self.proc, grace)
        self.proc = None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Mcsdns(Server):
    kind = "mcsdns"

    def __init__(self, label: str, workdir: Path, cpu: str | None = None, *, manifests: Path | None = None,
                 kubeconfig: Path | None = None, workers: int = 1, extra: tuple[str, ...] = (),
                 source: Path | None = None) -> None:
        super().__init__(label, workdir, cpu)
        # `source`: another checkout's mcsdns (an A/B run: benchmarks.churn --source), run from there
        self.source = source
        if source is not None:
            self.cwd = source
        self.manifests = manifests
        self.kubeconfig = kubeconfig
        self.workers = workers
        self.extra = extra
        self.http_port = free_port()

    def start(self, probe: str, timeout: float = 120.0) -> float:
        byte_compile()
        if self.source is not None:
            compileall.compile_dir(self.source / "mcsdns", quiet=1)
        return super().start(probe, timeout)

    def argv(self) -> list[str]:
        argv = mcsdns_command(self.port, self.http_port, ["--log-level", "WARNING", "--startup-timeout", "900s"])
        if self.manifests is not None:
            argv += ["--manifests", str(self.manifests)]
        if self.kubeconfig is not None:
            argv += ["--kubeconfig", str(self.kubeconfig)]
        if self.workers != 1:
            argv += ["--workers", str(self.workers)]
        return argv + list(self.extra)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source)
        return env

    def metric(self, name: str) -> float | None:
        """The sum of a metric's samples on /metrics (None when absent)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        total, seen = 0.0, False
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
                seen = True
        return total if seen else None


class Floor(Server):
    """benchmarks/floor.py: mcsdns's resolver in the barest Python loop (the pure-Python floor, issue #34)."""

    kind = "floor"

    def __init__(self, label: str, workdir: Path, cpu: str | None = None, *, manifests: Path) -> None:
        super().__init__(label, workdir, cpu)
        self.manifests = manifests

    def start(self, probe: str, timeout: float = 120.0) -> float:
        byte_compile()
        return super().start(probe, timeout)

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "benchmarks.floor", "--port", str(self.port), "--manifests", str(self.manifests)]


class CoreDns(Server):
    kind = "coredns"

    def __init__(self, label: str, workdir: Path, cpu: str | None = None, *, binary: Path, kubeconfig: Path,
                 cache: int = 0, transfer: bool = False) -> None:
        super().__init__(label, workdir, cpu)
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.ready_port = free_port()
        self.metrics_port = free_port()
        self.cache = cache
        self.transfer = transfer  # the `transfer` plugin: AXFR of the zones to anyone (benchmarks.transfer_coredns)

    def corefile(self) -> Path:
        cache = f"    cache {self.cache}\n" if self.cache else ""
        cache += "    transfer {\n        to *\n    }\n" if self.transfer else ""
        path = self.workdir / f"{self.label}.Corefile"
        path.write_text(
            f".:{self.port} {{\n"
            "    bind 127.0.0.1\n"
            "    errors\n"
            f"    ready 127.0.0.1:{self.ready_port}\n"
            f"    prometheus 127.0.0.1:{self.metrics_port}\n"
            f"{cache}"
            "    kubernetes cluster.local clusterset.local {\n"
            f"        kubeconfig {self.kubeconfig}\n"
            "        multicluster clusterset.local\n"
            "        startup_timeout 900s\n"
            "    }\n"
            "}\n"
        )
        return path

    def argv(self) -> list[str]:
        return [str(self.binary), "-conf", str(self.corefile())]


class Knot(Server):
    """knotd set up like mcsdns: one UDP worker (one thread answers, as mcsdns's one event loop does),
    mcsdns's UDP receive buffer, answers up to 4,096 bytes like the other servers."""

    kind = "knot"
    rcvbuf_matched: bool | None = None

    def __init__(self, label: str, workdir: Path, cpu: str | None = None, *, zonefile: Path) -> None:
        super().__init__(label, workdir, cpu)
        self.zonefile = zonefile
        self.rundir = workdir / f"{label}-run"

    def start(self, probe: str, timeout: float = 120.0) -> float:
        """Start with mcsdns's UDP receive buffer (see `rmem_default`); `rcvbuf_matched` says if it was set."""
        with rmem_default(mcsdns_rcvbuf()) as setting:
            self.rcvbuf_matched = setting.applied
            return super().start(probe, timeout)

    def argv(self) -> list[str]:
        self.rundir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / f"{self.label}.conf"
        conf.write_text(
            "server:\n"
            f"    listen: 127.0.0.1@{self.port}\n"
            f"    rundir: {self.rundir}\n"
            "    udp-workers: 1\n"  # default: one per CPU; the other servers answer from one thread
            "    tcp-workers: 1\n"
            "    background-workers: 1\n"
            "    udp-max-payload: 4096\n"  # default 1232 truncates the 100-endpoint answer the others send whole
            "database:\n"
            f"    storage: {self.rundir}\n"
            "log:\n"
            "  - target: stderr\n"
            "    any: warning\n"
            "zone:\n"
            "  - domain: clusterset.local\n"
            f"    file: {self.zonefile}\n"
            "    journal-content: none\n"
            "    zonefile-sync: -1\n"
        )
        return [tool_path("knotd") or "/usr/sbin/knotd", "-c", str(conf)]
