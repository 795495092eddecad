"""The whole measurement: throughput and latency per server and mix, scale, propagation.

`run(options)` returns one JSON-able dict (written to results.json); report.py
renders it. Servers are measured one at a time (the others stopped), so the
pinned server core belongs to the server under test alone.
"""

from __future__ import annotations

import json
import os
import platform
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode

from . import apiload, dataset, load, procstat, provenance, queries
from .dataset import ES_API, MCS_API, Spec
from .servers import REPO, CoreDns, Knot, Mcsdns, Server
from .checker import Checker, Expected, Tally

# CoreDNS twice: without cache (the test-bed spec's Corefile) and with `cache 30`, as most clusters ship
# it; every ratio compares with the better of the two per mix (report.py).
SERVERS = ("mcsdns", "mcsdns-api", "coredns", "coredns-cache30", "knot")
NOISY = 0.05  # a measurement during which other processes took more of the server's CPU is retried
# How long a server may take to serve everything: its initial sync, or its relist after the forced
# 410 (at 200,000 imports the apiserver's watch-cache fill and each server's relist take minutes
# on 2 cores, where the 60 s of the test suite's defaults would end the run).
SYNC_TIMEOUT = 1800.0
RELIST_TIMEOUT = 900.0
# The apiserver's limit on one (non-watch) request, default 60 s: CoreDNS lists every EndpointSlice
# in one request, which at 200,000 imports comes close to it on a busy 2-core machine.
APISERVER_ARGS = ("--request-timeout=5m",)


def wait_quiet(cpus: str | None, limit: float, threshold: float = 0.05) -> float:
    """Wait (up to `limit` s) until the server's CPUs are idle over 0.5 s, the server itself idle; seconds waited."""
    if not cpus or limit <= 0:
        return 0.0
    cores = procstat.cpu_list(cpus)
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = procstat.busy_seconds(cores)
        time.sleep(0.5)
        if (procstat.busy_seconds(cores) - before) / 0.5 / len(cores) < threshold:
            break
    return time.monotonic() - started


@dataclass
class Options:
    out: Path
    smoke: bool = False
    imports: int = 1000
    servers: tuple[str, ...] = SERVERS
    mixes: tuple[str, ...] = queries.MIXES
    probe_seconds: float = 2.0
    step_seconds: float = 4.0
    steps: int = 5
    latency_seconds: float = 6.0
    common_rate: float = 5000.0  # q/s of the latency run every server gets at the same offered load (0: none)
    cost_rate: float = 50000.0  # q/s of the CPU step every server and mix gets at the same rate (0: none)
    sizes: tuple[int, ...] = (1000, 10000, 50000)
    scale_headless: tuple[int, ...] = (10, 100, 1000)
    scale_step_seconds: float = 4.0  # as the throughput steps: the flat-rate target compares these figures
    scale_steps: int = 6  # a 4-step search left ~10% between the best pass and the first failure
    changes: int = 200
    scale_changes: int = 5
    workers: int = 1  # mcsdns --workers for the main runs
    extra_variants: tuple[str, ...] = ()  # e.g. "mcsdns-w2" (two workers, unpinned)
    server_cpu: str | None = "1"
    load_cpu: str | None = "0"
    timeout: float = 1.0
    uncached_lines: int = queries.UNCACHED_LINES  # lines of the random-case and random-subdomain mixes
    check_rate: float = 300.0  # answer checker queries per second beside dnsperf (0: no checker)
    # EDNS in the queries: "large" only where answers exceed 512 bytes (queries.needs_edns; the others
    # as a pod's resolver sends them), "all" (as the earlier suite did), "none"
    edns: str = "large"
    retries: int = 1  # re-measure a server x mix this often while other processes disturbed it (keep the cleanest)
    quiet_wait: float = 30.0  # before each measurement, wait up to this long for the server's CPU to be idle
    skip_throughput: bool = False
    skip_scale: bool = False
    skip_propagation: bool = False
    keep_workdir: bool = False

    @classmethod
    def smoke_options(cls, out: Path, **kw: Any) -> "Options":
        base = dict(out=out, smoke=True, imports=30, probe_seconds=0.2, step_seconds=0.3, steps=0,
                    latency_seconds=0.2, common_rate=0.0, cost_rate=500.0, sizes=(30,), scale_headless=(10, 100), scale_step_seconds=0.3,
                    scale_steps=0, changes=6, scale_changes=2, timeout=1.0, retries=0, quiet_wait=0.0,
                    uncached_lines=2000, check_rate=500.0)
        base.update(kw)
        return cls(**base)


def start_testbed() -> tuple[Any, Path]:
    """The benchmarks' etcd + kube-apiserver, started with the ServiceImport CRD, and the testbin's
    CoreDNS binary beside it: (Testbed, coredns path)."""
    from testsupport.testbed import Testbed, find_testbin

    cache = find_testbin()
    log("starting etcd + kube-apiserver (test bed)")
    testbed = Testbed(cache, extra_apiserver_args=APISERVER_ARGS)
    testbed.start()
    testbed.install_crd("v0.5.0")
    return testbed, cache / "bin" / "coredns"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- environment


def _version(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        return (p.stdout + p.stderr).strip().splitlines()[0] if (p.stdout + p.stderr).strip() else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "not found"


def _stored_path(path: Path) -> str:
    """A path as results.json keeps it: relative to the repository when inside it, so a stored result
    names no machine's directories."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def environment(opts: Options, coredns_bin: Path | None) -> dict:
    return {
        "date": provenance.now(),
        "command": " ".join(["python -m benchmarks", *sys.argv[1:]]) if sys.argv[0].endswith("__main__.py") else " ".join(sys.argv),
        "commit": provenance.commit(),
        "cpus": os.cpu_count(),
        "cpu_model": provenance.cpu_model(),
        "loadavg_at_start": provenance.load_average(),
        "python": platform.python_version(),
        "dnsperf": _dnsperf_version(),
        "knotd": _version([shutil.which("knotd") or "knotd", "--version"]),
        "coredns": _version([str(coredns_bin), "-version"]) if coredns_bin else "not found",
        "nice": __import__("benchmarks.servers", fromlist=["NICE"]).NICE,
        "server_cpu": opts.server_cpu,
        "load_cpu": opts.load_cpu,
        "dnsperf_clients": load.CLIENTS,
        "dnsperf_outstanding": load.OUTSTANDING,
        "irq_time_in_tasks": procstat.IRQ_IN_TASKS,
        "mcsdns_rcvbuf": _mcsdns_rcvbuf(),
        "smoke": opts.smoke,
        "options": {k: (_stored_path(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
    }


def _mcsdns_rcvbuf() -> int | None:
    from .servers import mcsdns_rcvbuf

    try:
        return mcsdns_rcvbuf()
    except ImportError:
        return None


def _dnsperf_version() -> str:
    p = subprocess.run(["dnsperf", "-h"], capture_output=True, text=True)
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith("Version"):
            return "dnsperf " + line.split()[-1]
    return "dnsperf"


# --------------------------------------------------------------------------- the run


class Suite:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.work = Path(tempfile.mkdtemp(prefix="mcsdns-bench-"))
        self.testbed = None
        self.client = None
        self.coredns_bin: Path | None = None
        self.results: dict[str, Any] = {"throughput": {}, "servers": {}, "scale": [], "propagation": {}, "errors": []}
        self.loaded_imports = 0
        self.loaded_headless: set[int] = set()

    # -- helpers --------------------------------------------------------- #

    def needs_api(self) -> bool:
        o = self.opts
        api_servers = [l for l in (*o.servers, *o.extra_variants) if l == "mcsdns-api" or l.startswith("coredns")]
        return bool(api_servers) or not o.skip_scale or not o.skip_propagation

    def start_testbed(self) -> None:
        self.testbed, self.coredns_bin = start_testbed()
        self.client = self.testbed.api

    def load_api(self, spec: Spec) -> None:
        """Bring the API server to `spec` (only ever grows)."""
        assert self.client is not None
        objs = []
        if self.loaded_imports == 0 and not self.loaded_headless:
            objs += [dataset.namespace_obj(ns) for ns in spec.namespace_names()]
        for n in spec.headless:
            if n not in self.loaded_headless:
                objs.append(dataset.headless_import_obj(n))
                objs += dataset.headless_slice_objs(n)
        start = self.loaded_imports

        def gen():
            yield from objs
            for i in range(start, spec.imports):
                yield dataset.import_obj(spec, i)
                yield dataset.slice_obj(spec, i)

        count, seconds = apiload.create_all(self.client, gen())
        self.loaded_imports = max(self.loaded_imports, spec.imports)
        self.loaded_headless |= set(spec.headless)
        if count:
            log(f"API: created {count} objects in {seconds:.1f}s ({count / max(seconds, 1e-9):.0f}/s)")

    def make_server(self, label: str, spec: Spec, files: dict[str, Path], cpu: str | None) -> Server:
        o = self.opts
        if label == "mcsdns":
            return Mcsdns(label, self.work, cpu, manifests=files["manifests"], workers=o.workers)
        if label == "mcsdns-api":
            return Mcsdns(label, self.work, cpu, kubeconfig=self.testbed.kubeconfig_path, workers=o.workers)
        if label.startswith("mcsdns-w"):  # a variant: N workers sharing the port, unpinned
            n = int(label.split("-w", 1)[1])
            return Mcsdns(label, self.work, None, manifests=files["manifests"], workers=n)
        if label == "coredns":
            return CoreDns(label, self.work, cpu, binary=self.coredns_bin, kubeconfig=self.testbed.kubeconfig_path)
        if label.startswith("coredns-cache"):  # a variant: CoreDNS with `cache N`, as most cluster Corefiles have
            return CoreDns(label, self.work, cpu, binary=self.coredns_bin, kubeconfig=self.testbed.kubeconfig_path,
                           cache=int(label.split("cache", 1)[1] or 30))
        if label == "knot":
            return Knot(label, self.work, cpu, zonefile=files["zone"])
        raise ValueError(f"unknown server {label!r}")

    def files_for(self, spec: Spec, tag: str, *, zone: bool = True) -> dict[str, Path]:
        d = self.work / tag
        d.mkdir(exist_ok=True)
        files = {"manifests": dataset.write_manifests(spec, d / "objects.json")}
        if zone:
            files["zone"] = dataset.write_zone(spec, d / "clusterset.local.zone")
        return files

    # -- throughput ------------------------------------------------------- #

    def throughput(self) -> None:
        with own_cpu(self.opts.load_cpu):  # the suite reads dnsperf's output: keep that off the server's core
            self._throughput()

    def _throughput(self) -> None:
        o = self.opts
        spec = Spec(imports=o.imports, headless=(10, 100))
        files = self.files_for(spec, "main")
        qdir = self.work / "queries"
        qdir.mkdir(exist_ok=True)
        qfiles = {mix: queries.write(mix, spec, qdir, o.uncached_lines) for mix in o.mixes}
        qlines = {mix: queries.read(path) for mix, path in qfiles.items()}
        expected = Expected(spec)
        if any(label == "mcsdns-api" or label.startswith("coredns") for label in [*o.servers, *o.extra_variants]):
            self.load_api(spec)
        probe = queries.probe_name(spec)
        for label in list(o.servers) + list(o.extra_variants):
            server = self.make_server(label, spec, files, o.server_cpu)
            try:
                log(f"{label}: starting")
                ready = server.start(probe, timeout=300)
                server.settle()  # mcsdns compiles after its first answer: RSS and the mixes come after that
                time.sleep(0.5 if o.smoke else 2.0)
                info = {"kind": server.kind, "ready_seconds": round(ready, 3), "rss_mb": round(server.rss_mb(), 1),
                        "pinned": server.cpu, "workers": getattr(server, "workers", None),
                        "udp_rcvbuf": server.rcvbuf(), "cache": getattr(server, "cache", None),
                        "udp_rcvbuf_matched": getattr(server, "rcvbuf_matched", None),
                        "threads_repinned": server.repinned}
                self.results["servers"][label] = info
                for mix in o.mixes:
                    cap, attempts, tally = None, [], Tally()
                    edns = o.edns == "all" or (o.edns == "large" and queries.needs_edns(mix))
                    for attempt in range(1 + o.retries):
                        waited = wait_quiet(server.cpu, o.quiet_wait)
                        check = (Checker(server.port, qlines[mix], expected, rate=o.check_rate, timeout=o.timeout,
                                                 edns=edns) if o.check_rate > 0 else None)
                        got = load.measure(server.port, qfiles[mix], meter=server.cpu_seconds, cpu=o.load_cpu,
                                           probe_seconds=o.probe_seconds, step_seconds=o.step_seconds, steps=o.steps,
                                           latency_seconds=o.latency_seconds, timeout=o.timeout, server_cpus=server.cpu,
                                           delay=server.run_delay, checker=check, edns=edns,
                                           common_rate=o.common_rate, cost_rate=o.cost_rate)
                        got.attempts, got.waited_for_quiet = attempt + 1, round(waited, 1)
                        attempts.append(got.summary())
                        if check is not None:
                            tally.add(check.tally)
                        if cap is None or _noise(got) < _noise(cap):
                            cap = got
                        if _noise(cap) <= NOISY:
                            break
                        if attempt < o.retries:
                            log(f"{label} {mix}: disturbed by other processes ({_noise(got):.0%}); measuring again")
                    cap.attempt_log = attempts
                    cap.check = asdict(tally) if o.check_rate > 0 else None
                    cell = asdict(cap)
                    cell["run"] = {k: self.results["environment"].get(k) for k in ("date", "command", "commit")}
                    cell["edns"] = edns
                    self.results["throughput"].setdefault(mix, {})[label] = cell
                    log(f"{label:>11} {mix:<14} max {cap.max_qps:9.0f} qps ({cap.limit})  p99 {_us(cap.p99)}  "
                        f"cpu/100k {cap.cpu_per_100k or 0:.2f}s  noise {cap.interference}/{cap.load_interference} runq {cap.run_delay}  rcodes {cap.rcodes}"
                        f"  checked {tally.checked} wrong {tally.wrong}" + (f"  ERROR {cap.error}" if cap.error else ""))
                    if tally.wrong:
                        self.wrong_answers(label, mix, tally)
                info["rss_mb_after"] = round(server.rss_mb(), 1)
            except Exception as exc:  # noqa: BLE001 - one server's failure is reported, the run goes on
                self.error(f"throughput {label}", exc, server)
            finally:
                server.stop()

    # -- propagation ------------------------------------------------------ #

    def propagation(self, spec: Spec, servers: dict[str, Server], changes: int, *, tag: str,
                    timeout: float = 30.0) -> dict[str, Any]:
        """Write `changes` changes to the API; time until each server answers the new data (up to `timeout` s)."""
        conn = apiload.Conn(self.client)
        samples: dict[str, list[float]] = {label: [] for label in servers}
        by_kind: dict[str, dict[str, list[float]]] = {"ServiceImport": {l: [] for l in servers},
                                                      "EndpointSlice": {l: [] for l in servers}}
        timeouts: dict[str, int] = {label: 0 for label in servers}
        hl = spec.headless[0]
        base_slice = dataset.headless_slice_objs(hl)[0]
        socks = {label: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for label in servers}
        try:
            for c in range(changes):
                marker = _change_ip(tag, c)
                if c % 2 == 0 and spec.imports:
                    kind = "ServiceImport"
                    i = (c * 7919) % spec.imports
                    name, ns = f"svc-{i}", spec.namespace(i)
                    qname = dataset.svc_name(spec, i)

                    def write() -> None:
                        conn.merge_patch(MCS_API, "ServiceImport", ns, name,
                                         {"spec": {"ips": [marker], "ipFamilies": ["IPv4"]}})
                else:
                    kind = "EndpointSlice"
                    qname = dataset.headless_name(hl)
                    eps = list(base_slice["endpoints"]) + [
                        {"addresses": [marker], "hostname": f"extra-{c % 97}", "conditions": {"ready": True}}]

                    def write() -> None:
                        conn.merge_patch(ES_API, "EndpointSlice", dataset.HEADLESS_NS, base_slice["metadata"]["name"],
                                         {"endpoints": eps})
                wire = dns.message.make_query(qname, "A", use_edns=0, payload=4096).to_wire()
                t0 = time.perf_counter()
                write()
                seen = _poll(socks, {l: s.port for l, s in servers.items()}, wire, marker, t0, timeout=timeout)
                for label, t in seen.items():
                    if t is None:
                        timeouts[label] += 1
                    else:
                        samples[label].append(t)
                        by_kind[kind][label].append(t)
        finally:
            conn.close()
            for s in socks.values():
                s.close()
        out: dict[str, Any] = {"changes": changes}
        for label in servers:
            v = samples[label]
            out[label] = {
                "p50_ms": _ms(load.percentile(v, 0.5)), "p99_ms": _ms(load.percentile(v, 0.99)),
                "max_ms": _ms(max(v) if v else None), "mean_ms": _ms(statistics.fmean(v) if v else None),
                "timeouts": timeouts[label],
                "by_kind": {k: {"p50_ms": _ms(load.percentile(d[label], 0.5)), "p99_ms": _ms(load.percentile(d[label], 0.99)),
                                "n": len(d[label])} for k, d in by_kind.items()},
            }
        return out

    def run_propagation(self) -> None:
        o = self.opts
        spec = Spec(imports=o.imports, headless=(10, 100))
        self.load_api(spec)
        servers = {}
        try:
            for label, make in (("mcsdns-api", lambda: Mcsdns("mcsdns-api", self.work, None, kubeconfig=self.testbed.kubeconfig_path)),
                                ("coredns", lambda: CoreDns("coredns", self.work, None, binary=self.coredns_bin,
                                                            kubeconfig=self.testbed.kubeconfig_path))):
                s = make()
                s.start(queries.probe_name(spec), timeout=300)
                servers[label] = s
            time.sleep(1.0)
            log(f"propagation: {o.changes} changes")
            self.results["propagation"] = self.propagation(spec, servers, o.changes, tag="prop")
            for label in servers:
                r = self.results["propagation"][label]
                log(f"propagation {label}: p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms timeouts {r['timeouts']}")
        except Exception as exc:  # noqa: BLE001
            self.error("propagation", exc, *servers.values())
        finally:
            for s in servers.values():
                s.stop()

    # -- scale ------------------------------------------------------------ #

    def scale(self) -> None:
        o = self.opts
        for size in o.sizes:
            spec = Spec(imports=size, headless=tuple(o.scale_headless))
            row: dict[str, Any] = {"imports": size, "endpoints_per_import": spec.endpoints,
                                   "headless": list(spec.headless)}
            self.results["scale"].append(row)
            log(f"scale {size}: loading the API server")
            t = time.monotonic()
            self.load_api(spec)
            row["api_load_seconds"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            files = self.files_for(spec, f"scale-{size}", zone=False)
            log(f"scale {size}: manifests written in {time.monotonic() - t:.1f}s")
            qdir = self.work / f"scale-{size}"
            qfile = queries.write("clusterset_a", spec, qdir)
            probe = queries.probe_name(spec)
            servers: dict[str, Server] = {}
            try:
                for label, make in (
                    ("mcsdns-api", lambda: Mcsdns("mcsdns-api", self.work, o.server_cpu, kubeconfig=self.testbed.kubeconfig_path)),
                    ("coredns", lambda: CoreDns("coredns", self.work, o.server_cpu, binary=self.coredns_bin,
                                                kubeconfig=self.testbed.kubeconfig_path)),
                    ("mcsdns", lambda: Mcsdns("mcsdns", self.work, o.server_cpu, manifests=files["manifests"])),
                ):
                    s = make()
                    ready = s.start(probe, timeout=SYNC_TIMEOUT)
                    servers[label] = s
                    s.settle()  # (as above)
                    time.sleep(0.5 if o.smoke else 3.0)
                    r = row.setdefault(label, {})
                    r["sync_seconds"] = round(ready, 2)
                    r["rss_mb"] = round(s.rss_mb(), 1)
                    log(f"scale {size} {label}: synced in {ready:.2f}s, RSS {r['rss_mb']} MB")
                # Query rate, one server at a time (the others idle).
                for label, s in servers.items():
                    wait_quiet(s.cpu, o.quiet_wait)
                    with own_cpu(o.load_cpu):
                        cap = load.measure(s.port, qfile, meter=s.cpu_seconds, cpu=o.load_cpu,
                                           probe_seconds=o.probe_seconds, step_seconds=o.scale_step_seconds,
                                           steps=o.scale_steps, latency_seconds=o.scale_step_seconds,
                                           timeout=o.timeout, server_cpus=s.cpu, delay=s.run_delay,
                                           edns=o.edns == "all")  # the A mix: as a pod's resolver asks
                    row[label]["max_qps"] = round(cap.max_qps)
                    row[label]["limit"] = cap.limit
                    row[label]["interference"] = cap.interference
                    row[label]["load_interference"] = cap.load_interference
                    row[label]["run_delay"] = cap.run_delay
                    row[label]["p99_us"] = _us_num(cap.p99)
                    row[label]["cpu_per_100k"] = cap.cpu_per_100k
                    log(f"scale {size} {label}: {cap.max_qps:.0f} qps")
                    row[label]["rss_mb_after_load"] = round(s.rss_mb(), 1)
                manifests = servers.pop("mcsdns")
                manifests.stop()
                api_servers = servers
                # One changed service at a time.
                prop = self.propagation(spec, api_servers, o.scale_changes, tag=f"scale{size}")
                for label in api_servers:
                    row[label]["change_p50_ms"] = prop[label]["p50_ms"]
                    row[label]["change_max_ms"] = prop[label]["max_ms"]
                # Forced relist: expire every resourceVersion and restart the API server.
                for label, s in api_servers.items():
                    row[label]["steady_rss_mb"] = round(s.rss_mb(), 1)
                    procstat.reset_hwm(s.pids())
                log(f"scale {size}: forcing a relist (etcd compaction + apiserver restart)")
                t = time.monotonic()
                self.testbed.compact_etcd(restart_apiserver=True, timeout=RELIST_TIMEOUT)
                self.client = self.testbed.api
                row["apiserver_restart_seconds"] = round(time.monotonic() - t, 1)
                log(f"scale {size}: apiserver back after {row['apiserver_restart_seconds']}s; waiting for each server's relist")
                # Until both have relisted (the peak is read after), however long the relist takes at this size.
                after = self.propagation(spec, api_servers, 1, tag=f"relist{size}", timeout=RELIST_TIMEOUT)
                for label, s in api_servers.items():
                    row[label]["relist_peak_mb"] = round(procstat.hwm_mb(s.pids()), 1)
                    row[label]["relist_peak_ratio"] = round(row[label]["relist_peak_mb"] / max(row[label]["steady_rss_mb"], 1e-9), 3)
                    row[label]["relist_seconds_incl_restart"] = round(time.monotonic() - t, 1)
                    row[label]["after_relist_change_ms"] = after[label]["p50_ms"]
                    log(f"scale {size} {label}: relist peak {row[label]['relist_peak_mb']} MB "
                        f"({row[label]['relist_peak_ratio']}x steady)")
            except Exception as exc:  # noqa: BLE001
                self.error(f"scale {size}", exc, *servers.values())
            finally:
                for s in servers.values():
                    s.stop()

    # -- driver ----------------------------------------------------------- #

    def wrong_answers(self, label: str, mix: str, tally: Tally) -> None:
        """A wrong reply under load fails the run (exit 1): it is listed under Errors in results.md."""
        message = (f"{tally.wrong} wrong answers of {tally.checked} checked under load: "
                   + "; ".join(tally.examples))
        self.results["errors"].append({"where": f"answers {label} {mix}", "error": message, "trace": "", "logs": {}})
        log(f"WRONG ANSWERS from {label} on {mix}: {message}")

    def error(self, where: str, exc: BaseException, *servers: Server) -> None:
        tails = {s.label: s.tail() for s in servers if s is not None}
        self.results["errors"].append({"where": where, "error": f"{type(exc).__name__}: {exc}",
                                       "trace": traceback.format_exc(limit=5), "logs": tails})
        log(f"ERROR in {where}: {exc}")

    def run(self) -> dict[str, Any]:
        o = self.opts
        started = time.monotonic()
        try:
            if self.needs_api():
                self.start_testbed()
            self.results["environment"] = environment(o, self.coredns_bin)
            if not o.skip_throughput:
                self.throughput()
            if not o.skip_propagation:
                self.run_propagation()
            if not o.skip_scale:
                self.scale()
        finally:
            if self.testbed is not None:
                self.testbed.stop()
            if not o.keep_workdir:
                shutil.rmtree(self.work, ignore_errors=True)
        self.results["environment"]["loadavg_at_end"] = round(os.getloadavg()[0], 2)
        self.results["environment"]["seconds"] = round(time.monotonic() - started, 1)
        return self.results


def _noise(cap: load.Capacity) -> float:
    """Foreign CPU on the server's or dnsperf's core. (run_delay is kept as information only: for a
    multi-threaded server pinned to one core it also counts its own threads waiting for each other.)"""
    return max(cap.interference or 0, cap.load_interference or 0)


class own_cpu:
    """Pin this process to `cpus` inside the block (restored after); no-op without a CPU list."""

    def __init__(self, cpus: str | None) -> None:
        self.cpus = set(procstat.cpu_list(cpus)) if cpus else None
        self.saved: set[int] | None = None

    def __enter__(self) -> None:
        if self.cpus and hasattr(os, "sched_setaffinity"):
            self.saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            os.sched_setaffinity(0, self.saved)


def _change_ip(tag: str, c: int) -> str:
    base = 200 + (sum(tag.encode()) % 50)
    return f"10.{base}.{(c // 250) % 256}.{c % 250 + 1}"


def _poll(socks: dict[str, socket.socket], ports: dict[str, int], wire: bytes, marker: str, t0: float,
          timeout: float) -> dict[str, float | None]:
    """Query each server until its answer holds `marker`; seconds since t0 per server (None: timed out)."""
    seen: dict[str, float | None] = {label: None for label in ports}
    pending = set(ports)
    needle = socket.inet_aton(marker)
    deadline = t0 + timeout
    while pending and time.perf_counter() < deadline:
        for label in list(pending):
            socks[label].sendto(wire, ("127.0.0.1", ports[label]))
        waiting = set(pending)
        until = time.perf_counter() + 0.05
        while waiting and time.perf_counter() < until:
            ready, _, _ = select.select([socks[l] for l in waiting], [], [], max(0.0, until - time.perf_counter()))
            for s in ready:
                label = next(l for l in waiting if socks[l] is s)
                data = s.recv(65535)
                waiting.discard(label)
                if needle in data[12:]:
                    try:
                        msg = dns.message.from_wire(data)
                    except Exception:  # noqa: BLE001
                        continue
                    if msg.rcode() == dns.rcode.NOERROR and any(
                            rd.to_text() == marker for rrset in msg.answer for rd in rrset):
                        seen[label] = time.perf_counter() - t0
                        pending.discard(label)
        if pending:
            time.sleep(0.0005)
    return seen


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 2)


def _us(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1e6:.0f}us"


def _us_num(v: float | None) -> float | None:
    return None if v is None else round(v * 1e6, 1)


def run(opts: Options) -> dict[str, Any]:
    return Suite(opts).run()


def merge(old: dict[str, Any], new: dict[str, Any], skipped: dict[str, bool]) -> dict[str, Any]:
    """`new` completed from `old` (an earlier results.json), so that re-measuring part of a run keeps
    the artifact of everything else, and of what was replaced.

    Sections this run skipped are taken whole from `old`. Throughput is merged cell by cell
    (server x mix): a cell measured now replaces the old one, which goes into the new cell's
    `replaced` list (with its run's date and command); a cell not measured now is kept as it was.
    Scale is merged step by step (imports): a size measured now replaces the old step, which
    it keeps under `replaced`; a size not measured now is kept, marked with the run that measured it.
    """
    merged = []
    old_env = old.get("environment", {})
    old_run = {k: old_env.get(k) for k in ("date", "command", "commit")}
    # Where each section of `old` was measured: a section `old` itself took from an earlier run names that run.
    earlier = dict((old_env.get("merged") or {}).get("origins") or {})
    origins: dict[str, dict] = {}
    for section in ("throughput", "scale", "propagation"):
        if skipped.get(section) and old.get(section):
            new[section] = old[section]
            merged.append(section)
            origins[section] = earlier.get(section, old_run)
    if "throughput" in merged:
        for cells in new["throughput"].values():
            for cell in cells.values():
                if isinstance(cell, dict):
                    cell.setdefault("run", origins["throughput"])
    if "scale" not in merged and old.get("scale") and new.get("scale"):
        steps = {step["imports"]: step for step in new["scale"]}
        kept_sizes = []
        for step in old["scale"]:
            step.setdefault("run", earlier.get("scale", old_run))
            mine = steps.get(step["imports"])
            if mine is None:
                steps[step["imports"]] = step
                kept_sizes.append(step["imports"])
            else:
                mine["replaced"] = [{k: v for k, v in step.items() if k != "replaced"}] + step.get("replaced", [])[:2]
        new["scale"] = [steps[n] for n in sorted(steps)]
        if kept_sizes:
            merged.append("scale (" + ", ".join(f"{n:,}" for n in kept_sizes) + " imports)")
    if "throughput" in merged:
        new["servers"] = old.get("servers", {})
    elif old.get("throughput"):
        kept = 0
        for mix, cells in old["throughput"].items():
            for label, cell in cells.items():
                cell.setdefault("run", earlier.get("throughput", old_run))
                mine = new["throughput"].setdefault(mix, {})
                if label in mine:
                    replaced = cell.pop("replaced", [])
                    mine[label]["replaced"] = [{**cell.get("run", {}), **_summary(cell)}] + replaced
                else:
                    mine[label] = cell
                    kept += 1
        for label, info in old.get("servers", {}).items():
            new.setdefault("servers", {}).setdefault(label, info)
        if kept:
            merged.append(f"throughput ({kept} cells)")
    new["environment"]["merged"] = {"from": old_run["date"], "sections": merged, "command": old_run["command"],
                                    "origins": origins}
    return new


def _summary(cell: dict[str, Any]) -> dict[str, Any]:
    keys = ("max_qps", "cpu_per_100k", "p99", "p999", "interference", "load_interference", "limit", "error")
    return {k: cell.get(k) for k in keys}


def save(results: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    path.write_text(json.dumps(results, indent=1, default=str))
    return path
