"""The SIG-Multicluster conformance suite (kubernetes-sigs/mcs-api, conformance/) run against a
clusterset.local DNS server in the one-node cluster of testsupport/cluster.py.

    python3 -m testsupport.conformance --dns mcsdns|coredns --exporter fixture|lighthouse --out DIR
                                       [--cluster-dir DIR] [--specs dns|all]

One run: bring the cluster up (or take the one up in --cluster-dir), load the suite's images
into the node, install both mcs-api CRDs (ServiceExport, ServiceImport), deploy an exporting
side and a DNS server behind the cluster CoreDNS's clusterset.local stub zone (docs/install.md),
run the suite's binary from DIR with `--ginkgo.label-filter=DNS` (or no filter: every spec; the
two-cluster ones skip themselves) and `--ginkgo.junit-report=DIR/junit.xml`, print one line per
spec, and tear down what the run brought up: the whole cluster if it started it, else
everything it deployed.

DNS servers, each a Deployment whose Service the stub zone forwards to, so the suite's queries
travel request pod -> kube-dns -> stub zone -> the server under test:
  mcsdns   deploy/ (kustomize) with the image of this checkout;
  coredns  the testbin CoreDNS serving clusterset.local with its `kubernetes` plugin's
           `multicluster clusterset.local`, as CoreDNS users serve the zone.

Exporters:
  fixture     testsupport/fixture_exporter.py (a clusterset of one, written to drive the suite)
              in the mcsdns image, plus mcs-api's reference controller, which gives ClusterSetIP
              imports their derived Services' IPs;
  lighthouse  Submariner Lighthouse's agent (testsupport/lighthouse.py, when present).

What the suite needs is built by tools/testbin/build-conformance.sh (the suite, the controller,
the CRDs, and images named as the suite's pods name theirs: docker.io/alpine/socat:1.7.4.4 and
docker.io/nicolaka/netshoot:v0.15, stand-ins built from Debian packages with the commands the
suite runs in them). DIR receives junit.xml, the suite's report.yaml and report.html, its output
(suite.log), the logs of the exporter and the DNS server (logs/) and run.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from testsupport.cluster import (
    DNS_SERVICE_IP,
    NODE_BRIDGE,
    Cluster,
    ClusterError,
    _alive,
    deployment_ready,
    kustomize_overlay,
    point_coredns_at,
    preflight,
    remove_later,
)
from testsupport.testbed import ApiError, testbin_cache

REPO = Path(__file__).resolve().parent.parent
ZONE = "clusterset.local"
CLUSTER_ID = "cluster-a"
SPEC_FILTERS = {"dns": "DNS", "all": ""}
DNS_SERVERS = ("mcsdns", "coredns")
EXPORTERS = ("fixture", "lighthouse")
SUITE_IMAGES = ("socat", "netshoot", "mcs-controller")  # build-conformance.sh's archives
FIXTURE_NS = "mcs-fixture"
COREDNS_NS = "clusterset-coredns"
MCSDNS_NS = "mcsdns"
EXPORTER_SOURCE = Path(__file__).resolve().parent / "fixture_exporter.py"
SUITE_TIMEOUT = {"dns": 1500.0, "all": 3600.0}
READY_TIMEOUT = 180.0


class ConformanceError(RuntimeError):
    """The run could not get as far as the suite; the message says why."""


class ClusterUnavailable(ConformanceError):
    """This machine cannot start the cluster (or the build is missing): a reason to skip."""


# --------------------------------------------------------------------------- #
# The build
# --------------------------------------------------------------------------- #


def build_dir(cache: Path) -> Path:
    return cache / "conformance" / "current"


def missing(cache: Path) -> list[str]:
    """What tools/testbin/build-conformance.sh has not built yet."""
    found = []
    build = build_dir(cache)
    for name in ("mcs-conformance.test", "servicecontroller", "crd/multicluster.x-k8s.io_serviceexports.yaml",
                 "crd/multicluster.x-k8s.io_serviceimports.yaml"):
        if not (build / name).exists():
            found.append(f"{build / name} missing (tools/testbin/build-conformance.sh)")
    for name in SUITE_IMAGES:
        if not (cache / "images" / f"{name}.tar").exists():
            found.append(f"{cache / 'images' / name}.tar missing (tools/testbin/build-conformance.sh)")
    return found


# --------------------------------------------------------------------------- #
# Results
# --------------------------------------------------------------------------- #


@dataclass
class SpecResult:
    """One spec of the suite as its JUnit report gives it."""

    name: str
    state: str  # passed, failed, skipped (by the spec itself), or the failure kind (timedout, panicked...)
    seconds: float
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    def line(self) -> str:
        text = f"{self.state.upper():8} {self.name} ({self.seconds:.1f} s)"
        if self.message and not self.passed:
            text += f" -- {self.message.strip().splitlines()[0][:200]}"
        return text


def parse_junit(path: Path) -> list[SpecResult]:
    """The specs that ran (or skipped themselves); those the label filter left out are dropped."""
    results = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        spec = " ".join(name.removeprefix("[It]").split())  # Ginkgo pads the joined container texts
        if not name.startswith("[It]"):
            if case.get("status") in ("failed", "panicked", "timedout", "interrupted", "aborted"):
                results.append(SpecResult(name, case.get("status", "failed"), float(case.get("time", 0)),
                                          _message(case)))
            continue
        status = case.get("status", "")
        skipped = case.find("skipped")
        if status == "skipped" or skipped is not None:
            message = (skipped.get("message", "") if skipped is not None else "")
            if message in ("", "skipped"):  # filtered out, never ran
                continue
            results.append(SpecResult(spec, "skipped", float(case.get("time", 0)),
                                      message.removeprefix("skipped - ")))
            continue
        results.append(SpecResult(spec, status or "passed",
                                  float(case.get("time", 0)), _message(case)))
    return results


def _message(case: ET.Element) -> str:
    for tag in ("failure", "error"):
        node = case.find(tag)
        if node is not None:
            return node.get("message") or (node.text or "")
    return ""


# --------------------------------------------------------------------------- #
# What a run deploys
# --------------------------------------------------------------------------- #


def fixture_objects() -> list[dict]:
    """The fixture exporter (this package's file in the mcsdns image) and mcs-api's reference
    controller, each a Deployment with its own ServiceAccount and ClusterRole."""
    exporter_rules = [
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceexports"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceexports/status"], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports", "serviceimports/status"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
    ]
    # The reference controller's needs (controllers/*.go): it updates imports' spec.ips, creates
    # derived Services (and their status), relabels MCS EndpointSlices.
    controller_rules = [
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports"], "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["services/status"], "verbs": ["get", "update", "patch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch", "update", "patch"]},
    ]
    exporter = ["python", "/opt/fixture-exporter/fixture_exporter.py", "--cluster-id", CLUSTER_ID]
    volume = {"name": "exporter", "configMap": {"name": "fixture-exporter"}}
    mount = {"name": "exporter", "mountPath": "/opt/fixture-exporter", "readOnly": True}
    objects: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": FIXTURE_NS}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fixture-exporter", "namespace": FIXTURE_NS},
         "data": {"fixture_exporter.py": EXPORTER_SOURCE.read_text()}},
    ]
    for name, rules, image, command, extra in (
            ("fixture-exporter", exporter_rules, "localhost/mcsdns:dev", exporter, ([volume], [mount])),
            ("mcs-controller", controller_rules, "localhost/mcs-controller:dev", None, ([], []))):
        objects += _workload(FIXTURE_NS, name, rules, image, command, volumes=extra[0], mounts=extra[1])
    return objects


def _workload(namespace: str, name: str, rules: list[dict], image: str, command: list[str] | None, *,
              volumes: list[dict], mounts: list[dict], args: list[str] | None = None,
              ports: list[dict] | None = None, probe: dict | None = None) -> list[dict]:
    """ServiceAccount, ClusterRole(+Binding) and a one-replica Deployment, non-root, read-only root."""
    labels = {"app.kubernetes.io/name": name}
    container: dict = {"name": name, "image": image, "imagePullPolicy": "Never",
                       "volumeMounts": mounts, "ports": ports or [],
                       "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                           "capabilities": {"drop": ["ALL"]}}}
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if probe:
        container["readinessProbe"] = probe
    role = f"{namespace}:{name}"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": name, "terminationGracePeriodSeconds": 2,
                      "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                      "containers": [container], "volumes": volumes}}}},
    ]


COREDNS_COREFILE = f"""\
{ZONE}:53 {{
    errors
    health :8080
    ready :8181
    kubernetes cluster.local {ZONE} {{
        multicluster {ZONE}
    }}
}}
"""


def coredns_objects() -> list[dict]:
    """The testbin CoreDNS serving clusterset.local (its `multicluster` option), behind the stub zone."""
    rules = [
        {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports"], "verbs": ["list", "watch"]},
    ]
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": COREDNS_NS}},
               {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": COREDNS_NS},
                "data": {"Corefile": COREDNS_COREFILE}}]
    workload = _workload(COREDNS_NS, "coredns", rules, "localhost/coredns:dev", None,
                         volumes=[{"name": "config", "configMap": {"name": "coredns"}}],
                         mounts=[{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                         args=["-conf", "/etc/coredns/Corefile"],
                         ports=[{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                                {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"}],
                         probe={"httpGet": {"path": "/ready", "port": 8181}})
    deployment = workload[-1]["spec"]["template"]["spec"]
    # As kubeadm's CoreDNS runs the same image: its user (root) with no capability but binding port 53.
    del deployment["securityContext"]
    deployment["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
    deployment["dnsPolicy"] = "Default"
    labels = {"app.kubernetes.io/name": "coredns"}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "coredns", "namespace": COREDNS_NS},
               "spec": {"selector": labels, "ports": [
                   {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                   {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}}
    return objects + workload + [service]


# --------------------------------------------------------------------------- #
# A run
# --------------------------------------------------------------------------- #


@dataclass
class Run:
    """One run's settings and what it did (written to DIR/run.json)."""

    dns: str
    exporter: str
    specs: str
    out: Path
    cluster_dir: Path | None = None
    commit: str = ""
    started: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    results: list[SpecResult] = field(default_factory=list)
    suite_exit: int | None = None
    # Where the run kept its own cluster, and the interface index of that cluster's node bridge:
    # what a check for leftovers looks for on a machine where another cluster may come up next.
    scratch: str | None = None
    node_ifindex: int | None = None

    def save(self) -> None:
        """DIR/run.json and DIR/summary.txt (the printed lines), without this machine's paths."""
        data = asdict(self)
        for local in ("out", "cluster_dir", "scratch", "node_ifindex"):
            del data[local]
        (self.out / "run.json").write_text(json.dumps(data, indent=1) + "\n")
        (self.out / "summary.txt").write_text(self.summary() + "\n")

    def summary(self) -> str:
        failed = [s for s in self.results if not s.passed and s.state != "skipped"]
        passed = sum(s.passed for s in self.results)
        lines = [s.line() for s in self.results]
        lines.append(f"{passed} passed, {len(failed)} failed, {len(self.results) - passed - len(failed)} skipped "
                     f"({self.dns} DNS, {self.exporter} exporter, {self.specs} specs; commit {self.commit}, "
                     f"{self.started})")
        return "\n".join(lines)

    def store(self, dest: Path) -> None:
        """The suite's reports and the summary, for benchmarks/results/conformance/: the run's
        directory (in junit.xml's `package`) becomes `.`."""
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("junit.xml", "report.yaml", "report.html", "summary.txt", "run.json"):
            source = self.out / name
            if source.exists():
                (dest / name).write_text(source.read_text().replace(str(self.out), "."))


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _poll(check: Callable[[], object], timeout: float, what: str, interval: float = 0.5) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (ApiError, ClusterError, OSError) as err:
            last = err
        time.sleep(interval)
    raise ConformanceError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last})")


def _commit() -> str:
    """The checkout's commit, `-dirty` when the tree has changes the commit does not hold."""
    done = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty", "--abbrev=7"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def _ifindex(device: str) -> int | None:
    try:
        return int(Path(f"/sys/class/net/{device}/ifindex").read_text())
    except OSError:
        return None


def _cluster_is_up(cl: Cluster) -> bool:
    processes = {p["name"]: p for p in cl.state.data["processes"]}
    return all(name in processes and _alive(processes[name]) for name in ("kube-apiserver", "kubelet", "containerd"))


def import_images(cl: Cluster, cache: Path) -> None:
    for name in SUITE_IMAGES:
        cl_ctr = [cl.bin["ctr"], f"--address={cl.socket}", "-n", "k8s.io", "images", "import", "--all-platforms",
                  (cache / "images" / f"{name}.tar").resolve()]
        done = subprocess.run([str(a) for a in cl_ctr], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise ConformanceError(f"importing the {name} image failed: {done.stderr.strip()}")


def install_crds(cl: Cluster, cache: Path) -> list[str]:
    """Both mcs-api CRDs from the snapshot; returns the names of those that were not there before."""
    import yaml

    api = cl.api()
    created = []
    for kind in ("serviceexports", "serviceimports"):
        crd = yaml.safe_load((build_dir(cache) / "crd" / f"multicluster.x-k8s.io_{kind}.yaml").read_text())
        name = crd["metadata"]["name"]
        try:
            api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
        except ApiError as err:
            if err.status != 404:
                raise
            created.append(name)
        api.apply(crd)

        def established(name: str = name) -> bool:
            got = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
            # A CRD just applied can read back with `conditions: null` before the API server sets them.
            conditions = (got.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

        _poll(established, 60, f"CRD {name} Established")
    # Every served version listable (discovery and the watch cache lag Established).
    for version in ("v1beta1", "v1alpha1"):
        for plural in ("serviceexports", "serviceimports"):
            _poll(lambda v=version, p=plural: api.request("GET", f"/apis/multicluster.x-k8s.io/{v}/{p}") is not None,
                  60, f"{plural}.{version} listable")
    return created


def _apply_all(cl: Cluster, objects: list[dict]) -> None:
    api = cl.api()
    for obj in objects:
        api.apply(obj)


def _delete_all(cl: Cluster, objects: list[dict]) -> None:
    """Delete in reverse order; namespaces last, waited for (their pods gone)."""
    api = cl.api()
    for obj in reversed(objects):
        meta = obj["metadata"]
        try:
            api.delete(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        except ApiError as err:
            if err.status != 404:
                raise
    for obj in objects:
        if obj["kind"] == "Namespace":
            def gone(name: str = obj["metadata"]["name"]) -> bool:
                try:
                    api.get("v1", "Namespace", None, name)
                except ApiError as err:
                    return err.status == 404
                return False

            _poll(gone, 180, f"namespace {obj['metadata']['name']} gone")


def _wait_deployments(cl: Cluster, namespace: str, names: list[str]) -> None:
    api = cl.api()
    for name in names:
        _poll(lambda name=name: deployment_ready(api, namespace, name), READY_TIMEOUT,
              f"Deployment {namespace}/{name} ready")


def _zone_answers() -> bool:
    """The zone's SOA through the cluster DNS (kube-dns -> stub zone -> the server under test)."""
    import dns.message
    import dns.query
    import dns.rcode
    import dns.rdatatype

    reply = dns.query.udp(dns.message.make_query(f"{ZONE}.", "SOA"), DNS_SERVICE_IP, timeout=2)
    return reply.rcode() == dns.rcode.NOERROR and any(r.rdtype == dns.rdatatype.SOA for r in reply.answer)


def _service_ip(cl: Cluster, namespace: str, name: str) -> str:
    return cl.kubectl("-n", namespace, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}").stdout.strip()


class Deployer:
    """Deploys exporter and DNS server on a cluster and remembers how to take each away."""

    def __init__(self, cl: Cluster, cache: Path, scratch: Path) -> None:
        self.cl = cl
        self.cache = cache
        self.scratch = scratch
        self.undo: list[tuple[str, Callable[[], None]]] = []
        self.log_sources: list[tuple[str, list[str]]] = []

    def exporter(self, which: str) -> None:
        if which == "fixture":
            objects = fixture_objects()
            _apply_all(self.cl, objects)
            self.undo.append(("fixture exporter", lambda: _delete_all(self.cl, objects)))
            _wait_deployments(self.cl, FIXTURE_NS, ["fixture-exporter", "mcs-controller"])
            self.log_sources += [("fixture-exporter", ["-n", FIXTURE_NS, "logs", "deployment/fixture-exporter"]),
                                 ("mcs-controller", ["-n", FIXTURE_NS, "logs", "deployment/mcs-controller"])]
            return
        try:
            from testsupport import lighthouse  # the Lighthouse side lives in its own module
        except ImportError as err:
            if err.name != "testsupport.lighthouse":
                raise
            raise ConformanceError("--exporter lighthouse needs testsupport/lighthouse.py (its deploy/remove), "
                                   "which this checkout does not have") from err
        deployed = lighthouse.deploy(self.cl)
        self.undo.append(("Lighthouse", lambda: lighthouse.remove(self.cl, deployed)))
        self.log_sources.append(("lighthouse-agent", ["-n", lighthouse.AGENT_NAMESPACE, "logs",
                                                      f"deployment/{lighthouse.AGENT_NAME}"]))

    def dns(self, which: str) -> None:
        if which == "mcsdns":
            overlay = kustomize_overlay(self.scratch / "overlay")
            self.cl.kubectl("apply", "-k", str(overlay))
            self.undo.append(("mcsdns", lambda: self.cl.kubectl("delete", "-k", str(overlay), "--wait=true",
                                                                timeout=240)))
            self.cl.kubectl("-n", MCSDNS_NS, "rollout", "status", "deployment/mcsdns", "--timeout=180s", timeout=200)
            ip = _service_ip(self.cl, MCSDNS_NS, "mcsdns")
            self.log_sources.append(("mcsdns", ["-n", MCSDNS_NS, "logs", "deployment/mcsdns", "--all-containers"]))
        else:
            objects = coredns_objects()
            _apply_all(self.cl, objects)
            self.undo.append(("CoreDNS (clusterset.local)", lambda: _delete_all(self.cl, objects)))
            _wait_deployments(self.cl, COREDNS_NS, ["coredns"])
            ip = _service_ip(self.cl, COREDNS_NS, "coredns")
            self.log_sources.append(("coredns-clusterset", ["-n", COREDNS_NS, "logs", "deployment/coredns"]))
        point_coredns_at(self.cl, ip, self.scratch / "corefile")
        self.undo.append(("the stub zone", lambda: point_coredns_at(self.cl, None, self.scratch / "corefile-restore")))
        _poll(_zone_answers, 90, f"{ZONE} SOA answered through kube-dns and the stub zone")

    def save_logs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, args in self.log_sources:
            done = self.cl.kubectl(*args, "--timestamps", check=False, timeout=60)
            (directory / f"{name}.log").write_text(done.stdout + done.stderr)

    def teardown(self) -> list[str]:
        errors = []
        for what, action in reversed(self.undo):
            try:
                action()
            except Exception as err:  # noqa: BLE001 - undo the rest, report at the end
                errors.append(f"removing {what}: {type(err).__name__}: {err}")
        self.undo.clear()
        return errors


def run_suite(cl: Cluster, cache: Path, run: Run) -> list[SpecResult]:
    """The suite's binary from DIR (its report.yaml/report.html land there)."""
    argv = [str((build_dir(cache) / "mcs-conformance.test").resolve()), f"--kubeconfig={cl.kubeconfig}",
            f"--ginkgo.junit-report={run.out / 'junit.xml'}", "--ginkgo.v", "--ginkgo.no-color",
            "--organization=mcsdns test bed", f"--project={run.exporter} exporter, {run.dns} DNS",
            f"--version={run.commit}"]
    if SPEC_FILTERS[run.specs]:
        argv.append(f"--ginkgo.label-filter={SPEC_FILTERS[run.specs]}")
    junit = run.out / "junit.xml"
    junit.unlink(missing_ok=True)
    with open(run.out / "suite.log", "w") as log:
        log.write(" ".join(argv) + "\n")
        log.flush()
        try:
            done = subprocess.run(argv, cwd=run.out, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=SUITE_TIMEOUT[run.specs])
            run.suite_exit = done.returncode
        except subprocess.TimeoutExpired:
            run.suite_exit = -1
    if not junit.exists():
        tail = "\n".join((run.out / "suite.log").read_text(errors="replace").splitlines()[-20:])
        raise ConformanceError(f"the suite wrote no junit.xml (exit {run.suite_exit}); suite.log ends:\n{tail}")
    return parse_junit(junit)


def run(dns: str, exporter: str, out: Path, *, cluster_dir: Path | None = None, specs: str = "dns") -> Run:
    """One run (see the module docstring); the results are in the returned Run and DIR/run.json."""
    if dns not in DNS_SERVERS or exporter not in EXPORTERS or specs not in SPEC_FILTERS:
        raise ValueError(f"unknown choice: dns={dns} exporter={exporter} specs={specs}")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cache = testbin_cache()
    result = Run(dns, exporter, specs, out, cluster_dir, _commit(),
                 datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    problems = missing(cache)
    own_cluster = cluster_dir is None
    if own_cluster:
        problems += preflight(cache)
    if problems:
        raise ClusterUnavailable("cannot run the conformance suite here:\n  " + "\n  ".join(problems))
    scratch = Path(tempfile.mkdtemp(prefix="mcs-conformance-"))
    result.scratch = str(scratch)
    started = time.monotonic()
    if own_cluster:
        cl = Cluster(scratch / "cluster")
        _say("bringing the one-node cluster up")
        try:
            cl.up()
        except ClusterError as err:
            shutil.rmtree(scratch, ignore_errors=True)
            raise ClusterUnavailable(str(err)) from err
        result.node_ifindex = _ifindex(NODE_BRIDGE)
    else:
        assert cluster_dir is not None
        cl = Cluster(cluster_dir)
        if not _cluster_is_up(cl):
            shutil.rmtree(scratch, ignore_errors=True)
            raise ConformanceError(f"no cluster is up in {cluster_dir} (python3 -m testsupport.cluster up --dir DIR)")
    result.timings["cluster"] = round(time.monotonic() - started, 1)
    deployer = Deployer(cl, cache, scratch)
    errors: list[str] = []
    try:
        step = time.monotonic()
        _say("loading the suite's images, installing the mcs-api CRDs")
        import_images(cl, cache)
        created_crds = install_crds(cl, cache)
        if not own_cluster and "serviceexports.multicluster.x-k8s.io" in created_crds:
            api = cl.api()
            deployer.undo.append(("the ServiceExport CRD", lambda: api.delete(
                "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "serviceexports.multicluster.x-k8s.io")))
        _say(f"deploying the {exporter} exporter")
        deployer.exporter(exporter)
        _say(f"deploying {dns} behind the {ZONE} stub zone")
        deployer.dns(dns)
        result.timings["deploy"] = round(time.monotonic() - step, 1)
        step = time.monotonic()
        _say(f"running the suite ({specs} specs)")
        result.results = run_suite(cl, cache, result)
        result.timings["suite"] = round(time.monotonic() - step, 1)
    finally:
        try:
            deployer.save_logs(out / "logs")
        except Exception as err:  # noqa: BLE001 - logs are a courtesy; teardown must still run
            errors.append(f"saving logs: {err}")
        step = time.monotonic()
        if own_cluster:
            try:
                cl.down()
            except ClusterError as err:
                errors.append(str(err))
        else:
            errors += deployer.teardown()
        if not errors:
            remove_later(scratch)
        result.timings["teardown"] = round(time.monotonic() - step, 1)
        result.save()
    if errors:
        raise ConformanceError("teardown left something behind (" + str(scratch) + "):\n  " + "\n  ".join(errors))
    return result


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C, so the teardown in `run` still runs."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m testsupport.conformance",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dns", required=True, choices=DNS_SERVERS)
    parser.add_argument("--exporter", required=True, choices=EXPORTERS)
    parser.add_argument("--out", required=True, type=Path, help="the suite's working directory: its reports land here")
    parser.add_argument("--cluster-dir", type=Path, help="a cluster already up (testsupport.cluster up --dir); kept up")
    parser.add_argument("--specs", choices=tuple(SPEC_FILTERS), default="dns",
                        help="dns: --ginkgo.label-filter=DNS (default); all: every spec")
    parser.add_argument("--store", type=Path, help="also copy the reports and summary there "
                        "(benchmarks/results/conformance/<dns>-<exporter>/)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        done = run(args.dns, args.exporter, args.out, cluster_dir=args.cluster_dir, specs=args.specs)
    except ConformanceError as err:
        print(err, file=sys.stderr)
        return 2
    print(done.summary())
    print(f"times (s): {done.timings}", file=sys.stderr)
    if args.store:
        done.store(args.store)
    failed = [s for s in done.results if not s.passed and s.state != "skipped"]
    return 1 if failed or not done.results else 0


if __name__ == "__main__":
    sys.exit(main())
