"""Query latency while the API churns: mcsdns and CoreDNS on the same kube-apiserver (issue #50).

The test bed (etcd + kube-apiserver) holds --imports ClusterSetIP imports (dataset.Spec, 10
endpoints each) and --headless headless imports in namespace `churn`, each with one EndpointSlice
of --endpoints endpoints. Round after round, alternating which goes first, each server is started
on it alone (pinned to --cpu), synced, and asked a fixed rate (--rate) of ClusterSetIP A questions
by dnsperf (pinned to --load-cpu, every query's latency kept): first for --seconds with the API
quiet, then for --seconds while the churner flips one endpoint's readiness at a time in the
headless services' slices, round robin, as fast as the API server takes the writes (--churners
processes, each writing its share of the slices, one keep-alive connection each). Every write
stamps the slice's `endpoints.kubernetes.io/last-change-trigger-time` annotation (as the
EndpointSlice controller does), which both servers' programming-latency histograms measure from.

Per server and phase: mean, sd, p99 and max latency in ms, queries lost, and under churn the
updates applied: the churner's writes, the slice changes each server observed (mcsdns: the
count of mcsdns_programming_duration_seconds{kind="endpointslice"}, one per effective write;
CoreDNS: coredns_kubernetes_dns_programming_duration_seconds_count, when it records one), mcsdns's
table generations (compiles swapped in), the p99 of the programming latency from the trigger time
to served (histogram buckets: an upper bound), and whether each server's final answers for every
headless name are the API's final ready addresses. mcsdns runs once per --workers value (the
chart's default is the flag's, 1), and once per --source (another checkout's mcsdns, for an A/B
in one run).

--reference floor,knot adds servers that do no churn work at all, to tell what the churn costs a
query on this machine whatever the server does: benchmarks/floor.py (mcsdns's resolver in the
barest Python loop) and Knot DNS, each answering the same ClusterSetIP names from the same data
set written out (manifests, a zone file) on the same pinned core, under the same churn. They watch
nothing, so they have no updates to count and no final answers to check; their latency under
churn over CoreDNS's is what the machine leaves any server.

usage: python -m benchmarks.churn [--workers 1] [--seconds 20] [--rate 10000] [--rounds 1]
                                  [--source LABEL=DIR] [--reference floor,knot] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rdatatype

from . import apiload, dataset, load, provenance, queries
from .dataset import CLUSTER, Spec
from .servers import REPO, CoreDns, Floor, Knot, Mcsdns, Server
from .suite import log, start_testbed
from testsupport.mcsdnsserver import samples, total
from testsupport.objects import ES_API, endpoint, endpoint_slice, namespace, service_import
from testsupport.testbed import KubeClient, Testbed

RESULTS = REPO / "benchmarks" / "results"
NAMESPACE = "churn"
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
WARMUP = 0.5  # seconds of each dnsperf run whose latencies are dropped (dnsperf's own start)
DRAIN = 3.0  # seconds after the churn stops before the final answers are checked
REFERENCES = ("floor", "knot")  # --reference: servers that watch nothing (see the module's docstring)


# =========================================================================== objects


def headless_name(k: int) -> str:
    return f"hl-{k}.{NAMESPACE}.svc.clusterset.local"


def address(k: int, j: int) -> str:
    return f"10.70.{k}.{j + 1}"


def slice_obj(k: int, ready: list[bool]) -> dict:
    return endpoint_slice(NAMESPACE, f"hl-{k}-{CLUSTER}", f"hl-{k}", CLUSTER,
                          [endpoint([address(k, j)], f"pod-{j}", ready=r) for j, r in enumerate(ready)])


def churn_objects(headless: int, endpoints: int) -> list[dict]:
    out: list[dict] = [namespace(NAMESPACE)]
    for k in range(headless):
        out.append(service_import(NAMESPACE, f"hl-{k}", headless=True, families=["IPv4"]))
        out.append(slice_obj(k, [True] * endpoints))
    return out


# =========================================================================== the churner


def now_stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def churner(index: int, procs: int, kubeconfig: str, headless: int, endpoints: int, go: Any, stop: Any,
            writes: Any) -> None:
    """One churner process: flip readiness in slices index, index+procs, ... in turn until `stop`."""
    conn = apiload.Conn(KubeClient.from_kubeconfig(Path(kubeconfig)))
    mine = list(range(index, headless, procs))
    ready = {k: [True] * endpoints for k in mine}
    flip = 0
    go.wait()
    try:
        while not stop.is_set():
            for k in mine:
                j = flip % endpoints
                ready[k][j] = not ready[k][j]
                patch = {"metadata": {"annotations": {TRIGGER: now_stamp()}},
                         "endpoints": [endpoint([address(k, i)], f"pod-{i}", ready=r) for i, r in enumerate(ready[k])]}
                conn.request("PATCH", f"/apis/{ES_API}/namespaces/{NAMESPACE}/endpointslices/hl-{k}-{CLUSTER}",
                             patch, content_type="application/merge-patch+json")
                with writes.get_lock():
                    writes.value += 1
                if stop.is_set():
                    break
            flip += 1
    finally:
        conn.close()


class Churn:
    """--churners processes writing as fast as the API server takes it, from `start` to `stop`."""

    def __init__(self, kubeconfig: Path, headless: int, endpoints: int, procs: int) -> None:
        ctx = mp.get_context("fork")
        self.go, self.halt = ctx.Event(), ctx.Event()
        self.writes = ctx.Value("q", 0)
        self.procs = [ctx.Process(target=churner, daemon=True,
                                  args=(i, procs, str(kubeconfig), headless, endpoints, self.go, self.halt, self.writes))
                      for i in range(procs)]
        for p in self.procs:
            p.start()
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self.go.set()

    def stop(self) -> tuple[int, float]:
        """(writes, seconds) of the churn."""
        self.halt.set()
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()
        return self.writes.value, time.monotonic() - self.started


# =========================================================================== measuring


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def p99_between(before: str, after: str, name: str, **labels: str) -> float | None:
    """The 0.99 quantile's bucket bound (seconds) of a histogram's observations between two scrapes
    (its samples whose labels include `labels`)."""
    def buckets(text: str) -> dict[float, float]:
        out: dict[float, float] = {}
        for got, value in samples(text, name + "_bucket", **labels):
            le = got["le"]
            bound = math.inf if le == "+Inf" else float(le)
            out[bound] = out.get(bound, 0.0) + value
        return out

    b0, b1 = buckets(before), buckets(after)
    delta = {le: b1[le] - b0.get(le, 0.0) for le in b1}
    count = delta.get(math.inf, 0.0)
    if count <= 0:
        return None
    for le in sorted(delta):
        if delta[le] >= 0.99 * count:
            return le
    return None


def latency(run: load.Run, rate: float) -> dict[str, Any]:
    values = [v * 1000 for v in (run.latencies or [])[int(rate * WARMUP):]]
    if not values:
        return {"queries": run.sent, "answered": 0, "lost": run.lost, "mean_ms": None, "note": run.note}
    ordered = sorted(values)
    return {
        "queries": run.sent, "answered": run.completed, "lost": run.lost, "qps": round(run.qps),
        "mean_ms": round(statistics.fmean(values), 3), "sd_ms": round(statistics.pstdev(values), 3),
        "p50_ms": round(ordered[len(ordered) // 2], 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)], 3),
        "max_ms": round(ordered[-1], 3), "rcodes": run.rcodes,
    }


def final_state_ok(port: int, client: KubeClient, headless: int) -> int:
    """How many headless names the server answers with exactly the API's ready addresses now."""
    good = 0
    for k in range(headless):
        sl = client.get("discovery.k8s.io/v1", "EndpointSlice", NAMESPACE, f"hl-{k}-{CLUSTER}")
        want = {ep["addresses"][0] for ep in sl["endpoints"] if (ep.get("conditions") or {}).get("ready", True)}
        try:
            reply = dns.query.tcp(dns.message.make_query(headless_name(k), "A"), "127.0.0.1", port=port, timeout=2)
        except Exception:  # noqa: BLE001 - no answer counts as wrong
            continue
        got = {rd.address for rrset in reply.answer if rrset.rdtype == dns.rdatatype.A for rd in rrset}
        good += got == want
    return good


def reset_slices(client: KubeClient, headless: int, endpoints: int) -> None:
    """Every endpoint ready again, so each server starts from the same state."""
    conn = apiload.Conn(client)
    try:
        for k in range(headless):
            conn.request("PATCH", f"/apis/{ES_API}/namespaces/{NAMESPACE}/endpointslices/hl-{k}-{CLUSTER}",
                         {"endpoints": slice_obj(k, [True] * endpoints)["endpoints"]},
                         content_type="application/merge-patch+json")
    finally:
        conn.close()


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="mcsdns-churn-"))
        self.spec = Spec(imports=args.imports, headless=())
        self.testbed: Testbed | None = None
        self.coredns_bin: Path | None = None
        self.files: dict[str, Path] = {}  # the data set written out for the --reference servers

    def start(self) -> None:
        self.testbed, self.coredns_bin = start_testbed()
        a = self.args
        objs = [*dataset_objects(self.spec), *churn_objects(a.headless, a.endpoints)]
        count, seconds = apiload.create_all(self.testbed.api, objs)
        log(f"API: created {count} objects in {seconds:.1f}s")
        self.qfile = queries.write(self.args.mix, self.spec, self.work)
        if "floor" in a.reference:
            self.files["manifests"] = dataset.write_manifests(self.spec, self.work / "objects.json")
        if "knot" in a.reference:
            self.files["zone"] = dataset.write_zone(self.spec, self.work / "clusterset.local.zone")

    def server(self, label: str) -> Server:
        assert self.testbed is not None and self.coredns_bin is not None
        kubeconfig = self.testbed.kubeconfig_path
        cpu = self.args.cpu or None
        if is_coredns(label):  # "coredns", or "coredns-cacheN": with `cache N` (--coredns-cache)
            cache = int(label.partition("-cache")[2] or 0)
            return CoreDns(label, self.work, cpu, binary=self.coredns_bin, kubeconfig=kubeconfig, cache=cache)
        if label == "floor":
            return Floor(label, self.work, cpu, manifests=self.files["manifests"])
        if label == "knot":
            return Knot(label, self.work, cpu, zonefile=self.files["zone"])
        name, _, rest = label.partition("-w")
        workers = int(rest)
        source = None if name == "mcsdns" else self.sources[name]
        # several workers: the supervisor and its workers share the pinned CPUs
        return Mcsdns(label, self.work, cpu if workers == 1 else (self.args.cpus_workers or cpu),
                      kubeconfig=kubeconfig, workers=workers, source=source)

    @property
    def sources(self) -> dict[str, Path]:
        return dict((s.split("=", 1)[0], Path(s.split("=", 1)[1]).resolve()) for s in self.args.source)

    def labels(self) -> list[str]:
        names = ["mcsdns", *self.sources]
        return ([f"{n}-w{w}" for n in names for w in self.args.workers] + ["coredns"]
                + [f"coredns-cache{c}" for c in self.args.coredns_cache] + list(self.args.reference))

    def dnsperf(self) -> load.Run:
        a = self.args
        return load.dnsperf(self.port, self.qfile, seconds=a.seconds + WARMUP, rate=a.rate, outstanding=1000,
                            verbose=True, cpu=a.load_cpu or None, timeout=1.0, edns=False)

    def one(self, label: str) -> dict[str, Any]:
        a = self.args
        assert self.testbed is not None
        reset_slices(self.testbed.api, a.headless, a.endpoints)
        server = self.server(label)
        reference = label in REFERENCES  # watches nothing: no metrics, no final answers to check
        metrics_port = (server.metrics_port if isinstance(server, CoreDns)  # type: ignore[attr-defined]
                        else None if reference else server.http_port)  # type: ignore[attr-defined]
        churn = Churn(self.testbed.kubeconfig_path, a.headless, a.endpoints, a.churners)
        try:
            server.start(queries.probe_name(self.spec), timeout=600)
            server.settle(timeout=60)
            self.port = server.port
            quiet = latency(self.dnsperf(), a.rate)
            before = scrape(metrics_port) if metrics_port else ""
            churn.start()
            time.sleep(1.0)  # the churn under way before the queries start
            busy = self.dnsperf()
            writes, seconds = churn.stop()
            time.sleep(DRAIN)
            after = scrape(metrics_port) if metrics_port else ""
            correct = None if reference else final_state_ok(server.port, self.testbed.api, a.headless)
            cpu = server.cpu_seconds()
        finally:
            churn.stop()
            server.stop()
        out: dict[str, Any] = {"quiet": quiet, "churn": latency(busy, a.rate)}
        observed: dict[str, Any] = {"writes": writes, "writes_per_s": round(writes / seconds), "server_cpu_s": round(cpu, 2)}
        if reference:
            observed["watches"] = False
        else:
            observed.update({
                "final_answers_right": f"{correct}/{a.headless}",
                "programming_count": total(after, "coredns_kubernetes_dns_programming_duration_seconds_count")
                - total(before, "coredns_kubernetes_dns_programming_duration_seconds_count"),
                "programming_p99_s": p99_between(before, after, "coredns_kubernetes_dns_programming_duration_seconds"),
            })
        if isinstance(server, Mcsdns):
            observed.update({
                "slice_changes": total(after, "mcsdns_programming_duration_seconds_count", kind="endpointslice")
                - total(before, "mcsdns_programming_duration_seconds_count", kind="endpointslice"),
                "propagation_p99_s": p99_between(before, after, "mcsdns_programming_duration_seconds", kind="endpointslice"),
                "table_generations": total(after, "mcsdns_table_generation") - total(before, "mcsdns_table_generation"),
            })
        out["updates"] = observed
        c, q = out["churn"], out["quiet"]
        log(f"{label}: quiet mean {q['mean_ms']} ms sd {q.get('sd_ms')} lost {q['lost']}; churn mean {c['mean_ms']} ms "
            f"sd {c.get('sd_ms')} p99 {c.get('p99_ms')} max {c.get('max_ms')} lost {c['lost']}; {observed}")
        return out

    def run(self) -> dict[str, Any]:
        a = self.args
        labels = self.labels()
        rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
        for n in range(a.rounds):
            for label in labels if n % 2 == 0 else labels[::-1]:
                rounds[label].append(self.one(label))
        return summary(a, rounds)

    def stop(self, failed: bool) -> None:
        if self.testbed is not None:
            self.testbed.stop()
        if failed:
            log(f"servers' logs kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def references(text: str) -> list[str]:
    """--reference's value: names from REFERENCES, comma-separated."""
    names = [x for x in text.split(",") if x]
    unknown = [x for x in names if x not in REFERENCES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown reference server(s) {', '.join(unknown)}: choose from {', '.join(REFERENCES)}")
    return list(dict.fromkeys(names))


def is_coredns(label: str) -> bool:
    """Whether a server label names a CoreDNS peer ("coredns", "coredns-cache30"), not an mcsdns."""
    return label.startswith("coredns")


def dataset_objects(spec: Spec) -> list[dict]:
    return list(dataset.objects(spec))


def summary(args: argparse.Namespace, rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "date": provenance.now(), "commit": provenance.commit(), "machine": provenance.machine(),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "settings": {"rate": args.rate, "seconds": args.seconds, "imports": args.imports, "headless": args.headless,
                     "endpoints": args.endpoints, "churners": args.churners, "cpu": args.cpu,
                     "load_cpu": args.load_cpu, "rounds": args.rounds, "mix": args.mix,
                     "coredns_cache": args.coredns_cache, "reference": list(args.reference)},
        "servers": {},
    }
    for label, runs in rounds.items():
        agg: dict[str, Any] = {"rounds": runs}
        for phase in ("quiet", "churn"):
            means = [r[phase]["mean_ms"] for r in runs if r[phase]["mean_ms"] is not None]
            sds = [r[phase].get("sd_ms") for r in runs if r[phase].get("sd_ms") is not None]
            agg[phase] = {"mean_ms": round(statistics.median(means), 3) if means else None,
                          "sd_ms": round(statistics.median(sds), 3) if sds else None,
                          "p99_ms": max((r[phase].get("p99_ms") or 0) for r in runs),
                          "max_ms": max((r[phase].get("max_ms") or 0) for r in runs),
                          "lost": sum(r[phase]["lost"] for r in runs)}
        out["servers"][label] = agg
    # Each server's churn mean and sd over each CoreDNS's (vs_coredns, vs_coredns_cache30), and a watching
    # server's over the floor's (vs_floor: what its own churn work costs a query).
    bases = [(f"vs_coredns{peer[len('coredns'):].replace('-', '_')}", peer) for peer in out["servers"] if is_coredns(peer)]
    bases.append(("vs_floor", "floor"))
    for key, base in bases:
        ref = out["servers"].get(base, {}).get("churn", {})
        for label, agg in out["servers"].items():
            if is_coredns(label) or (base == "floor" and label in REFERENCES):
                continue
            if ref.get("mean_ms") and agg["churn"]["mean_ms"] is not None:
                agg[key] = {"mean": round(agg["churn"]["mean_ms"] / ref["mean_ms"], 2),
                            "sd": round(agg["churn"]["sd_ms"] / ref["sd_ms"], 2) if ref.get("sd_ms") else None}
    return out


def print_report(got: dict[str, Any]) -> None:
    print(f"{got['date']}, {got['commit']}; load average at start {got['machine']['loadavg_at_start']}, at end "
          f"{got['load_average_at_end']}; {got['settings']}")
    print(f"{'server':<16} {'phase':<6} {'mean ms':>8} {'sd ms':>7} {'p99 ms':>7} {'max ms':>8} {'lost':>5}  vs CoreDNS (and the floor)")
    for label, agg in got["servers"].items():
        for phase in ("quiet", "churn"):
            f = agg[phase]
            ratio = ", ".join(f"{key[3:]}: mean {vs['mean']}x, sd {vs['sd']}x" for key, vs in agg.items()
                              if key.startswith("vs_")) if phase == "churn" else ""
            print(f"{label:<16} {phase:<6} {f['mean_ms']!s:>8} {f['sd_ms']!s:>7} {f['p99_ms']!s:>7} {f['max_ms']!s:>8} "
                  f"{f['lost']:>5}  {ratio}")
        for r in agg["rounds"]:
            print(f"{'':<16} updates: {r['updates']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.churn", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1],
                        help="mcsdns --workers values, comma-separated (the chart's default is 1)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of queries per phase")
    parser.add_argument("--rate", type=float, default=10000.0, help="queries per second")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each server once a round")
    parser.add_argument("--imports", type=int, default=1000, help="ClusterSetIP imports (the names asked)")
    parser.add_argument("--headless", type=int, default=20, help="headless imports churned")
    parser.add_argument("--endpoints", type=int, default=100, help="endpoints in each headless import's slice")
    parser.add_argument("--mix", default="clusterset_a",
                        help="the query mix asked (clusterset_a_case: every name in random letter case, off mcsdns's packet cache)")
    parser.add_argument("--coredns-cache", type=lambda s: [int(x) for x in s.split(",")], default=[],
                        help="also run CoreDNS with `cache N` for each N, comma-separated (e.g. 30)")
    parser.add_argument("--churners", type=int, default=4, help="churner processes")
    parser.add_argument("--cpu", default="1", help="CPU the servers are pinned to ('' = any)")
    parser.add_argument("--cpus-workers", default="", help="CPUs of mcsdns with several workers ('' = --cpu)")
    parser.add_argument("--load-cpu", default="0", help="CPU dnsperf is pinned to ('' = any)")
    parser.add_argument("--source", action="append", default=[],
                        help="LABEL=DIR: also run the mcsdns of another checkout (A/B in one run)")
    parser.add_argument("--reference", type=references, default=[],
                        help="also run servers that watch nothing, comma-separated: floor (benchmarks/floor.py), knot "
                             "(Knot DNS): what the churn costs a query on this machine whatever the server does")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here (e.g. benchmarks/results/churn.json)")
    args = parser.parse_args(argv)
    bench = Bench(args)
    failed = True
    try:
        bench.start()
        got = bench.run()
        failed = False
    finally:
        bench.stop(failed)
    print_report(got)
    if args.out:
        args.out.write_text(json.dumps(got, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
