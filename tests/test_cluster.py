"""mcsdns in pods of a real one-node cluster, from its own image, behind the cluster's CoreDNS.

The cluster is testsupport/cluster.py's (etcd, kube-apiserver, controller-manager, scheduler,
containerd + runc, kubelet, CNI bridge, kube-proxy, CoreDNS as kubeadm deploys it), started once
for the module and removed at the end. Everything a user does goes through the testbin's kubectl
and helm with the commands docs/install.md gives; every query is sent by dig, kdig or glibc
(getent) inside a client pod, with the resolv.conf the kubelet gave it, so it travels
client pod -> kube-dns Service -> CoreDNS -> clusterset.local stub zone -> mcsdns Service -> pod.

The tests run in file order and build on each other (deploy, point CoreDNS at it, query, change,
reinstall with Helm, roll): each step is what a user does next.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import socket
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchmarks import cluster_soak
from benchmarks.cluster_soak_check import PROPAGATION_WINDOW
from mcsdns.sources.watching import BACKOFF_CAP
from testsupport import objects
from testsupport.cluster import (
    CLIENT_NAMESPACE as CLIENT_NS,
    CLUSTER_DOMAIN,
    DNS_SERVICE_IP,
    KUBELET_HEALTHZ_PORT,
    MCSDNS_IMAGE as IMAGE,
    NODE_LOCAL_DNS_IP,
    POD_CIDR,
    Cluster,
    ClusterError,
    State,
    client_sh,
    deployment_ready,
    kustomize_overlay,
    node_local_corefile,
    node_local_dns_objects,
    point_coredns_at,
    remove_later,
    require_node,
    run_node_local_dns,
    start_client,
)
from testsupport.polling import eventually
from testsupport.testbed import testbin_cache as cache_dir

ROOT = Path(__file__).resolve().parent.parent
NS = "mcsdns"
DEMO = "demo"
ZONE = "clusterset.local"
# The stub zone's cache (docs/install.md: `cache 5`) plus mcsdns's programming time (2 s).
CHANGE_BUDGET = 5.0 + 2.0

pytestmark = [pytest.mark.cluster, pytest.mark.slow]  # a one-node cluster: tens of minutes


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def images_of_this_checkout() -> None:
    """The images come from this checkout: build-images.sh rebuilds what changed (a warm run
    only hashes its inputs, seconds), so no test here runs an image of older code than the tree's."""
    done = subprocess.run([str(ROOT / "tools" / "testbin" / "build-images.sh")], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"tools/testbin/build-images.sh failed (exit {done.returncode}): {reason}")


def assert_nothing_left(cl: Cluster) -> None:
    """After `down`: no process, device, mount, cgroup or rule of the cluster remains."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "mcsdns-node" not in links and "mcsdns-cni0" not in links, links
    lo = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    assert NODE_LOCAL_DNS_IP not in lo, lo
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(cl.dir) not in mounts
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert "KUBE-" not in rules and "CNI-" not in rules, rules
    assert not any(Path(h, "mcsdns-cluster").exists() for h in Path("/sys/fs/cgroup").iterdir())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module; skipped (a failure in CI) where a kubelet cannot run."""
    require_node()
    directory = tmp_path_factory.mktemp("cluster")
    cl = Cluster(directory)
    try:
        cl.up()
    except ClusterError as err:
        pytest.fail(str(err))
    try:
        yield cl
    finally:
        cl.down()
        assert_nothing_left(cl)
        remove_later(directory)


def kubectl(cl: Cluster, *args: str, timeout: float = 120.0, input: str | None = None) -> str:
    return cl.kubectl(*args, timeout=timeout, input=input).stdout


def wait_for(check: Callable[[], object], timeout: float, what: str, interval: float = 0.5) -> object:
    """`eventually` with this file's argument order; a check that raises (a kubectl failing while a
    pod restarts) counts as "not yet"."""
    return eventually(check, timeout, interval, what, ignore=(AssertionError, ClusterError))


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> str:
    """A dnsutils pod with the kubelet's resolv.conf, plus svc.clusterset.local in its search list."""
    return start_client(cluster)


def sh(cl: Cluster, command: str, timeout: float = 60.0) -> str:
    return client_sh(cl, command, timeout=timeout).stdout


def dig(cl: Cluster, *args: str) -> str:
    return sh(cl, "dig +time=2 +tries=2 " + " ".join(args))


@pytest.fixture(scope="module")
def imports(cluster: Cluster) -> dict:
    """What an MCS controller would write: a ClusterSetIP import and a headless one with hostnames."""
    api = cluster.api()
    api.apply(objects.namespace(DEMO))
    web = objects.service_import(DEMO, "web", ["10.245.0.10"])
    db_ports = [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    db = objects.service_import(DEMO, "db", headless=True, ports=db_ports)
    db_slice = objects.endpoint_slice(DEMO, "db-c1", "db", "c1", [
        objects.endpoint(["10.245.1.1"], hostname="db-0"), objects.endpoint(["10.245.1.2"], hostname="db-1")],
        ports=db_ports)
    for obj in (web, db, db_slice):
        api.apply(obj)
    return {"web": web, "db": db, "db_slice": db_slice}


def pods(cl: Cluster, namespace: str, selector: str = "app.kubernetes.io/name=mcsdns") -> list[dict]:
    return json.loads(kubectl(cl, "-n", namespace, "get", "pods", "-l", selector, "-o", "json"))["items"]


def pod_metrics(cl: Cluster, pod: str) -> str:
    """mcsdns pod `pod`'s /metrics, read inside it ("" when it cannot be read)."""
    return cl.kubectl("-n", NS, "exec", pod, "--", "python", "-c", "import urllib.request; print("
                      "urllib.request.urlopen('http://127.0.0.1:9153/metrics').read().decode())", check=False).stdout


def service_ip(cl: Cluster, namespace: str, name: str = "mcsdns") -> str:
    return kubectl(cl, "-n", namespace, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}")


def rollout(cl: Cluster, namespace: str, name: str = "mcsdns") -> None:
    kubectl(cl, "-n", namespace, "rollout", "status", f"deployment/{name}", "--timeout=180s", timeout=200)


def check_pods(cl: Cluster, namespace: str) -> None:
    """Running, Ready only after mcsdns logged its initial sync, no 403, uid 65532, read-only root."""
    items = [p for p in pods(cl, namespace) if not p["metadata"].get("deletionTimestamp")]
    assert len(items) == 2, [p["metadata"]["name"] for p in items]
    for pod in items:
        name = pod["metadata"]["name"]
        assert pod["status"]["phase"] == "Running"
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        log = kubectl(cl, "-n", namespace, "logs", name, "--timestamps")
        assert " 403" not in log and "orbidden" not in log, log
        synced = next((line for line in log.splitlines() if "synced" in line), None)
        assert synced, log
        synced_at = datetime.datetime.fromisoformat(synced.split()[0].replace("Z", "+00:00"))
        ready_at = datetime.datetime.fromisoformat(ready["lastTransitionTime"].replace("Z", "+00:00"))
        # The condition has whole seconds: Ready in the same second as the sync or later.
        assert ready_at >= synced_at.replace(microsecond=0), (ready_at, synced_at)
        ids = kubectl(cl, "-n", namespace, "exec", name, "--", "python", "-c",
                      "import os; print(os.getuid(), os.getgid())")
        assert ids.split() == ["65532", "65532"]
        write = cl.kubectl("-n", namespace, "exec", name, "--", "python", "-c",
                           "open('/opt/mcsdns/x', 'w')", check=False)
        assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr


# --------------------------------------------------------------------------- bad input to `up`


def test_up_refuses_a_port_in_use_and_starts_nothing(tmp_path: Path) -> None:
    """Runs before the module's cluster exists (file order): the kubelet's healthz port taken."""
    require_node()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", KUBELET_HEALTHZ_PORT))
        holder.listen()
        with pytest.raises(ClusterError, match=rf"port {KUBELET_HEALTHZ_PORT} is in use"):
            Cluster(tmp_path / "cluster").up()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "mcsdns-node" not in links
    assert not (tmp_path / "cluster" / "state.json").exists()


def test_up_failing_half_way_names_the_reason_and_removes_what_it_started(tmp_path: Path) -> None:
    """A broken image archive: `up` gets as far as containerd (etcd, kube-apiserver, controllers
    running, devices and cgroups made) before the import fails; then everything goes again."""
    require_node()
    real = cache_dir()
    cache = tmp_path / "cache"
    (cache / "images").mkdir(parents=True)
    for name in ("bin", "crds"):
        (cache / name).symlink_to(real / name)
    for archive in (real / "images").glob("*.tar"):
        (cache / "images" / archive.name).symlink_to(archive.resolve())
    (cache / "images" / "dnsutils.tar").unlink()
    (cache / "images" / "dnsutils.tar").write_bytes(b"not an OCI archive")
    cl = Cluster(tmp_path / "cluster", cache)
    with pytest.raises(ClusterError, match=r"cluster up failed.*dnsutils\.tar") as failure:
        cl.up()
    assert "everything started was stopped and removed" in str(failure.value)
    assert_nothing_left(cl)
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(tmp_path).encode() in (proc / "cmdline").read_bytes():
                left.append((proc / "cmdline").read_bytes().replace(b"\0", b" ")[:120])
        except OSError:
            pass
    assert not left, left


# --------------------------------------------------------------------------- the user's path


def test_up_gives_a_ready_node_and_cluster_dns(cluster: Cluster) -> None:
    nodes = json.loads(kubectl(cluster, "get", "nodes", "-o", "json"))["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["mcsdns-node"]
    assert cluster.resolve(f"kube-dns.kube-system.svc.{CLUSTER_DOMAIN}") == [DNS_SERVICE_IP]
    assert deployment_ready(cluster.api(), "kube-system", "coredns")


def test_kustomize_base_runs_ready_after_sync_non_root_read_only(cluster: Cluster, imports: dict,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    kubectl(cluster, "apply", "-k", str(kustomize_overlay(tmp_path_factory.mktemp("overlay"))), "--server-side")
    rollout(cluster, NS)
    check_pods(cluster, NS)


def test_client_pod_resolves_through_the_stub_zone(cluster: Cluster, client: str, imports: dict,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    point_coredns_at(cluster, service_ip(cluster, NS), tmp_path_factory.mktemp("corefile"))
    resolv = sh(cluster, "cat /etc/resolv.conf")
    assert f"nameserver {DNS_SERVICE_IP}" in resolv and f"svc.{ZONE}" in resolv, resolv
    web = f"web.{DEMO}.svc.{ZONE}"
    wait_for(lambda: dig(cluster, "+short", web).split() == ["10.245.0.10"], 60, "the stub zone answering")
    # Headless: every ready endpoint; per-endpoint names; SRV per named port, per endpoint.
    assert sorted(dig(cluster, "+short", f"db.{DEMO}.svc.{ZONE}").split()) == ["10.245.1.1", "10.245.1.2"]
    assert dig(cluster, "+short", f"db-0.c1.db.{DEMO}.svc.{ZONE}").split() == ["10.245.1.1"]
    srv = sorted(dig(cluster, "+short", "SRV", f"_pg._tcp.db.{DEMO}.svc.{ZONE}").splitlines())
    assert srv == [f"0 50 5432 db-0.c1.db.{DEMO}.svc.{ZONE}.", f"0 50 5432 db-1.c1.db.{DEMO}.svc.{ZONE}."], srv
    assert dig(cluster, "+short", "SRV", f"_http._tcp.web.{DEMO}.svc.{ZONE}").split() == \
        ["0", "100", "80", f"web.{DEMO}.svc.{ZONE}."]
    # NXDOMAIN, with mcsdns's SOA: the answer came from mcsdns, not from CoreDNS's own zones.
    nx = dig(cluster, "+noall", "+comments", "+authority", f"nope.{DEMO}.svc.{ZONE}")
    assert "status: NXDOMAIN" in nx and "ns.dns.clusterset.local. hostmaster.clusterset.local." in nx, nx
    # kdig too, over TCP.
    assert sh(cluster, f"kdig +tcp +short {web}").split() == ["10.245.0.10"]
    # What applications type, through glibc and the pod's search path (ndots:5): the full name
    # without a dot (three cluster.local candidates first) and the short name `web.demo`.
    for name in (web, f"web.{DEMO}", f"db.{DEMO}"):
        out = sh(cluster, f"getent ahostsv4 {name}")
        assert ("10.245.0.10" if name.startswith("web") else "10.245.1.1") in out, (name, out)
    missing = client_sh(cluster, f"getent hosts nope.{DEMO}", check=False)
    assert missing.returncode == 2, missing  # glibc: not found


def test_a_change_reaches_the_client_pod_within_the_documented_window(cluster: Cluster, client: str,
                                                                      imports: dict) -> None:
    api = cluster.api()
    web = f"web.{DEMO}.svc.{ZONE}"
    changed = dict(imports["web"], spec=dict(imports["web"]["spec"], ips=["10.245.0.11"]))
    started = time.monotonic()
    api.apply(changed)
    wait_for(lambda: dig(cluster, "+short", web).split() == ["10.245.0.11"], 30, "the new ClusterSetIP", 0.2)
    import_seen = time.monotonic() - started
    ready_slice = dict(imports["db_slice"])
    ready_slice["endpoints"] = [*imports["db_slice"]["endpoints"],
                                objects.endpoint(["10.245.1.3"], hostname="db-2")]
    started = time.monotonic()
    api.apply(ready_slice)
    wait_for(lambda: "10.245.1.3" in dig(cluster, "+short", f"db.{DEMO}.svc.{ZONE}").split(), 30,
             "the new endpoint", 0.2)
    slice_seen = time.monotonic() - started
    assert import_seen <= CHANGE_BUDGET + 1.5, import_seen  # + one dig/exec round trip
    assert slice_seen <= CHANGE_BUDGET + 1.5, slice_seen


def test_helm_install_runs_ready_after_sync_non_root_read_only(cluster: Cluster, client: str,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """The documented Helm path, after removing the kustomize install (one or the other, not both)."""
    kubectl(cluster, "delete", "-k", str(kustomize_overlay(tmp_path_factory.mktemp("overlay-delete"))), "--wait=true",
            timeout=180)
    helm = cache_dir() / "bin" / "helm"
    proc = subprocess.run([str(helm), f"--kubeconfig={cluster.kubeconfig}", "install", "mcsdns",
                           str(ROOT / "deploy" / "helm" / "mcsdns"), "--namespace", NS, "--create-namespace",
                           "--set", f"image.repository={IMAGE.split(':')[0]}", "--set", "image.tag=dev",
                           "--wait", "--timeout=180s"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kubectl(cluster, "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    rollout(cluster, NS)
    check_pods(cluster, NS)
    point_coredns_at(cluster, service_ip(cluster, NS), tmp_path_factory.mktemp("corefile-helm"))
    wait_for(lambda: dig(cluster, "+short", f"web.{DEMO}.svc.{ZONE}").split() == ["10.245.0.11"], 60,
             "the stub zone answering from the Helm release")


class QueryLoop:
    """dig in the client pod, back to back, until stopped; counts answers that are not the wanted one.

    One try per query with glibc's first timeout (5 s): a dropped query is a failure (no retry
    hides it). Before point_coredns_at waited for CoreDNS's old pods to finish their lameduck, 2
    runs of 5 lost 1 query in ~400 through the stub zone (a timeout, once an empty answer), both a
    few seconds after CoreDNS's own rollout, as this test's rollout began and before any mcsdns
    pod was stopping.
    """

    def __init__(self, cl: Cluster, tag: str, dig_args: str, want: str) -> None:
        self.cl, self.stop_file = cl, f"/tmp/stop-{tag}"
        script = (f"ok=0; bad=0; while [ ! -f {self.stop_file} ]; do a=$(dig +time=5 +tries=1 +short {dig_args}); "
                  f"if [ \"$a\" = \"{want}\" ]; then ok=$((ok+1)); else bad=$((bad+1)); echo \"BAD {tag} $(date +%T) $a\"; fi; "
                  f"done; echo \"ok=$ok bad=$bad\"; rm -f {self.stop_file}")
        self.proc = subprocess.Popen(
            [str(cl.bin["kubectl"]), f"--kubeconfig={cl.kubeconfig}", "-n", CLIENT_NS, "exec", "client", "--",
             "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> tuple[int, int, str]:
        sh(self.cl, f"touch {self.stop_file}")
        out, _ = self.proc.communicate(timeout=30)
        m = re.search(r"ok=(\d+) bad=(\d+)", out)
        assert m, out
        return int(m[1]), int(m[2]), out


def test_rollout_restart_and_pod_deletion_lose_no_query(cluster: Cluster, client: str) -> None:
    """Both through the stub zone (mostly CoreDNS's cache) and straight at the mcsdns Service (every
    query reaches an mcsdns pod): readiness, lameduck, surge and the PDB must hide every restart."""
    name = f"web.{DEMO}.svc.{ZONE}"
    loops = [QueryLoop(cluster, "stub", name, "10.245.0.11"),
             QueryLoop(cluster, "direct", f"@{service_ip(cluster, NS)} {name}", "10.245.0.11")]
    steps = []
    time.sleep(3)
    steps.append(f"{time.strftime('%T')} rollout restart")
    kubectl(cluster, "-n", NS, "rollout", "restart", "deployment/mcsdns")
    rollout(cluster, NS)
    victim = pods(cluster, NS)[0]["metadata"]["name"]
    steps.append(f"{time.strftime('%T')} delete pod {victim}")
    kubectl(cluster, "-n", NS, "delete", "pod", victim, "--wait=true", timeout=60)
    steps.append(f"{time.strftime('%T')} deleted")
    rollout(cluster, NS)
    time.sleep(3)
    results = [loop.stop() for loop in loops]
    events = kubectl(cluster, "-n", NS, "get", "events", "--sort-by=.lastTimestamp")
    for ok, bad, out in results:
        assert bad == 0 and ok > 20, "\n".join([out, *steps, events])


def test_a_missing_rbac_rule_keeps_new_pods_unready_with_the_reason_and_old_ones_answering(cluster: Cluster,
                                                                                         client: str) -> None:
    """Bad input a user can make: the ClusterRoleBinding is gone. A restarted pod says why in its
    log and /ready (troubleshooting.md's table maps it to the fix) and never turns Ready; the old
    pods keep answering (maxUnavailable 0); restoring the binding finishes the rollout."""
    binding = json.loads(kubectl(cluster, "get", "clusterrolebinding", "mcsdns", "-o", "json"))
    kubectl(cluster, "delete", "clusterrolebinding", "mcsdns")
    try:
        old = {p["metadata"]["name"] for p in pods(cluster, NS)}
        kubectl(cluster, "-n", NS, "rollout", "restart", "deployment/mcsdns")

        def new_pod_log() -> tuple[str, str] | None:
            for pod in pods(cluster, NS):
                name = pod["metadata"]["name"]
                if name not in old and pod["status"].get("phase") == "Running":
                    log = cluster.kubectl("-n", NS, "logs", name, check=False).stdout
                    if "cannot list: forbidden" in log:
                        return name, log
            return None

        name, log = wait_for(new_pod_log, 60, "a new pod logging the missing permission")
        assert "system:serviceaccount:mcsdns:mcsdns" in log and "not ready, retrying" in log, log
        probe = ("import urllib.request as u\n"
                 "try: print(u.urlopen('http://127.0.0.1:9153/ready').status)\n"
                 "except Exception as e: print(getattr(e, 'code', e), e.read().decode() if hasattr(e, 'read') else '')")
        # The admin listener opens after --startup-timeout (5 s) when the list does not succeed.
        ready = wait_for(lambda: (out := cluster.kubectl("-n", NS, "exec", name, "--", "python", "-c", probe,
                                                         check=False).stdout).startswith("503") and out,
                         30, "/ready answering 503")
        assert "forbidden" in ready, ready
        pod = next(p for p in pods(cluster, NS) if p["metadata"]["name"] == name)
        assert next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")["status"] == "False"
        assert dig(cluster, "+short", f"@{service_ip(cluster, NS)}", f"web.{DEMO}.svc.{ZONE}").split() == ["10.245.0.11"]
    finally:
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            binding["metadata"].pop(key, None)
        kubectl(cluster, "apply", "-f", "-", input=json.dumps(binding))
    rollout(cluster, NS)  # the unready pod recovers by itself (no restart) and the rollout completes
    log = kubectl(cluster, "-n", NS, "logs", name)
    assert "recovered" in log and "synced" in log, log


# --------------------------------------------------------------------------- a broken stub zone, named


def pod_explain(cl: Cluster, *args: str) -> str:
    """`mcsdns explain ARGS` in an mcsdns pod (its admin port is the default --server there); by
    default (--via auto) the server also asks its pod's resolv.conf nameserver: the cluster DNS."""
    return kubectl(cl, "-n", NS, "exec", "deploy/mcsdns", "--", "mcsdns", "explain", *args)


def test_explain_names_a_missing_or_wrong_stub_zone_and_its_fix(cluster: Cluster, client: str, imports: dict,
                                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    """The two ways users break the path: CoreDNS never got the stub zone, or it forwards to an
    address where no mcsdns answers (10.96.200.200: in the Service range, no Service). `dig @mcsdns`
    works in both; `mcsdns explain` says the cluster's DNS does not forward the zone, and the fix."""
    web = f"web.{DEMO}.svc.{ZONE}"
    fix = f"does not forward {ZONE} to mcsdns: add the stub zone (docs/install.md"
    good = json.loads(pod_explain(cluster, web, "-o", "json"))
    assert good["rcode"] == "NOERROR" and good["answer"], good
    ips = sorted(line.split()[-1] for line in good["answer"])
    via = good["via"]
    assert via["server"] == f"{DNS_SERVICE_IP}:53" and via["source"] == "/etc/resolv.conf", via
    assert via["verdict"] == "same" and via["answer"] == [f"a {ip}" for ip in ips], via
    try:
        for case, target in (("no stub zone", None), ("a wrong address", "10.96.200.200")):
            point_coredns_at(cluster, target, tmp_path_factory.mktemp("corefile-broken"))
            # Pods are indeed left without the answer (dig exits 9 when no reply comes).
            assert client_sh(cluster, f"dig +time=2 +tries=1 +short {web}", check=False).stdout.split() != ips, case
            assert sorted(dig(cluster, "+short", f"@{service_ip(cluster, NS)}", web).split()) == ips, case
            lines = pod_explain(cluster, web).splitlines()
            assert lines[0] == f"{web}. A: NOERROR", (case, lines)
            assert lines[-2].startswith(f"via {DNS_SERVICE_IP}:53: ") and "(not_forwarded)" in lines[-2], (case, lines)
            assert fix in lines[-1], (case, lines)
    finally:
        point_coredns_at(cluster, service_ip(cluster, NS), tmp_path_factory.mktemp("corefile-fixed"))
    wait_for(lambda: sorted(dig(cluster, "+short", web).split()) == ips, 60, "the stub zone answering again")
    assert json.loads(pod_explain(cluster, web, "-o", "json"))["via"]["verdict"] == "same"


def test_node_local_dns_cache_needs_the_documented_block_and_resolves_with_it(cluster: Cluster, client: str,
                                                                            imports: dict) -> None:
    """docs/install.md's NodeLocal DNSCache: node-local-dns (the testbin CoreDNS as a host-network
    DaemonSet on 169.254.20.10, an address on the node's `lo`: this kernel has no dummy device) with
    the add-on's own Corefile sends clusterset.local out of the cluster, and `mcsdns explain --via`
    says so; with the documented block added, a pod whose nameserver it is resolves every name form."""
    web, db = f"web.{DEMO}.svc.{ZONE}", f"db.{DEMO}.svc.{ZONE}"
    direct = f"@{service_ip(cluster, NS)}"
    web_ips, db_ips = (sorted(dig(cluster, "+short", direct, name).split()) for name in (web, db))
    assert web_ips and db_ips
    pod = start_client(cluster, name="client-nodelocal", nameserver=NODE_LOCAL_DNS_IP)

    def pod_dig(*args: str) -> list[str]:  # no reply (dig exits 9) is an empty list
        return sorted(client_sh(cluster, "dig +time=2 +tries=2 +short " + " ".join(args), pod=pod,
                                check=False).stdout.split())

    resolv = client_sh(cluster, "cat /etc/resolv.conf", pod=pod).stdout
    assert f"nameserver {NODE_LOCAL_DNS_IP}" in resolv and DNS_SERVICE_IP not in resolv, resolv
    run_node_local_dns(cluster, with_mcsdns_block=False)
    assert pod_dig(f"kubernetes.default.svc.{CLUSTER_DOMAIN}") == ["10.96.0.1"]  # the cache itself works
    assert pod_dig(web) != web_ips  # ... but the MCS zone goes to the node's upstream, not to mcsdns
    lines = pod_explain(cluster, web, "--via", NODE_LOCAL_DNS_IP).splitlines()
    assert "(not_forwarded)" in lines[-2] and f"does not forward {ZONE} to mcsdns: add the stub zone" in lines[-1], lines
    assert "NodeLocal DNSCache" in lines[-1], lines

    run_node_local_dns(cluster, with_mcsdns_block=True)
    wait_for(lambda: pod_dig(web) == web_ips, 30, "the NodeLocal DNSCache block answering")
    assert pod_dig(db) == db_ips
    assert pod_dig(f"db-0.c1.{db}") == ["10.245.1.1"]
    assert pod_dig("SRV", f"_http._tcp.{web}") == sorted(["0", "100", "80", f"{web}."])
    nx = client_sh(cluster, f"dig +noall +comments +authority nope.{DEMO}.svc.{ZONE}", pod=pod).stdout
    assert "status: NXDOMAIN" in nx and f"ns.dns.{ZONE}. hostmaster.{ZONE}." in nx, nx
    assert sorted(client_sh(cluster, f"kdig +tcp +short {web}", pod=pod).stdout.split()) == web_ips
    assert client_sh(cluster, f"getent ahostsv4 web.{DEMO}", pod=pod).stdout.split()[0] in web_ips
    via = json.loads(pod_explain(cluster, web, "--via", NODE_LOCAL_DNS_IP, "-o", "json"))["via"]
    assert via["verdict"] == "same", via


def redeploy_with_flags(cl: Cluster, directory: Path, flag_lines: list[str], components: tuple[str, ...] = ()) -> dict:
    """mcsdns again from deploy/, its flags file the base's plus `flag_lines` (and deploy/components/`components`),
    as an overlay would; returns one of the two new pods once the old ones are gone."""
    overlay = kustomize_overlay(directory, flag_lines=flag_lines, components=components)
    kubectl(cl, "apply", "-k", str(overlay))
    rollout(cl, NS)
    wait_for(lambda: len([p for p in pods(cl, NS) if not p["metadata"].get("deletionTimestamp")]) == 2, 120,
             "the old mcsdns pods gone")
    return next(p for p in pods(cl, NS) if not p["metadata"].get("deletionTimestamp"))


def doc_blocks(heading: str) -> list[str]:
    """The fenced code blocks of docs/transfers.md's section `heading`, dedented, in order."""
    text = (ROOT / "docs" / "transfers.md").read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [textwrap.dedent(body) for _, body in re.findall(r"\n( *)```\n(.*?)\n\1```", text, re.S)]


class AnswerLoop:
    """dig in a client pod, one query every 0.05 s (plus dig's own time) until stopped, one line per query: the time, the rcode
    (TIMEOUT: no reply within dig's one try of 2 s) and the A records, so that what clients got across
    a switch can be read back in order."""

    def __init__(self, cl: Cluster, pod: str, name: str) -> None:
        self.cl, self.pod, self.stop_file = cl, pod, f"/tmp/stop-answers-{pod}"
        script = (f"rm -f {self.stop_file}; while [ ! -f {self.stop_file} ]; do t=$(date +%s.%N); "
                  f"r=$(dig +time=2 +tries=1 +noall +comments +answer {name}); "
                  "s=$(echo \"$r\" | sed -n 's/.*status: \\([A-Z]*\\).*/\\1/p'); "
                  "a=$(echo \"$r\" | awk '$4 == \"A\" {print $5}' | sort | tr '\\n' ' '); "
                  "echo \"$t ${s:-TIMEOUT} $a\"; sleep 0.05; done")
        self.proc = subprocess.Popen(
            [str(cl.bin["kubectl"]), f"--kubeconfig={cl.kubeconfig}", "-n", CLIENT_NS, "exec", pod, "--",
             "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def stop(self) -> list[tuple[float, str, list[str]]]:
        client_sh(self.cl, f"touch {self.stop_file}", pod=self.pod)
        out, _ = self.proc.communicate(timeout=30)
        replies = []
        for line in out.splitlines():
            t, status, *addresses = line.split()
            replies.append((float(t), status, sorted(addresses)))
        return replies


def switch_window(replies: list[tuple[float, str, list[str]]], want: list[str]) -> tuple[float, dict[str, int]]:
    """(seconds from the first reply that is not `want` to the next one that is, over the longest such
    run; the count of each kind of reply), a kind being the rcode, or WRONG for an answer other than `want`."""
    kinds: dict[str, int] = {}
    longest, began = 0.0, None
    for t, status, addresses in replies:
        kind = "WRONG" if status == "NOERROR" and addresses != want else status
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "NOERROR":
            if began is not None:
                longest, began = max(longest, t - began), None
        elif began is None:
            began = t
    if began is not None:
        longest = max(longest, replies[-1][0] - began)
    return longest, kinds


def reload_to_transfer(log: str, source: str) -> float:
    """From `kubectl logs --timestamps` of a CoreDNS: seconds from the last reload before the last transfer of
    the zone from `source` to that transfer, the most a reload leaves its new `secondary` without the zone."""
    stamps: list[tuple[datetime.datetime, str]] = []
    for line in log.splitlines():
        stamp, _, text = line.partition(" ")
        stamps.append((datetime.datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00"), text))
    transfer = max(i for i, (_, text) in enumerate(stamps) if f"Transferred: {ZONE}. from {source}:5353" in text)
    reload = max(i for i, (_, text) in enumerate(stamps[:transfer]) if text.endswith("[INFO] Reloading"))
    return (stamps[transfer][0] - stamps[reload][0]).total_seconds()


def test_node_local_dns_as_a_secondary_follows_one_pod_by_itself_across_a_deletion_and_a_rollout(
        cluster: Cluster, imports: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    """docs/transfers.md's per-node secondary, its steps as written: mcsdns's flags file gets the doc's
    --transfer-to and --notify and the component primaries (the headless Service mcsdns-primaries);
    node-local-dns's clusterset.local block imports the file that deploy/examples/nodelocaldns-secondary.yaml's
    follower writes, the DaemonSet patched with that file. node-local-dns loads the zone by AXFR from the pod
    the follower chose (its log says from whom), the NodeLocal client pod resolves every name form from it,
    and a changed ServiceImport reaches that pod after a NOTIFY node-local-dns accepted and a new transfer.
    Then that mcsdns pod is deleted and, later, every pod replaced by a rollout: nothing is edited by hand,
    node-local-dns transfers from a current pod by itself and follows the next change by NOTIFY, and a
    client asking all along gets the zone's answer or, for a moment, SERVFAIL, never a wrong one."""
    flags_lines, components, block, patch_command = doc_blocks("A per-node secondary: NodeLocal DNSCache holding the zone")
    assert components.split() == ["components:", "-", "../../components/primaries"]
    pod = redeploy_with_flags(cluster, tmp_path_factory.mktemp("overlay-transfers"), flags_lines.strip().splitlines(),
                              ("primaries",))
    assert "--notify=169.254.20.10:53" in kubectl(cluster, "-n", NS, "exec", pod["metadata"]["name"], "--", "cat",
                                                  "/etc/mcsdns/flags")
    example = "deploy/examples/nodelocaldns-secondary.yaml"
    assert patch_command.split() == ["kubectl", "-n", "kube-system", "patch", "daemonset", "node-local-dns",
                                     "--patch-file", example]
    patch = (ROOT / example).read_text()
    assert "--name=mcsdns-primaries.mcsdns.svc.cluster.local." in patch and CLUSTER_DOMAIN == "cluster.local"
    patch_file = tmp_path_factory.mktemp("nodelocal-patch") / "nodelocaldns-secondary.yaml"
    patch_file.write_text(patch.replace("image: registry.example.com/platform/mcsdns:0.1.0", f"image: {IMAGE}")
                          .replace("__PILLAR__DNS__SERVER__", DNS_SERVICE_IP))  # the header's step 3
    cluster.add_address(f"{NODE_LOCAL_DNS_IP}/32", "lo")
    for obj in node_local_dns_objects(node_local_corefile(block=block)):
        kubectl(cluster, "apply", "-f", "-", input=json.dumps(obj))
    kubectl(cluster, "-n", "kube-system", "patch", "daemonset", "node-local-dns", "--patch-file", str(patch_file))
    kubectl(cluster, "-n", "kube-system", "rollout", "restart", "daemonset/node-local-dns")
    kubectl(cluster, "-n", "kube-system", "rollout", "status", "daemonset/node-local-dns", "--timeout=120s", timeout=150)
    node_local = "client-nodelocal"  # test_node_local_dns_cache_...'s pod: 169.254.20.10 its only nameserver

    def node_local_log(container: str = "node-cache") -> str:
        return kubectl(cluster, "-n", "kube-system", "logs", "daemonset/node-local-dns", "-c", container)

    def transferred_from() -> str | None:
        """The mcsdns pod address node-local-dns's last transfer came from."""
        found = re.findall(rf"Transferred: {re.escape(ZONE)}\. from (\S+):5353", node_local_log())
        return found[-1] if found else None

    def live_ips() -> set[str]:
        return {p["status"].get("podIP") for p in pods(cluster, NS) if not p["metadata"].get("deletionTimestamp")}

    def pod_dig(*args: str) -> list[str]:
        return sorted(client_sh(cluster, "dig +time=2 +tries=2 +short " + " ".join(args), pod=node_local,
                                check=False).stdout.split())

    def change_reaches_the_pod(ip: str, from_pod: str) -> None:
        cluster.api().apply(dict(imports["web"], spec=dict(imports["web"]["spec"], ips=[ip])))
        wait_for(lambda: pod_dig(web) == [ip], 30, f"the change to {ip} through node-local-dns", 0.2)
        assert f"Notify from {from_pod} for {ZONE}.: checking transfer" in node_local_log(), node_local_log()[-3000:]

    # The file does not exist when node-cache starts (the glob imports nothing): the zone comes with the
    # first `reload` after the follower wrote it (30 s, +/- 15 s).
    wait_for(lambda: transferred_from() in live_ips(), 120, "node-local-dns's AXFR from a current mcsdns pod", 1)
    pod_ip = transferred_from()
    assert f"transferring from mcsdns pod {pod_ip}:5353" in node_local_log("mcsdns-primary")
    primary = next(p for p in pods(cluster, NS) if p["status"].get("podIP") == pod_ip)
    web, db = f"web.{DEMO}.svc.{ZONE}", f"db.{DEMO}.svc.{ZONE}"
    direct = f"@{service_ip(cluster, NS)}"
    web_ips, db_ips = (sorted(dig(cluster, "+short", direct, name).split()) for name in (web, db))
    assert pod_dig(web) == web_ips and pod_dig(db) == db_ips
    assert pod_dig(f"db-0.c1.{db}") == ["10.245.1.1"]
    assert pod_dig("SRV", f"_http._tcp.{web}") == sorted(["0", "100", "80", f"{web}."])
    nx = client_sh(cluster, f"dig +noall +comments +authority nope.{DEMO}.svc.{ZONE}", pod=node_local).stdout
    assert "status: NXDOMAIN" in nx and "flags: qr aa" in nx and f"ns.dns.{ZONE}. hostmaster.{ZONE}." in nx, nx
    loads = node_local_log().count(f"Transferred: {ZONE}. from {pod_ip}:5353")
    change_reaches_the_pod("10.245.0.12", pod_ip)
    assert node_local_log().count(f"Transferred: {ZONE}. from {pod_ip}:5353") > loads

    # The pod node-local-dns follows goes; a client asks all along.
    loop = AnswerLoop(cluster, node_local, web)
    time.sleep(2)
    deleted = time.monotonic()
    kubectl(cluster, "-n", NS, "delete", "pod", primary["metadata"]["name"], "--wait=false")
    wait_for(lambda: transferred_from() not in (None, pod_ip), 180, "node-local-dns transferring from another pod", 1)
    moved = time.monotonic() - deleted
    new_ip = transferred_from()
    assert new_ip in live_ips()
    assert (f"{pod_ip} is no longer listed by mcsdns-primaries.mcsdns.svc.cluster.local.; transferring from mcsdns "
            f"pod {new_ip}:5353") in node_local_log("mcsdns-primary"), node_local_log("mcsdns-primary")
    time.sleep(3)
    replies = loop.stop()
    window, kinds = switch_window(replies, ["10.245.0.12"])
    gap = reload_to_transfer(kubectl(cluster, "-n", "kube-system", "logs", "daemonset/node-local-dns", "-c",
                                     "node-cache", "--timestamps"), new_ip)
    print(f"pod deleted: node-local-dns transferred from {new_ip} {moved:.0f} s later, {gap * 1000:.0f} ms after "
          f"its reload began; {len(replies)} queries across it ({replies[-1][0] - replies[0][0]:.0f} s): {kinds}; "
          f"the longest run without the answer {window:.2f} s")
    assert gap < 5
    assert kinds.get("NOERROR", 0) > 20 and "WRONG" not in kinds and "NXDOMAIN" not in kinds, replies
    assert window < 10, [r for r in replies if r[1] != "NOERROR"]
    change_reaches_the_pod("10.245.0.13", new_ip)

    # A rollout replaces every pod, one at a time: node-local-dns ends on a current one and follows it.
    loop = AnswerLoop(cluster, node_local, web)
    kubectl(cluster, "-n", NS, "rollout", "restart", "deployment/mcsdns")
    rollout(cluster, NS)
    wait_for(lambda: len(live_ips()) == 2 and transferred_from() in live_ips(), 180,
             "node-local-dns transferring from a pod of the rollout", 1)
    time.sleep(3)
    replies = loop.stop()
    window, kinds = switch_window(replies, ["10.245.0.13"])
    gap = reload_to_transfer(kubectl(cluster, "-n", "kube-system", "logs", "daemonset/node-local-dns", "-c",
                                     "node-cache", "--timestamps"), transferred_from())
    print(f"rollout: node-local-dns follows {transferred_from()} ({gap * 1000:.0f} ms from its last reload to the "
          f"transfer); {len(replies)} queries across it ({replies[-1][0] - replies[0][0]:.0f} s): {kinds}; "
          f"the longest run without the answer {window:.2f} s; moves: "
          + ", ".join(re.findall(r"transferring from mcsdns pod (\S+)", node_local_log("mcsdns-primary"))))
    assert "WRONG" not in kinds and "NXDOMAIN" not in kinds and window < 10, replies
    change_reaches_the_pod("10.245.0.16", transferred_from())


def test_a_knot_daemonset_holds_the_zone_and_follows_notify_sent_to_its_service_name(
        cluster: Cluster, client: str, imports: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    """deploy/examples/knot-secondary.yaml as its header says: mcsdns with the transfers component (the
    TSIG Secret, the headless Service mcsdns-primaries) and the flags it names, the NOTIFY target being
    the Knot pods' headless Service by name; Knot (a DaemonSet, the key read from the same Secret) loads
    the zone signed from one mcsdns pod it chose itself, a client pod asks the node-local Service and
    gets what mcsdns answers, and a changed ServiceImport reaches it by a signed NOTIFY (sent to the
    address mcsdns looked the name up to) and an IXFR. Then that mcsdns pod is deleted, as a rollout or a
    drained node does: Knot moves to another ready pod (a whole transfer from there) and follows the
    next change from it."""
    secret = "xfr-key:hmac-sha256:" + base64.b64encode(bytes(range(200, 232))).decode()
    cluster.kubectl("create", "namespace", NS, check=False)  # (there already, unless this test runs alone)
    kubectl(cluster, "-n", NS, "delete", "secret", "mcsdns-tsig", "--ignore-not-found")
    kubectl(cluster, "-n", NS, "create", "secret", "generic", "mcsdns-tsig", f"--from-literal=tsig.key={secret}")
    example = (ROOT / "deploy" / "examples" / "knot-secondary.yaml").read_text()
    flag_lines = [line.strip("# ").strip() for line in example.splitlines() if line.startswith("#        --")]
    assert flag_lines == ["--transfer-to=<your pod CIDR>", f"--notify=knot-secondary.{NS}.svc.{CLUSTER_DOMAIN}.:5353"]
    redeploy_with_flags(cluster, tmp_path_factory.mktemp("overlay-knot"),
                        [line.replace("<your pod CIDR>", POD_CIDR) for line in flag_lines], ("transfers",))
    assert "MCSDNS_POD_IP" not in example  # nothing to fill in: Knot finds its mcsdns pod itself
    manifest = example.replace("image: cznic/knot:3.3", "image: localhost/knot:dev")
    kubectl(cluster, "apply", "-f", "-", input=manifest)
    rollout_status = cluster.kubectl("-n", NS, "rollout", "status", "daemonset/knot-secondary", "--timeout=180s",
                                     timeout=200, check=False)
    if rollout_status.returncode != 0:
        selector = "app.kubernetes.io/name=knot-secondary"
        described = cluster.kubectl("-n", NS, "describe", "pods", "-l", selector, check=False).stdout
        logs = cluster.kubectl("-n", NS, "logs", "-l", selector, "--tail=50", "--previous", check=False)
        raise AssertionError(f"the Knot DaemonSet is not ready:\n{described}\n{logs.stdout}{logs.stderr}")

    def knot_log() -> str:
        return kubectl(cluster, "-n", NS, "logs", "daemonset/knot-secondary", "-c", "knotd")

    def knot_follows() -> str | None:
        """The mcsdns pod address Knot's last finished AXFR came from."""
        found = re.findall(r"AXFR, incoming, remote (\S+)@5353, finished", knot_log())
        return found[-1] if found else None

    def live() -> dict[str, dict]:
        return {p["status"].get("podIP"): p for p in pods(cluster, NS) if not p["metadata"].get("deletionTimestamp")}

    # The cluster DNS caches the Service's addresses (`cache 30`), and the node-local secondary test's
    # follower keeps that answer warm, so the list may still hold pods the redeploy above replaced: the
    # start script chooses only an address that serves transfers (a signed IXFR at its serial; a pod in
    # its lameduck refuses), and the follower checks it every 2 s; what counts is that Knot ends on a
    # live pod that one of the two chose.
    wait_for(lambda: knot_follows() in live(), 90, "Knot's signed AXFR from a current mcsdns pod", 1)
    pod_ip = knot_follows()
    primary = live()[pod_ip]
    chosen = knot_log() + kubectl(cluster, "-n", NS, "logs", "daemonset/knot-secondary", "-c", "primary")
    assert (f"primary.sh: starting knotd with mcsdns pod {pod_ip}" in chosen
            or f"primary.sh: transferred the zone from mcsdns pod {pod_ip}" in chosen), "the script's choice"
    local = service_ip(cluster, NS, "knot-secondary-local")
    web, db = f"web.{DEMO}.svc.{ZONE}", f"db.{DEMO}.svc.{ZONE}"
    direct = f"@{service_ip(cluster, NS)}"
    # The node-local Service and its pod are new: a question to it right after Knot's AXFR got no reply
    # at all in two runs of three (dig's exit 9; the node's service rules not yet written, by all signs),
    # and was answered a little later. A client retries; so does this, before comparing answers.
    wait_for(lambda: dig(cluster, "+short", f"@{local}", web).split(), 60, "the node-local Service to answer", 1)
    for args in ((web,), (db,), (f"db-0.c1.{db}",), ("SRV", f"_http._tcp.{web}"), ("AAAA", web)):
        assert sorted(dig(cluster, "+short", f"@{local}", *args).split()) == sorted(
            dig(cluster, "+short", direct, *args).split()), args
    nx = dig(cluster, "+noall", "+comments", f"@{local}", f"nope.{DEMO}.svc.{ZONE}")
    assert "status: NXDOMAIN" in nx and "flags: qr aa" in nx, nx

    # The NOTIFY target is a cluster DNS name: the precondition is that the primary pod resolves it (the
    # cluster's CoreDNS learns the new headless Service from its own watch; here, after the earlier tests'
    # CoreDNS restarts, that has taken tens of seconds). Three answers in a row, as mcsdns will ask.
    target = f"knot-secondary.{NS}.svc.{CLUSTER_DOMAIN}."
    resolved: list[bool] = []

    def resolves() -> bool:
        got = cluster.kubectl("-n", NS, "exec", primary["metadata"]["name"], "--", "python", "-c",
                              f"import socket; socket.getaddrinfo({target!r}, 5353)", check=False)
        resolved.append(got.returncode == 0)
        return resolved[-3:] == [True] * 3

    wait_for(resolves, 120, f"the mcsdns pod resolving {target}", 1)
    cluster.api().apply(dict(imports["web"], spec=dict(imports["web"]["spec"], ips=["10.245.0.14"])))
    started = time.monotonic()
    try:
        wait_for(lambda: dig(cluster, "+short", f"@{local}", web).split() == ["10.245.0.14"], 45,
                 "the change through the Knot secondary", 0.2)
    except AssertionError as err:
        seen = []
        for pod in pods(cluster, NS):
            name = pod["metadata"]["name"]
            text = pod_metrics(cluster, name)
            seen.append(f"{name} {pod['status'].get('podIP')}: "
                        + " ".join(line for line in text.splitlines() if line.startswith(("mcsdns_notify", "mcsdns_transfers_total", "mcsdns_zone_serial")))
                        + "\n" + cluster.kubectl("-n", NS, "logs", name, "--tail=20", check=False).stdout)
        raise AssertionError(f"{err}\nmcsdns direct: {dig(cluster, '+short', direct, web)}\n" + "\n".join(seen)
                             + f"\nknot:\n{knot_log()[-3000:]}") from None
    print(f"Knot answered the change {time.monotonic() - started:.2f} s after it was applied")
    log = knot_log()
    assert re.search(rf"notify, incoming, remote {re.escape(pod_ip)}@\d+, serial \d+", log), log
    assert f"IXFR, incoming, remote {pod_ip}@5353" in log and "AXFR-style" not in log, log
    metrics = pod_metrics(cluster, primary["metadata"]["name"])
    acknowledged = re.search(r'mcsdns_notify_total\{result="acknowledged"\} (\S+)', metrics)
    assert acknowledged and float(acknowledged.group(1)) >= 1, metrics

    # The pod Knot transfers from goes (a rollout replaces every pod this way, one at a time): from its
    # SIGTERM on it refuses the follower's transfer probe (every 2 s), so Knot is moved to another pod that
    # serves, transfers the zone whole from it, and follows the next change from there.
    kubectl(cluster, "-n", NS, "delete", "pod", primary["metadata"]["name"], "--wait=false")
    wait_for(lambda: knot_follows() not in (None, pod_ip), 90, "Knot transferring from another mcsdns pod", 1)
    moved_to = knot_follows()
    assert f"primary.sh: transferred the zone from mcsdns pod {moved_to}" in kubectl(
        cluster, "-n", NS, "logs", "daemonset/knot-secondary", "-c", "primary"), "the follower's switch"
    cluster.api().apply(dict(imports["web"], spec=dict(imports["web"]["spec"], ips=["10.245.0.15"])))
    wait_for(lambda: dig(cluster, "+short", f"@{local}", web).split() == ["10.245.0.15"], 45,
             "a change after the move, through the Knot secondary", 0.2)
    assert re.search(rf"IXFR, incoming, remote {re.escape(moved_to)}@5353", knot_log()), knot_log()[-3000:]


# --------------------------------------------------------------------------- five minutes of it all at once

SOAK_MINUTES = 5
# docs/transfers.md "A per-node Knot secondary": how far Knot's answers may lag the API while the mcsdns
# pod it follows is replaced. The follower chooses among the addresses the cluster DNS lists, which lag the
# pods by up to its cache time (kubeadm's `ttl 30`, `cache 30`): when every listed pod has gone, Knot waits
# for the list (30 s), then knotc's reload waits for Knot's refresh from the dead pod to time out (2 s,
# the example's tcp-remote-io-timeout), then the follower's probe (2 s, and 1 s per query to a dead address).
KNOT_LAG_BOUND = 40.0
# docs/reliability.md "Known limits": after the API server comes back, answers follow within the watch's
# reconnect backoff (sources/watching.py: doubling to BACKOFF_CAP, jittered by +-20%) plus the stub zone's
# window. The one excuse for a late answer through the stub zone: its window follows the kube-apiserver's
# restart and it is no staler than that.
AFTER_API_OUTAGE_BOUND = PROPAGATION_WINDOW + 1.2 * BACKOFF_CAP
# docs/reliability.md "In the real cluster": flat is each pod's RSS and open fds over its life.
RSS_GROWTH_MB = 4.0
FDS_GROWTH = 4


def restart_counts(cl: Cluster) -> dict[str, int]:
    """namespace/pod/container -> restartCount, in the namespaces the soak's report covers."""
    counts = {}
    for namespace in (NS, "kube-system", CLIENT_NS):
        for pod in json.loads(kubectl(cl, "-n", namespace, "get", "pods", "-o", "json"))["items"]:
            for c in pod["status"].get("containerStatuses", []):
                counts[f"{namespace}/{pod['metadata']['name']}/{c['name']}"] = c.get("restartCount", 0)
    return counts


def test_five_minutes_of_rollouts_deletions_an_apiserver_restart_and_churn_lose_nothing(
        cluster: Cluster, tmp_path: Path) -> None:
    """`python -m benchmarks.cluster_soak --minutes 5` on this module's cluster (the hour's run is
    benchmarks/results/cluster_soak.json): client pods ask every name form through the stub zone (UDP,
    TCP) and a Knot secondary, deploy/examples/knot-secondary.yaml as written, while imports change every
    3 s, mcsdns rolls out 3 times, a pod is deleted twice (once forced), the kube-apiserver restarts and
    CoreDNS rolls out. What a user reads from the report: every event happened, no query lost, no wrong
    answer through the stub zone but a late one after the kube-apiserver's restart, within
    AFTER_API_OUTAGE_BOUND (the watch's documented reconnect backoff), Knot's answers never further behind the API than KNOT_LAG_BOUND (so a
    pod it followed going away leaves it on a live one within seconds), mcsdns's memory and fds flat,
    and no restart other than those the soak made.

    Last in the file: the soak deploys mcsdns, the Knot example and a client pod of its own, and removes
    them and the stub zone at the end. What the tests before left in mcsdns's namespace (the Knot example
    with its key, mcsdns from three installs) goes first, and node-local-dns, which the soak does not use."""
    kubectl(cluster, "delete", "namespace", NS, "--ignore-not-found", "--wait=true", "--timeout=180s", timeout=200)
    kubectl(cluster, "-n", "kube-system", "delete", "daemonset", "node-local-dns", "--ignore-not-found",
            "--wait=true", "--timeout=120s", timeout=140)
    before = restart_counts(cluster)
    out = tmp_path / "cluster_soak.json"
    started = time.monotonic()
    try:
        cluster_soak.main(["--minutes", str(SOAK_MINUTES), "--cluster-dir", str(cluster.dir), "--out", str(out)])
    finally:
        # The soak restarted the kube-apiserver through its own Cluster object and recorded the new process
        # in state.json: read it again, so that this fixture's `down` stops that process and not the old one.
        cluster.state = State.load(cluster.dir)
    took = time.monotonic() - started
    report = json.loads(out.read_text())
    print(cluster_soak.text(report))
    print(f"the test took {took:.0f} s ({report['timings_s']})")
    summary = json.dumps({k: report[k] for k in ("events", "by_path", "loss_windows", "knot")}, indent=1)[:6000]

    events = [e["event"] for e in report["events"]]
    assert not [e for e in events if " failed: " in e], events
    assert sum(e.startswith("mcsdns rollout ") for e in events) == 3, events
    assert sum(e.startswith("mcsdns pod ") and " deleted" in e for e in events) == 2, events
    assert "kube-apiserver restart" in events and "CoreDNS rollout" in events, events
    for phase in report["phases"]:  # every path asked all along
        assert all(sent > 0 for sent, _, _ in phase["by_path"].values()), phase

    assert report["lost"] == 0, summary
    late = [(w["after_event"], a) for w in report["loss_windows"] for a in w["wrong_answers"] if a["proto"] in ("udp", "tcp")]
    assert sum(report["by_path"][path]["wrong"] for path in ("udp", "tcp")) == len(late), summary
    for after, answer in late:  # through the stub zone: right, or late only after the API server's outage
        assert after.startswith("kube-apiserver") and answer["stale_by_s"] <= AFTER_API_OUTAGE_BOUND, summary
    knot = report["by_path"]["knot"]
    assert knot["stale_max_s"] is not None and knot["stale_max_s"] <= KNOT_LAG_BOUND, summary
    assert all(w["wrong_never_held"] == 0 for w in report["loss_windows"]), summary
    # Knot followed changes by IXFR, and moved at least once per rollout (a rollout replaces its pod), each
    # time to a pod that then served it the whole zone (never to a dead address the cluster DNS still listed).
    assert report["knot"]["ixfr_finished"] > 0 and len(report["knot"]["switches"]) >= 3, summary
    assert report["knot"]["switched_to_without_axfr"] == [], summary

    memory = report["mcsdns_memory"]
    assert any(m["samples"] >= 3 for m in memory), memory
    for m in memory:
        assert m["rss_mb_max"] - m["rss_mb_first"] <= RSS_GROWTH_MB, memory
        assert m["fds_max"] - m["fds_first"] <= FDS_GROWTH, memory
    new = [r for r in report["restarts_not_caused"]
           if before.get(f"{r['pod']}/{r['container']}") != r["restarts"]]
    assert not new, new
