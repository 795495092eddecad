"""mcsdns in the one-node cluster for N minutes, every answer checked, while everything around it moves.

usage: python -m benchmarks.cluster_soak --minutes N [--out FILE] [--cluster-dir DIR] [--no-knot]   (as root)

Without --cluster-dir it brings testsupport/cluster.py's cluster up and down; with it, it uses the
cluster already up there and leaves it up, removing only what it deployed. mcsdns is deployed from
deploy/ with the image of this checkout (tools/testbin/build-images.sh) and CoreDNS's stub zone is
pointed at it, as docs/install.md says. In a client pod two shell loops (UDP and TCP) run dig back to
back through the cluster DNS Service over every name form: a ClusterSetIP A, a headless A, an SRV,
a per-endpoint name that comes and goes, an import that comes and goes, and a name that never
exists. With the Knot secondary (deploy/examples/knot-secondary.yaml as written: mcsdns with the
transfers component, a TSIG key, `--notify` at the Knot pods' Service name), a third loop asks Knot
through its node-local Service over UDP. They write to a file in the pod, so they survive the
kube-apiserver restart (kubectl exec streams through it); the file is read at the end.

Meanwhile this process changes one ServiceImport or EndpointSlice every few seconds through the API
(recording when each write was sent and returned) and, one per phase: rolls mcsdns out 3 times,
deletes an mcsdns pod (once gracefully, once `--grace-period=0 --force`), restarts the kube-apiserver
(SIGTERM and the same command line again), and rolls CoreDNS out once. Every answer is checked
against the API state at its time, allowing docs/install.md's propagation window (cache 5 s + 2 s).
It reports per phase the queries sent / answered / wrong / lost, every loss window with the event
before it, mcsdns's RSS and open fds sampled over the run, and restarts nobody caused; JSON to
--out, text to stdout; per path (udp, tcp: through the stub zone; knot: the secondary) as well, with
how far each path's answers lagged the API (the oldest answer's age, right ones within the window
included), the Knot follower's switches and Knot's transfers from its log. The host's conntrack
events for the cluster DNS Service (`conntrack -E`) are recorded throughout, so each query lost
through the stub zone is shown with the flows that began around it and the pod each was sent to.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from testsupport import objects
from testsupport.cluster import (
    CLIENT_NAMESPACE,
    DNS_SERVICE_IP,
    POD_CIDR,
    Cluster,
    ClusterError,
    client_sh,
    kustomize_overlay,
    point_coredns_at,
    remove_later,
    start_client,
)

from . import provenance
from .cluster_soak_check import PROPAGATION_WINDOW, Query, Timeline, age, cause, judge, parse_line, windows

REPO = Path(__file__).resolve().parent.parent
NS = "mcsdns"
DEMO = "soak"
ZONE = "clusterset.local"
POD = "soak-client"
CHURN_INTERVAL = 3.0
SAMPLE_INTERVAL = 15.0
SETTLE = 10.0
# The kubelet's default terminationGracePeriodSeconds, as it restarts a static-pod kube-apiserver:
# SIGTERM, then SIGKILL if it has not exited (kube-apiserver's graceful stop can take a minute).
APISERVER_GRACE = 30.0

WEB_IPS = ["10.245.0.10", "10.245.0.11", "10.245.0.12"]
DB_PORTS = [{"name": "pg", "port": 5432, "protocol": "TCP"}]
DB_EPS = [("db-0", "10.245.1.1"), ("db-1", "10.245.1.2")]
DB_2 = ("db-2", "10.245.1.3")
FLIP_IP = "10.245.2.1"


def fqdn(name: str) -> str:
    return f"{name}.{DEMO}.svc.{ZONE}"


# key -> (dig type, name)
QUERIES = {
    "web": ("A", fqdn("web")),
    "db": ("A", fqdn("db")),
    "srv": ("SRV", f"_pg._tcp.{fqdn('db')}"),
    "db-2": ("A", f"db-2.c1.{fqdn('db')}"),
    "flip": ("A", fqdn("flip")),
    "nope": ("A", fqdn("nope")),
}

# $1: the path's label (udp, tcp, knot); $2: dig's extra argument (+tcp, @server), or nothing.
LOOP = """\
proto=$1; flag=$2; stop=/tmp/soak-stop
while [ ! -f $stop ]; do
  for q in {queries}; do
    key=${{q%%:*}}; rest=${{q#*:}}; type=${{rest%%:*}}; name=${{rest#*:}}
    t0=$(date +%s.%N)
    out=$(dig +time=3 +tries=1 +noall +comments +answer $flag $type $name 2>&1 | tr '\\n' '|')
    t1=$(date +%s.%N)
    echo "Q $t0 $t1 $key $proto $out"
    sleep {pause}
  done
done
"""


class Soak:
    def __init__(self, cl: Cluster, work: Path, minutes: float, pause: float, knot_ip: str | None = None,
                 command: str = "python -m benchmarks.cluster_soak") -> None:
        self.cl, self.work, self.minutes, self.pause, self.command = cl, work, minutes, pause, command
        self.paths = {"udp": "", "tcp": "+tcp"} | ({"knot": f"@{knot_ip}"} if knot_ip else {})
        self.api = cl.api()
        self.timeline = Timeline()
        self.events: list[tuple[float, str]] = []
        self.phases: list[tuple[float, str]] = []
        self.samples: list[dict] = []
        self.churn_writes = 0
        self.churn_errors: list[str] = []
        self.stop = threading.Event()
        self.churn_paused = threading.Event()
        self.client_ip = ""
        self.flows: list[tuple[float, str, str]] = []  # (time, udp or tcp, the event line): read_flows
        self.web = 0
        self.db2 = False
        self.flip = True

    # -- the API state ----------------------------------------------------- #

    def _db_slice(self) -> dict:
        eps = [*DB_EPS, DB_2] if self.db2 else DB_EPS
        return objects.endpoint_slice(DEMO, "db-c1", "db", "c1",
                                      [objects.endpoint([ip], hostname=h) for h, ip in eps], ports=DB_PORTS)

    def _write(self, keys_answers: dict[str, tuple[str, frozenset[str]]], do) -> None:
        sent = time.time()
        do()
        done = time.time()
        for key, answer in keys_answers.items():
            self.timeline.set(key, sent, done, answer)
        self.churn_writes += 1

    def _db_answers(self) -> dict:
        eps = [*DB_EPS, DB_2] if self.db2 else DB_EPS
        return {"db": ("NOERROR", frozenset(ip for _, ip in eps)),
                "srv": ("NOERROR", frozenset(f"{h}.c1.{fqdn('db')}" for h, _ in eps)),
                "db-2": ("NOERROR", frozenset([DB_2[1]])) if self.db2 else ("NXDOMAIN", frozenset())}

    def seed(self) -> None:
        self.api.apply(objects.namespace(DEMO))
        self._write({"web": ("NOERROR", frozenset([WEB_IPS[0]]))},
                    lambda: self.api.apply(objects.service_import(DEMO, "web", [WEB_IPS[0]])))
        self._write({}, lambda: self.api.apply(objects.service_import(DEMO, "db", headless=True, ports=DB_PORTS)))
        self._write(self._db_answers(), lambda: self.api.apply(self._db_slice()))
        self._write({"flip": ("NOERROR", frozenset([FLIP_IP]))},
                    lambda: self.api.apply(objects.service_import(DEMO, "flip", [FLIP_IP])))
        self._write({"nope": ("NXDOMAIN", frozenset())}, lambda: None)

    def churn_step(self, step: int) -> None:
        which = step % 3
        if which == 0:
            self.web = (self.web + 1) % len(WEB_IPS)
            ip = WEB_IPS[self.web]
            self._write({"web": ("NOERROR", frozenset([ip]))},
                        lambda: self.api.apply(objects.service_import(DEMO, "web", [ip])))
        elif which == 1:
            self.db2 = not self.db2
            self._write(self._db_answers(), lambda: self.api.apply(self._db_slice()))
        else:
            self.flip = not self.flip
            if self.flip:
                self._write({"flip": ("NOERROR", frozenset([FLIP_IP]))},
                            lambda: self.api.apply(objects.service_import(DEMO, "flip", [FLIP_IP])))
            else:
                self._write({"flip": ("NXDOMAIN", frozenset())},
                            lambda: self.api.delete(objects.MCS_API, "ServiceImport", DEMO, "flip"))

    def churn(self) -> None:
        step = 0
        while not self.stop.wait(CHURN_INTERVAL):
            if self.churn_paused.is_set():
                continue
            try:
                self.churn_step(step)
            except Exception as err:  # noqa: BLE001 - a failed write is reported, the soak goes on
                # The state is unknown after a failed write: the next step of the same kind sets it.
                self.churn_errors.append(f"{time.strftime('%T')} {err}"[:200])
            step += 1

    # -- samples ----------------------------------------------------------- #

    def sample(self) -> None:
        probe = ("import os;s=open('/proc/1/status').read();"
                 "print([l.split()[1] for l in s.splitlines() if l.startswith('VmRSS')][0], len(os.listdir('/proc/1/fd')))")
        pods = self.cl.kubectl("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=mcsdns", "-o", "json",
                               check=False, timeout=20)
        if pods.returncode != 0:
            return
        for pod in json.loads(pods.stdout)["items"]:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Running":
                continue
            out = self.cl.kubectl("-n", NS, "exec", name, "--", "python", "-c", probe, check=False, timeout=20)
            if out.returncode == 0 and len(out.stdout.split()) == 2:
                rss_kb, fds = out.stdout.split()
                restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))
                self.samples.append({"t": time.time(), "pod": name, "rss_mb": round(int(rss_kb) / 1024, 1),
                                     "fds": int(fds), "restarts": restarts})

    def sampler(self) -> None:
        while not self.stop.wait(SAMPLE_INTERVAL):
            try:
                self.sample()
            except (subprocess.SubprocessError, ClusterError, ValueError):
                pass

    # -- events ------------------------------------------------------------ #

    def event(self, name: str) -> None:
        self.events.append((time.time(), name))
        print(f"{time.strftime('%T')} {name}", flush=True)

    def rollout_mcsdns(self, n: int) -> None:
        self.event(f"mcsdns rollout {n}")
        self.cl.kubectl("-n", NS, "rollout", "restart", "deployment/mcsdns")
        self.cl.kubectl("-n", NS, "rollout", "status", "deployment/mcsdns", "--timeout=240s", timeout=260)

    def delete_pod(self, force: bool) -> None:
        victim = self.cl.kubectl("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=mcsdns", "-o",
                                 "jsonpath={.items[0].metadata.name}").stdout
        extra = ["--grace-period=0", "--force"] if force else []
        self.event(f"mcsdns pod {victim} deleted" + (" (--grace-period=0 --force)" if force else ""))
        self.cl.kubectl("-n", NS, "delete", "pod", victim, *extra, "--wait=true", timeout=120)
        self.cl.kubectl("-n", NS, "rollout", "status", "deployment/mcsdns", "--timeout=240s", timeout=260)

    def restart_apiserver(self) -> None:
        """The kube-apiserver stopped and started again (Cluster.restart_apiserver), the churn paused
        until it is ready."""
        self.churn_paused.set()
        self.event("kube-apiserver restart")
        if self.cl.restart_apiserver(APISERVER_GRACE):
            self.event(f"kube-apiserver still running {APISERVER_GRACE:g} s after SIGTERM: SIGKILL")
        deadline = time.monotonic() + 120
        while not self._apiserver_ready():
            if time.monotonic() > deadline:
                raise ClusterError("kube-apiserver not ready 120 s after its restart")
            time.sleep(0.5)
        self.api = self.cl.api()
        self.churn_paused.clear()

    def _apiserver_ready(self) -> bool:
        try:
            return self.cl.kubectl("get", "--raw", "/readyz", check=False, timeout=10).stdout.strip() == "ok"
        except subprocess.TimeoutExpired:
            return False

    def rollout_coredns(self) -> None:
        self.event("CoreDNS rollout")
        self.cl.kubectl("-n", "kube-system", "rollout", "restart", "deployment/coredns")
        self.cl.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=240s", timeout=260)

    # -- the run ----------------------------------------------------------- #

    def start_conntrack(self) -> subprocess.Popen | None:
        """`conntrack -E` for flows to the cluster DNS Service, timestamped, into the work directory."""
        try:
            with open(self.work / "conntrack.log", "w") as log:  # the child keeps its own descriptor
                return subprocess.Popen(["conntrack", "-E", "-o", "timestamp", "--orig-dst", DNS_SERVICE_IP],
                                        stdout=log, stderr=subprocess.DEVNULL)
        except OSError:
            return None

    def read_flows(self) -> None:
        """The client's flow events (NEW, DESTROY) from the conntrack log, read once for every lost query."""
        path = self.work / "conntrack.log"
        if not path.exists():
            return
        for line in path.read_text(errors="replace").splitlines():
            m = re.match(r"\[(\d+\.\d+)\]\s+\[(NEW|DESTROY)\]\s+(\S+).*", line)
            if m and f"src={self.client_ip} " in line:
                self.flows.append((float(m[1]), m[3], " ".join(line.split())[:240]))

    def flows_around(self, query: Query) -> list[str]:
        """The conntrack events of new flows to the DNS Service in the half second after a lost query was
        sent: where the client's packets were DNATed (the reply tuple's source is the pod)."""
        return [line for t, proto, line in self.flows
                if proto == query.proto and query.sent - 0.05 <= t <= query.sent + 0.5]

    def start_loops(self) -> None:
        queries = " ".join(f"{key}:{t}:{name}" for key, (t, name) in QUERIES.items())
        script = LOOP.format(queries=queries, pause=self.pause)
        self.cl.kubectl("-n", CLIENT_NAMESPACE, "exec", "-i", POD, "--", "sh", "-c",
                        "rm -f /tmp/soak-stop; cat > /tmp/soak-loop.sh", input=script)
        for proto, flag in self.paths.items():
            client_sh(self.cl, f"nohup sh /tmp/soak-loop.sh {proto} '{flag}' > /tmp/soak-{proto}.log 2>&1 &", pod=POD)

    def collect(self) -> list[Query]:
        client_sh(self.cl, "touch /tmp/soak-stop", pod=POD)
        time.sleep(5)
        out = []
        for proto in self.paths:
            text = client_sh(self.cl, f"cat /tmp/soak-{proto}.log", pod=POD, timeout=120).stdout
            (self.work / f"soak-{proto}.log").write_text(text)
            out += [q for q in map(parse_line, text.splitlines()) if q is not None]
        return out

    def run(self) -> dict:
        plan = [("baseline", lambda: None),
                ("mcsdns rollout 1", lambda: self.rollout_mcsdns(1)),
                ("mcsdns pod delete", lambda: self.delete_pod(False)),
                ("mcsdns rollout 2", lambda: self.rollout_mcsdns(2)),
                ("mcsdns pod delete --force", lambda: self.delete_pod(True)),
                ("kube-apiserver restart", self.restart_apiserver),
                ("mcsdns rollout 3", lambda: self.rollout_mcsdns(3)),
                ("CoreDNS rollout", self.rollout_coredns),
                ("tail", lambda: None)]
        spacing = self.minutes * 60 / len(plan)
        self.seed()
        time.sleep(PROPAGATION_WINDOW)
        self.client_ip = self.cl.kubectl("-n", CLIENT_NAMESPACE, "get", "pod", POD, "-o",
                                         "jsonpath={.status.podIP}").stdout
        tracking = self.start_conntrack()
        try:
            self.start_loops()
            threads = [threading.Thread(target=self.churn, daemon=True),
                       threading.Thread(target=self.sampler, daemon=True)]
            for t in threads:
                t.start()
            started = time.time()
            self.sample()
            for name, action in plan:
                phase_start = time.time()
                self.phases.append((phase_start, name))
                try:
                    action()
                except (ClusterError, subprocess.SubprocessError, StopIteration) as err:
                    self.event(f"{name} failed: {err}"[:300])
                time.sleep(max(SETTLE, spacing - (time.time() - phase_start)))
            self.sample()
        finally:
            self.stop.set()
            if tracking is not None:  # stopped however the run ends: a soak leaves nothing running
                tracking.terminate()
                tracking.wait(10)
        for t in threads:
            t.join(timeout=60)
        ended = time.time()
        self.read_flows()
        queries = self.collect()
        return self.report(queries, started, ended)

    def report(self, queries: list[Query], started: float, ended: float) -> dict:
        judged = [(q, judge(q, self.timeline)) for q in queries if started <= q.sent <= ended]
        phases = []
        bounds = [t for t, _ in self.phases] + [ended]
        for i, (t, name) in enumerate(self.phases):
            inside = [(q, v) for q, v in judged if t <= q.sent < bounds[i + 1]]
            phases.append({"phase": name, "seconds": round(bounds[i + 1] - t, 1), "sent": len(inside),
                           "answered": sum(v != "lost" for _, v in inside),
                           "wrong": sum(v == "wrong" for _, v in inside),
                           "lost": sum(v == "lost" for _, v in inside),
                           "by_path": {path: [sum(q.proto == path for q, _ in inside),
                                              sum(q.proto == path and v == "wrong" for q, v in inside),
                                              sum(q.proto == path and v == "lost" for q, v in inside)]
                                       for path in self.paths}})
        wins = []
        for w in windows(judged):
            c = cause(w, self.events)
            wins.append({
                "start": dt.datetime.fromtimestamp(w.start, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3],
                "seconds": round(w.end - w.start, 2),
                "lost": sum(v == "lost" for _, v in w.failures), "wrong": sum(v == "wrong" for _, v in w.failures),
                "answered_right_inside": w.answered_inside,
                "after_event": c[0] if c else None, "seconds_after_event": round(c[1], 1) if c else None,
                "by_proto": sorted({q.proto for q, _ in w.failures}), "by_name": sorted({q.key for q, _ in w.failures}),
                "wrong_stale_by_max_s": max((round(self.timeline.stale_by(q.key, q.sent, q.received, q.answer) or -1, 2)
                                             for q, v in w.failures if v == "wrong" and q.answer), default=None),
                "wrong_never_held": sum(1 for q, v in w.failures if v == "wrong" and q.answer
                                        and self.timeline.stale_by(q.key, q.sent, q.received, q.answer) is None),
                "examples": [f"{q.proto} {q.key} {v}: {q.raw[:160]}" for q, v in w.failures[:3]],
                "lost_flows": {f"{q.proto} {q.key} {q.sent:.3f}": self.flows_around(q)
                               for q, v in w.failures if v == "lost"},
                "wrong_answers": [{"sent": round(q.sent, 3), "received": round(q.received, 3), "proto": q.proto, "name": q.key,
                           "answer": [q.answer[0], sorted(q.answer[1])],
                           "stale_by_s": round(self.timeline.stale_by(q.key, q.sent, q.received, q.answer) or -1, 2)}
                          for q, v in w.failures if v == "wrong" and q.answer],
            })
        by_pod: dict[str, list[dict]] = {}
        for s in self.samples:
            by_pod.setdefault(s["pod"], []).append(s)
        memory = [{"pod": pod, "samples": len(ss), "rss_mb_first": ss[0]["rss_mb"], "rss_mb_last": ss[-1]["rss_mb"],
                   "rss_mb_max": max(s["rss_mb"] for s in ss), "fds_first": ss[0]["fds"], "fds_last": ss[-1]["fds"],
                   "fds_max": max(s["fds"] for s in ss), "seconds": round(ss[-1]["t"] - ss[0]["t"])}
                  for pod, ss in by_pod.items()]
        return {
            "date": provenance.now(), "commit": provenance.commit(), "machine": provenance.machine(),
            "command": self.command,
            "minutes": self.minutes, "seconds": round(ended - started, 1),
            "propagation_window_s": PROPAGATION_WINDOW, "dig_timeout_s": 3,
            "sent": len(judged), "answered": sum(v != "lost" for _, v in judged),
            "wrong": sum(v == "wrong" for _, v in judged), "lost": sum(v == "lost" for _, v in judged),
            "rate_qps": round(len(judged) / max(ended - started, 1), 1),
            "churn_writes": self.churn_writes, "churn_errors": self.churn_errors,
            "phases": phases, "loss_windows": wins,
            "events": [{"t": dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M:%S"), "event": e}
                       for t, e in self.events],
            "api_writes": {key: [[round(a, 3), round(b, 3), ans[0], sorted(ans[1])] for a, b, ans in vs]
                           for key, vs in self.timeline.versions.items()},
            "mcsdns_memory": memory, "restarts_not_caused": self.restarts(),
            "by_path": {path: {"sent": sum(q.proto == path for q, _ in judged),
                               "wrong": sum(q.proto == path and v == "wrong" for q, v in judged),
                               "lost": sum(q.proto == path and v == "lost" for q, v in judged),
                               **self.lag(path, [q for q, _ in judged if q.proto == path])} for path in self.paths},
            "knot": self.knot_log() if "knot" in self.paths else None,
        }

    def lag(self, path: str, queries: list[Query]) -> dict:
        """How far a path's answers lagged the API: the oldest answer's age (cluster_soak_check.age: right
        answers within the propagation window included), when, and the event before it."""
        aged = [(a, q) for q in queries if (a := age(q, self.timeline)) is not None]
        if not aged:
            return {"stale_max_s": None}
        oldest, q = max(aged, key=lambda aq: aq[0])
        before = [(t, name) for t, name in self.events if t <= q.sent]
        return {"stale_max_s": round(oldest, 2),
                "stale_max_at": dt.datetime.fromtimestamp(q.sent, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3],
                "stale_max_name": q.key,
                "stale_max_after_event": before[-1][1] if before else None,
                "stale_max_seconds_after_event": round(q.sent - before[-1][0], 1) if before else None,
                "answers_over_2s_stale": sum(a > 2.0 for a, _ in aged)}

    def knot_log(self) -> dict:
        """Knot's transfers (knotd's log) and its follower's switches (the `primary` container's)."""
        def logs(container: str) -> str:
            return self.cl.kubectl("-n", NS, "logs", "daemonset/knot-secondary", "-c", container, "--timestamps",
                                   check=False, timeout=60).stdout
        knotd, primary = logs("knotd"), logs("primary")
        (self.work / "knotd.log").write_text(knotd)
        (self.work / "primary.log").write_text(primary)
        moved_to = re.findall(r"primary\.sh: transferred the zone from mcsdns pod (\S+)", primary)
        said = [line.split(" ", 1)[0][11:23] + " " + line.split("primary.sh: ", 1)[1]  # (time of day) what it said
                for line in primary.splitlines() if "primary.sh: " in line]
        return {"ixfr_finished": len(re.findall(r"IXFR, incoming, remote \S+ .*finished", knotd)),
                "axfr_finished": len(re.findall(r"AXFR, incoming, remote \S+ .*finished", knotd)),
                "notify_received": len(re.findall(r"notify, incoming", knotd)),
                "errors": [line[:200] for line in knotd.splitlines() if "error" in line.lower()][:20],
                "switches": [line for line in said if line.split(" ", 1)[1].startswith("transferred the zone from ")],
                # Moves whose transfer failed (the pod stopped between its probe and Knot's AXFR), each
                # followed by another choice.
                "failed_moves": [line for line in said if "did not serve the whole zone" in line],
                # A move the follower counted while Knot's log has no whole transfer from that address.
                "switched_to_without_axfr": [a for a in moved_to
                                             if f"AXFR, incoming, remote {a}@5353, finished" not in knotd],
                "follower_log": said[:50]}

    def restarts(self) -> list[dict]:
        out = []
        for ns in (NS, "kube-system", CLIENT_NAMESPACE):
            pods = json.loads(self.cl.kubectl("-n", ns, "get", "pods", "-o", "json").stdout)["items"]
            for pod in pods:
                for c in pod["status"].get("containerStatuses", []):
                    if c.get("restartCount", 0):
                        out.append({"pod": f"{ns}/{pod['metadata']['name']}", "container": c["name"],
                                    "restarts": c["restartCount"]})
        return out


KNOT_EXAMPLE = REPO / "deploy" / "examples" / "knot-secondary.yaml"


def deploy(cl: Cluster, work: Path, knot: bool) -> str | None:
    """mcsdns (with the transfers component and the Knot example's flags when `knot`), the stub zone,
    the client pod; the Knot secondary's node-local Service IP, or None."""
    build = subprocess.run([str(REPO / "tools" / "testbin" / "build-images.sh")], capture_output=True, text=True,
                           timeout=1800)
    if build.returncode != 0:
        raise ClusterError(f"tools/testbin/build-images.sh failed: {build.stderr[-500:]}")
    example = KNOT_EXAMPLE.read_text()
    if knot:
        cl.kubectl("create", "namespace", NS, check=False)
        secret = "soak-key:hmac-sha256:" + base64.b64encode(os.urandom(32)).decode()
        cl.kubectl("-n", NS, "create", "secret", "generic", "mcsdns-tsig", f"--from-literal=tsig.key={secret}")
        # The flags the example's header names, the pod CIDR filled in.
        flags = [line.strip("# ").strip().replace("<your pod CIDR>", POD_CIDR)
                 for line in example.splitlines() if line.startswith("#        --")]
        overlay = kustomize_overlay(work / "overlay", flag_lines=flags, components=("transfers",))
    else:
        overlay = kustomize_overlay(work / "overlay")
    cl.kubectl("apply", "-k", str(overlay), "--server-side")
    cl.kubectl("-n", NS, "rollout", "status", "deployment/mcsdns", "--timeout=240s", timeout=260)
    knot_ip = None
    if knot:
        cl.kubectl("apply", "-f", "-", input=example.replace("image: cznic/knot:3.3", "image: localhost/knot:dev"))
        cl.kubectl("-n", NS, "rollout", "status", "daemonset/knot-secondary", "--timeout=180s", timeout=200)
        knot_ip = cl.kubectl("-n", NS, "get", "service", "knot-secondary-local", "-o",
                             "jsonpath={.spec.clusterIP}").stdout
    ip = cl.kubectl("-n", NS, "get", "service", "mcsdns", "-o", "jsonpath={.spec.clusterIP}").stdout
    point_coredns_at(cl, ip, work / "corefile")
    start_client(cl, name=POD)
    if knot_ip:  # the node-local Service answering (its rules may lag the pod's readiness), as a client retries
        deadline = time.monotonic() + 120
        while "status: NOERROR" not in client_sh(cl, f"dig +time=2 +tries=1 @{knot_ip} SOA {ZONE}", pod=POD,
                                                 check=False).stdout:  # the zone loaded (imports come later)
            if time.monotonic() > deadline:
                raise ClusterError("the Knot secondary's Service does not answer")
            time.sleep(1)
    return knot_ip


def undeploy(cl: Cluster, work: Path) -> None:
    cl.kubectl("-n", CLIENT_NAMESPACE, "delete", "pod", POD, "--wait=false", check=False)
    cl.kubectl("delete", "namespace", DEMO, "--wait=false", check=False)
    cl.kubectl("delete", "-f", str(KNOT_EXAMPLE), "--ignore-not-found", "--wait=true", check=False, timeout=180)
    cl.kubectl("-n", NS, "delete", "secret", "mcsdns-tsig", "--ignore-not-found", check=False)
    cl.kubectl("delete", "-k", str(work / "overlay"), "--wait=true", check=False, timeout=180)
    point_coredns_at(cl, None, work / "corefile")


def text(result: dict) -> str:
    lines = [f"{result['seconds']:.0f} s, {result['sent']} queries ({result['rate_qps']} q/s), "
             f"{result['answered']} answered, {result['wrong']} wrong, {result['lost']} lost; "
             f"{result['churn_writes']} API writes ({len(result['churn_errors'])} failed)"]
    lines.append(f"{'phase':28} {'s':>6} {'sent':>6} {'answered':>8} {'wrong':>6} {'lost':>5}")
    for p in result["phases"]:
        paths = " ".join(f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in p["by_path"].items())
        lines.append(f"{p['phase']:28} {p['seconds']:6.0f} {p['sent']:6} {p['answered']:8} {p['wrong']:6} {p['lost']:5}"
                     f"  (sent/wrong/lost: {paths})")
    for w in result["loss_windows"]:
        lines.append(f"window {w['start']} {w['seconds']} s: {w['lost']} lost, {w['wrong']} wrong, "
                     f"{w['answered_right_inside']} right inside, wrong ones stale by <= {w['wrong_stale_by_max_s']} s "
                     f"({w['wrong_never_held']} never held); {w['seconds_after_event']} s after "
                     f"{w['after_event']!r}; {w['by_proto']} {w['by_name']}")
    for m in result["mcsdns_memory"]:
        lines.append(f"{m['pod']}: {m['samples']} samples over {m['seconds']} s, RSS {m['rss_mb_first']} -> "
                     f"{m['rss_mb_last']} MB (max {m['rss_mb_max']}), fds {m['fds_first']} -> {m['fds_last']}")
    for path, p in result["by_path"].items():
        if p.get("stale_max_s") is not None:
            lines.append(f"{path}: the oldest answer {p['stale_max_s']} s behind the API ({p['stale_max_name']} at "
                         f"{p['stale_max_at']}, {p['stale_max_seconds_after_event']} s after "
                         f"{p['stale_max_after_event']!r}); {p['answers_over_2s_stale']} answers over 2 s old")
    lines.append(f"restarts not caused: {result['restarts_not_caused'] or 'none'}")
    if result["knot"]:
        k = result["knot"]
        lines.append(f"knot: {k['axfr_finished']} AXFR, {k['ixfr_finished']} IXFR, {k['notify_received']} NOTIFY; "
                     f"switches {k['switches']}; failed moves {k['failed_moves']}; errors {k['errors'][:3]}")
    return "\n".join(lines)


def shown_command(argv: list[str] | None) -> str:
    """The command line for the report: paths inside the checkout relative to it, others as <path>
    (a cluster's or a test's temporary directory says nothing to a reader and names this machine)."""
    shown = []
    for arg in sys.argv[1:] if argv is None else argv:
        if os.path.isabs(arg):
            path = Path(arg).resolve()
            arg = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else "<path>"
        shown.append(arg)
    return " ".join(["python -m benchmarks.cluster_soak", *shown])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None, help="JSON report (e.g. benchmarks/results/cluster_soak.json)")
    parser.add_argument("--cluster-dir", type=Path, default=None, help="a cluster already up (left up)")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between a loop's queries")
    parser.add_argument("--no-knot", dest="knot", action="store_false", help="without the Knot secondary")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    own = args.cluster_dir is None
    directory = Path(tempfile.mkdtemp(prefix="cluster-soak-")) if own else args.cluster_dir
    cl = Cluster(directory / "cluster" if own else directory)
    work = Path(tempfile.mkdtemp(prefix="cluster-soak-work-"))
    result: dict | None = None
    try:
        if own:
            cl.up()
            timings["up"] = round(time.monotonic() - t0, 1)
        t = time.monotonic()
        knot_ip = deploy(cl, work, args.knot)
        timings["deploy"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        soak = Soak(cl, work, args.minutes, args.pause, knot_ip, command=shown_command(argv))
        try:
            result = soak.run()
        finally:
            timings["soak"] = round(time.monotonic() - t, 1)
            t = time.monotonic()
            undeploy(cl, work)
            timings["undeploy"] = round(time.monotonic() - t, 1)
    finally:
        if own:
            t = time.monotonic()
            cl.down()
            remove_later(directory)
            timings["down"] = round(time.monotonic() - t, 1)
    timings["total"] = round(time.monotonic() - t0, 1)
    assert result is not None
    result["timings_s"] = timings
    result["load_average"] = os.getloadavg()
    print(text(result))
    print(f"timings: {timings}, load average {result['load_average']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["wrong"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
