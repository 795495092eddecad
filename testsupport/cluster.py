"""A real one-node Kubernetes cluster on this machine, for running mcsdns where users run it.

    python3 -m testsupport.cluster up --dir DIR     # returns once the node is Ready and cluster
                                                    # DNS answers; prints the kubeconfig path last
    python3 -m testsupport.cluster down --dir DIR   # stops and removes everything `up` made

The cluster: etcd and kube-apiserver (testsupport/testbed.py's, bound to a node address pods can
reach), kube-controller-manager, kube-scheduler, containerd (its own root, state and socket) with
runc, a kubelet, the CNI bridge/host-local/portmap/loopback plugins and kube-proxy (iptables), all
built by tools/testbin/build.sh and build-node.sh. Cluster DNS is the testbin's CoreDNS deployed as
kubeadm deploys it (ConfigMap `coredns`, Deployment `coredns`, Service `kube-dns` in kube-system,
the kubelet's clusterDNS pointing at it); the mcs-api ServiceImport CRD is installed. Images come
from tools/testbin/build-images.sh (no registry is reachable) and are imported into containerd.

Everything `up` creates is recorded in DIR/state.json as it is created -- process IDs (with their
start times, so a reused PID is never signalled), network devices, sysctls, cgroups, netns mounts --
so `down` (or a failed `up`) removes exactly that, whatever state the cluster reached, and a second
`down` finds nothing left to do.

Traffic stays on the machine: the node address lives on a port-less bridge of our own, the pod and
Service ranges avoid the machine's networks (checked by `up`), a route keeps the Service range on
that bridge even before kube-proxy programs it, and the cluster DNS's upstream is the node address
itself, where nothing answers port 53 (so names outside the cluster fail fast instead of leaving).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testsupport.testbed import ApiError, KubeClient, Testbed, TestbedError, testbin_cache, write_kubeconfig

NODE_NAME = "mcsdns-node"
NODE_IP = "10.250.0.1"  # on NODE_BRIDGE, a bridge with no ports: a local address pods can route to
NODE_BRIDGE = "mcsdns-node"
POD_BRIDGE = "mcsdns-cni0"
POD_CIDR = "10.244.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = "mcsdns-cluster"  # the kubelet's cgroupRoot, in every v1 hierarchy
# Fixed node ports (the kubelet's are fixed in a real cluster too); `up` checks them first.
KUBELET_PORT, KUBELET_HEALTHZ_PORT = 10250, 10248
PROXY_HEALTHZ_PORT, PROXY_METRICS_PORT = 10256, 10249
IMAGES = ("pause", "coredns", "dnsutils", "knot", "mcsdns")
CNI_BIN = Path("/usr/lib/cni")
NETNS_DIR = Path("/var/run/netns").resolve()  # /run/netns: the path mountinfo shows
KUBELET_FIXED_DIR = Path("/var/lib/kubelet")
SYSCTLS = {"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"}
UP_TIMEOUT = 240.0

# kubeadm's default Corefile (kubeadm 1.34, cmd/kubeadm/app/phases/addons/dns), as users have it.
KUBEADM_COREFILE = """\
.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""


class ClusterError(RuntimeError):
    """`up` could not finish; the message says why (and what was cleaned up)."""


# --------------------------------------------------------------------------- #
# The record of what `up` created
# --------------------------------------------------------------------------- #


@dataclass
class State:
    """DIR/state.json: what to undo. Saved after every step so a crash mid-`up` loses nothing."""

    path: Path
    data: dict[str, Any]

    @classmethod
    def load(cls, directory: Path) -> State:
        path = directory / "state.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        data.setdefault("processes", [])
        data.setdefault("devices", [])
        data.setdefault("sysctls", {})
        data.setdefault("cgroups", [])
        data.setdefault("netns_before", None)
        data.setdefault("addresses", [])  # [address/prefix, device] added to the node's devices
        return cls(path, data)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)

    def add_process(self, name: str, pid: int) -> None:
        self.data["processes"].append({"name": name, "pid": pid, "start": _start_time(pid)})
        self.save()


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: with the PID, names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(record: dict) -> bool:
    """The recorded process still runs (a zombie of ours is reaped and counts as gone)."""
    if record["start"] is None or _start_time(record["pid"]) != record["start"]:
        return False
    try:
        state = Path(f"/proc/{record['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        try:
            os.waitpid(record["pid"], os.WNOHANG)
        except ChildProcessError:
            pass
        return False
    return True


def _run(*argv: str | Path, check: bool = True, timeout: float = 60.0, **kw: Any) -> subprocess.CompletedProcess:
    """Run a command; with ``check``, a failure is a ClusterError carrying its stderr."""
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise ClusterError(f"`{' '.join(map(str, argv))}` failed ({proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()}")
    return proc


# --------------------------------------------------------------------------- #
# Preflight: name what is missing before starting anything
# --------------------------------------------------------------------------- #


def binaries(cache: Path) -> dict[str, Path]:
    """Every executable the cluster runs, by name."""
    found = {name: cache / "bin" / name for name in (
        "etcd", "kube-apiserver", "kubectl", "kubelet", "kube-proxy", "kube-controller-manager",
        "kube-scheduler")}
    for tool in ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "ip"):
        path = shutil.which(tool) or next((f"{d}/{tool}" for d in ("/usr/sbin", "/sbin")
                                           if os.access(f"{d}/{tool}", os.X_OK)), None)
        found[tool] = Path(path) if path else Path(tool)
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        found[f"cni/{plugin}"] = CNI_BIN / plugin
    return found


def image_archives(cache: Path) -> dict[str, Path]:
    return {name: cache / "images" / f"{name}.tar" for name in IMAGES}


PACKAGES = {"containerd": "containerd", "containerd-shim-runc-v2": "containerd", "ctr": "containerd",
            "runc": "runc", "iptables": "iptables", "ip": "iproute2"}


def preflight(cache: Path) -> list[str]:
    """Reasons this machine cannot run the cluster now; empty when it can."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (containerd, runc, network devices, iptables)")
    for name, path in binaries(cache).items():
        if not (path.is_file() and os.access(path, os.X_OK)):
            if name.startswith("cni/"):
                problems.append(f"CNI plugin {path} missing (apt-get install containernetworking-plugins)")
            elif name in PACKAGES:
                problems.append(f"{name} not found (apt-get install {PACKAGES[name]})")
            else:
                problems.append(f"{path} missing (tools/testbin/build.sh, then tools/testbin/build-node.sh)")
    for name, path in image_archives(cache).items():
        if not path.exists():
            problems.append(f"image archive {path} missing (tools/testbin/build-images.sh)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        problems.append("kernel has no overlay file system (containerd's overlayfs snapshotter)")
    for controller in ("cpu", "memory", "pids"):
        if not (Path("/sys/fs/cgroup") / controller / "cgroup.procs").exists():
            problems.append(f"cgroup v1 controller {controller} is not mounted at /sys/fs/cgroup/{controller}")
    if not Path("/proc/sys/net/bridge").exists():
        problems.append("no br_netfilter (/proc/sys/net/bridge): Service traffic between pods on the bridge")
    if not problems:
        problems += _network_conflicts()
    return problems


def require_node(cache: Path | None = None) -> None:
    """Skip the calling test (a failure in CI, like any missing real part) where `preflight` finds
    this machine cannot run the one-node cluster."""
    import pytest  # (only tests call this; benchmarks and tools use preflight's list)

    problems = preflight(cache or testbin_cache())
    if problems:
        pytest.skip("this machine cannot run a one-node cluster: " + "; ".join(problems))


def _network_conflicts() -> list[str]:
    """Our ranges must not overlap the machine's networks or resolver, nor our devices exist."""
    problems = []
    ours = [ipaddress.ip_network(n) for n in (POD_CIDR, SERVICE_CIDR, f"{NODE_IP}/32")]
    routes = _run("ip", "-j", "route", "show", "table", "all", check=False).stdout
    addrs = json.loads(_run("ip", "-j", "addr").stdout or "[]")
    taken: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for link in addrs:
        if link["ifname"] in (NODE_BRIDGE, POD_BRIDGE):
            problems.append(f"network device {link['ifname']} exists: another cluster is up "
                            "(python3 -m testsupport.cluster down --dir DIR)")
        for info in link.get("addr_info", []):
            taken.append((f"address of {link['ifname']}",
                          ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False)))
    for route in json.loads(routes or "[]"):
        dst = route.get("dst")
        if dst and dst != "default":
            try:
                taken.append((f"route {dst}", ipaddress.ip_network(dst, strict=False)))
            except ValueError:
                pass
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            try:
                taken.append(("resolver", ipaddress.ip_network(parts[1])))
            except ValueError:
                pass
    for net in ours:
        for what, other in taken:
            if other.version == net.version and other.overlaps(net) and other.prefixlen > 0:
                if other.is_loopback or other.is_link_local:
                    continue
                problems.append(f"{net} overlaps the machine's {what} ({other})")
    for port, host in ((KUBELET_PORT, "0.0.0.0"), (KUBELET_HEALTHZ_PORT, "127.0.0.1"),
                       (PROXY_HEALTHZ_PORT, "127.0.0.1"), (PROXY_METRICS_PORT, "127.0.0.1")):
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as err:
                problems.append(f"port {port} is in use ({err.strerror}): the kubelet/kube-proxy need it")
    return problems


# --------------------------------------------------------------------------- #
# The cluster
# --------------------------------------------------------------------------- #


class ControlPlane(Testbed):
    """testbed.py's etcd + kube-apiserver, reachable from pods and configured as a cluster's.

    Differences, each what a kubeadm cluster has: the apiserver listens on the node address
    (pods reach it through the `kubernetes` Service), ServiceAccount admission is on (pods get
    tokens), the Node authorizer is on for the kubelet, and the Service range is the cluster's.
    """

    __test__ = False

    def serving_sans(self) -> tuple[str, ...]:
        first_service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
        return (self.host, first_service_ip, "kubernetes", "kubernetes.default",
                "kubernetes.default.svc", f"kubernetes.default.svc.{CLUSTER_DOMAIN}")

    def _apiserver_argv(self) -> list[str]:
        assert self.dir is not None
        replace = {
            "--service-cluster-ip-range": SERVICE_CIDR,
            "--authorization-mode": "Node,RBAC",
            "--disable-admission-plugins": None,
            "--enable-admission-plugins": "NodeRestriction",
            "--kubelet-client-certificate": str(self.admin.cert_path),
            "--kubelet-client-key": str(self.admin.key_path),
            # By address: the node's name is not in the machine's DNS (and must not be asked there).
            "--kubelet-preferred-address-types": "InternalIP",
            "--service-account-issuer": f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
            "--shutdown-watch-termination-grace-period": None,  # the test bed's quick stop; kubeadm keeps the default
        }
        argv = [a for a in super()._apiserver_argv() if a.split("=", 1)[0] not in replace]
        return argv + [f"{flag}={value}" for flag, value in replace.items() if value is not None]


class Cluster:
    """`up` and `down` of the one-node cluster in ``directory`` (see the module docstring)."""

    def __init__(self, directory: Path, cache: Path | None = None) -> None:
        self.dir = directory.resolve()
        self.cache = cache or testbin_cache()
        self.bin = binaries(self.cache)
        self.state = State.load(self.dir)

    # -- paths -------------------------------------------------------------- #

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def api(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120.0,
                input: str | None = None) -> subprocess.CompletedProcess:
        """The testbin's kubectl against this cluster (what a user types)."""
        return _run(self.bin["kubectl"], f"--kubeconfig={self.kubeconfig}", *args, check=check,
                    timeout=timeout, input=input)

    # -- up ------------------------------------------------------------------ #

    def up(self, timeout: float = UP_TIMEOUT) -> Path:
        """Start everything; return the admin kubeconfig once the node is Ready and DNS answers."""
        problems = preflight(self.cache)
        if problems:
            raise ClusterError("cannot start the cluster:\n  " + "\n  ".join(problems))
        if any(_alive(p) for p in self.state.data["processes"]):
            raise ClusterError(f"a cluster is already up in {self.dir} (down --dir {self.dir} first)")
        self.state.data.update(processes=[], devices=[], cgroups=[], sysctls={})
        self.state.data["started"] = time.time()
        self.state.save()
        deadline = time.monotonic() + timeout
        try:
            self._network()
            self._control_plane()
            self._containerd()
            self._node()
            self._wait(lambda: self._node_ready(), deadline, "node Ready", "kubelet")
            self._cluster_dns(deadline)
            self.state.data["ready"] = time.time()
            self.state.save()
        except BaseException as err:
            logs = self._log_tails()
            self.down()
            if isinstance(err, (ClusterError, TestbedError, subprocess.SubprocessError, OSError, ApiError)):
                raise ClusterError(f"cluster up failed, everything started was stopped and removed: "
                                   f"{err}\n{logs}") from err
            raise
        return self.kubeconfig

    def _network(self) -> None:
        """The node address on a port-less bridge; the Service range routed to it; forwarding on."""
        self.state.data["netns_before"] = sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.exists() else []
        self.state.data["nft_tables_before"] = _nft_tables()
        # The kubelet writes its device-plugin socket directory there whatever --root-dir says.
        self.state.data["created_var_lib_kubelet"] = not KUBELET_FIXED_DIR.exists()
        _run("ip", "link", "add", NODE_BRIDGE, "type", "bridge")
        self.state.data["devices"].append(NODE_BRIDGE)
        self.state.save()
        _run("ip", "addr", "add", f"{NODE_IP}/32", "dev", NODE_BRIDGE)
        _run("ip", "link", "set", NODE_BRIDGE, "up")
        _run("ip", "route", "add", SERVICE_CIDR, "dev", NODE_BRIDGE)
        # The CNI bridge plugin creates POD_BRIDGE; down removes it too.
        self.state.data["devices"].append(POD_BRIDGE)
        for key, value in SYSCTLS.items():
            path = Path("/proc/sys") / key
            self.state.data["sysctls"].setdefault(key, path.read_text().strip())
            self.state.save()
            path.write_text(value)

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it from here
        with log:
            popen = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.state.add_process(name, popen.pid)
        return popen

    def _control_plane(self) -> None:
        self.plane = ControlPlane(self.cache, directory=self.dir / "control-plane", host=NODE_IP, detach=True)
        try:
            self.plane.start()
        finally:
            for proc in (self.plane.etcd, self.plane.apiserver):
                if proc is not None and proc.pid is not None:
                    self.state.add_process(proc.name, proc.pid)
        pki = self.plane.ca
        write_kubeconfig(self.kubeconfig, self.plane.server_url, pki.cert_path, self.plane.admin, "admin")
        node_cert = pki.issue("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
        write_kubeconfig(self.dir / "kubelet.kubeconfig", self.plane.server_url, pki.cert_path, node_cert,
                         f"system:node:{NODE_NAME}")
        self.plane.install_crd("v0.5.0")
        sa_key = self.plane.service_account.key_path
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--secure-port=0", "--v=1"]
        self._start("kube-controller-manager", [
            self.bin["kube-controller-manager"], *common,
            f"--root-ca-file={pki.cert_path}", f"--service-account-private-key-file={sa_key}",
            f"--cluster-cidr={POD_CIDR}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--use-service-account-credentials=false", "--controllers=*,-nodeipam"])
        self._start("kube-scheduler", [self.bin["kube-scheduler"], *common])

    def _containerd(self) -> None:
        base = self.dir / "containerd"
        (base / "cni").mkdir(parents=True, exist_ok=True)
        (base / "cni" / "10-mcsdns.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "mcsdns-cluster",
            "plugins": [
                {"type": "bridge", "bridge": POD_BRIDGE, "isGateway": True, "ipMasq": False,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": str(base / "ipam"),
                          "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=1))
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (base / "config.toml").write_text(f"""\
version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[{cri}]
  sandbox_image = "localhost/pause:dev"
  # The machine's root lacks CAP_SYS_RESOURCE: lowering oom_score_adj would be denied.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{self.bin['runc']}"
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{base / 'cni'}"
  max_conf_num = 1
""")
        proc = self._start("containerd", [self.bin["containerd"], f"--config={base / 'config.toml'}"])
        deadline = time.monotonic() + 30
        self._wait(lambda: _run(self.bin["ctr"], f"--address={self.socket}", "version", check=False,
                                timeout=10).returncode == 0, deadline, "containerd socket", "containerd",
                   proc)
        for name, archive in image_archives(self.cache).items():
            _run(self.bin["ctr"], f"--address={self.socket}", "-n", "k8s.io", "images", "import",
                 "--all-platforms", archive.resolve(), timeout=180)

    def _node(self) -> None:
        for hierarchy in _cgroup_hierarchies():
            path = hierarchy / CGROUP_ROOT
            path.mkdir(exist_ok=True)
            self.state.data["cgroups"].append(str(path))
        self.state.save()
        (self.dir / "resolv.conf").write_text(f"nameserver {NODE_IP}\n")
        ca = self.plane.ca.cert_path
        kubelet_config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP_ROOT}", "failSwapOn": False,
            "failCgroupV1": False, "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": NODE_IP, "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": KUBELET_HEALTHZ_PORT,
            "clusterDNS": [DNS_SERVICE_IP], "clusterDomain": CLUSTER_DOMAIN,
            # Pods with dnsPolicy Default (CoreDNS) get this: the node address, where nothing
            # answers port 53, so the cluster DNS has no upstream off the node.
            "resolvConf": str(self.dir / "resolv.conf"),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(ca)}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.dir / "pod-logs"),
            "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE to lower it
            "makeIPTablesUtilChains": False,
            "localStorageCapacityIsolation": False,
            "evictionHard": {"memory.available": "100Mi"},
            "imageGCHighThresholdPercent": 100,
            "serializeImagePulls": False,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
        }
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config))
        self._start("kubelet", [
            self.bin["kubelet"], f"--config={self.dir / 'kubelet.yaml'}",
            f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}", f"--root-dir={self.dir / 'kubelet'}",
            f"--cert-dir={self.dir / 'kubelet' / 'pki'}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}", "--v=1"])
        proxy_config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)}, "mode": "iptables",
            "clusterCIDR": POD_CIDR, "hostnameOverride": NODE_NAME, "bindAddress": NODE_IP,
            "healthzBindAddress": f"127.0.0.1:{PROXY_HEALTHZ_PORT}",
            "metricsBindAddress": f"127.0.0.1:{PROXY_METRICS_PORT}",
            "oomScoreAdj": 0,
            # Leave the machine's conntrack sysctls alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
            "iptables": {"localhostNodePorts": False},
            "nodePortAddresses": [f"{NODE_IP}/32"],
        }
        (self.dir / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy_config))
        self._start("kube-proxy", [self.bin["kube-proxy"], f"--config={self.dir / 'kube-proxy.yaml'}", "--v=1"])

    def _node_ready(self) -> bool:
        node = self.api().get("v1", "Node", None, NODE_NAME)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

    def _cluster_dns(self, deadline: float) -> None:
        """CoreDNS as kubeadm deploys it; returns once it answers through the kube-dns Service."""
        api = self.api()
        for obj in coredns_objects():
            api.apply(obj)
        self._wait(lambda: deployment_ready(api, "kube-system", "coredns"), deadline,
                   "Deployment coredns ready", "kubelet")
        self._wait(lambda: self.resolve(f"kubernetes.default.svc.{CLUSTER_DOMAIN}") ==
                   [str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))], deadline,
                   f"cluster DNS answering at {DNS_SERVICE_IP}", "kube-proxy")

    @staticmethod
    def resolve(name: str, server: str = DNS_SERVICE_IP) -> list[str]:
        """A records of ``name`` asked of ``server`` from the node (through kube-proxy's rules)."""
        import dns.message
        import dns.query
        import dns.rdatatype

        reply = dns.query.udp(dns.message.make_query(name, "A"), server, timeout=2)
        return sorted(r.to_text() for rrset in reply.answer for r in rrset if rrset.rdtype == dns.rdatatype.A)

    def _wait(self, check: Callable[[], bool], deadline: float, what: str, log: str,
              proc: subprocess.Popen | None = None) -> None:
        last = "not yet"
        while time.monotonic() < deadline:
            for record in self.state.data["processes"]:
                if not _alive(record):
                    raise ClusterError(f"{record['name']} exited while waiting for {what}; "
                                       f"its log ends:\n{_tail(self.dir / (record['name'] + '.log'))}")
            try:
                if check():
                    return
            except Exception as err:  # noqa: BLE001 - any failure of the check means "not yet"
                last = f"{type(err).__name__}: {err}"
            time.sleep(0.5)
        raise ClusterError(f"timed out waiting for {what} ({last}); {log} log ends:\n"
                           f"{_tail(self.dir / (log + '.log'))}")

    def _log_tails(self) -> str:
        return "\n".join(f"--- {p['name']}.log:\n{_tail(self.dir / (p['name'] + '.log'), 8)}"
                         for p in self.state.data["processes"])

    # -- down ---------------------------------------------------------------- #

    def down(self) -> list[str]:
        """Stop and remove everything `up` recorded; safe to run twice. Returns what it did.

        Every step runs even if an earlier one failed (a half-started or half-stopped cluster is
        the case this exists for); the failures are raised together at the end.
        """
        done: list[str] = []
        errors: list[str] = []
        procs = {p["name"]: p for p in self.state.data["processes"]}
        nobody = {"name": "", "pid": 0, "start": None}

        def step(action: Callable[[], list[str]]) -> None:
            started = time.monotonic()
            try:
                lines = action()
            except Exception as err:  # noqa: BLE001 - keep cleaning, report at the end
                errors.append(f"{type(err).__name__}: {err}")
                return
            took = time.monotonic() - started
            # A step's time beside what it did: a slow teardown names its slow step.
            done.extend(f"{line} ({took:.1f} s)" if took >= 1 and i == len(lines) - 1 else line
                        for i, line in enumerate(lines))

        # Controllers first (nothing recreates pods), then the pods through the kubelet, so that
        # the CRI tears down their sandboxes and networks as it would on a real node.
        for name in ("kube-controller-manager", "kube-scheduler"):
            step(lambda name=name: self._stop(procs.get(name)))
        if _alive(procs.get("kubelet", nobody)) and _alive(procs.get("kube-apiserver", nobody)):
            step(self._delete_pods)
        for name in ("kubelet", "kube-proxy"):
            step(lambda name=name: self._stop(procs.get(name)))
        if _alive(procs.get("containerd", nobody)):
            step(self._remove_containers)
        step(self._kill_cgroup_members)
        for name in ("containerd", "kube-apiserver", "etcd"):
            step(lambda name=name: self._stop(procs.get(name)))
        step(self._shims)
        if "kube-proxy" in procs and self.bin["kube-proxy"].exists():
            step(lambda: [] if _run(self.bin["kube-proxy"], "--cleanup", check=False, timeout=60).returncode
                 else ["kube-proxy --cleanup"])
        step(_remove_rule_chains)
        step(lambda: _remove_nft_tables(self.state.data.get("nft_tables_before")))
        step(self._unmount)
        step(self._remove_devices)
        step(self._remove_addresses)
        step(self._remove_cgroups)
        if self.state.data.get("created_var_lib_kubelet") and KUBELET_FIXED_DIR.exists():
            step(lambda: shutil.rmtree(KUBELET_FIXED_DIR) or [f"removed {KUBELET_FIXED_DIR}"])
        for key, value in self.state.data["sysctls"].items():
            step(lambda key=key, value=value: Path("/proc/sys", key).write_text(value) and [f"sysctl {key}={value}"])
        if errors:
            raise ClusterError("down could not remove everything (run it again; it resumes):\n  "
                               + "\n  ".join(errors))
        self.state.data.update(processes=[], devices=[], cgroups=[], sysctls={})
        if self.state.path.parent.exists():
            self.state.save()
        return done

    def restart_apiserver(self, grace: float) -> bool:
        """Stop the kube-apiserver `up` started as the kubelet stops a static pod (SIGTERM, SIGKILL after
        `grace` s), start its command line again and keep the new process in this cluster's state, so
        `down` stops it. True when it had to be killed."""
        record = next(p for p in self.state.data["processes"] if p["name"] == "kube-apiserver" and _alive(p))
        argv = Path(f"/proc/{record['pid']}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        started = time.monotonic()
        self._stop(record, grace)
        killed = time.monotonic() - started >= grace  # _stop kills exactly when it outlives the grace
        log = open(self.dir / "control-plane" / "kube-apiserver.log", "ab")  # noqa: SIM115 - the child owns it
        with log:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        record.update(pid=popen.pid, start=_start_time(popen.pid))
        self.state.save()
        return killed

    def _stop(self, record: dict | None, grace: float = 10.0) -> list[str]:
        if not record or not _alive(record):
            return []
        os.kill(record["pid"], signal.SIGTERM)
        end = time.monotonic() + grace
        while time.monotonic() < end and _alive(record):
            time.sleep(0.1)
        if _alive(record):
            os.kill(record["pid"], signal.SIGKILL)
            while _alive(record):
                time.sleep(0.05)
        return [f"stopped {record['name']} (pid {record['pid']})"]

    def _delete_pods(self) -> list[str]:
        try:
            api = self.api()
            for ns in api.list("v1", "Namespace")["items"]:
                name = ns["metadata"]["name"]
                api.request("DELETE", f"/api/v1/namespaces/{name}/pods", query={"gracePeriodSeconds": 0})
            end = time.monotonic() + 60
            while time.monotonic() < end and self._sandboxes():
                time.sleep(0.5)
        except (ApiError, OSError, subprocess.SubprocessError):
            return []
        return ["deleted every pod through the kubelet"]

    def _sandboxes(self) -> list[str]:
        out = _run(self.bin["ctr"], f"--address={self.socket}", "-n", "k8s.io", "tasks", "ls", "-q",
                   check=False, timeout=20)
        return out.stdout.split() if out.returncode == 0 else []

    def _remove_containers(self) -> list[str]:
        """Whatever the kubelet left: kill the tasks, delete them and their containers."""
        ctr = [self.bin["ctr"], f"--address={self.socket}", "-n", "k8s.io"]
        left = self._sandboxes()
        for task in left:
            _run(*ctr, "tasks", "kill", "-s", "SIGKILL", task, check=False)
        for task in left:
            _run(*ctr, "tasks", "delete", "-f", task, check=False)
        return [f"killed {len(left)} leftover containers"] if left else []

    def _kill_cgroup_members(self) -> list[str]:
        """Processes still in the kubelet's cgroups (a container whose shim is gone)."""
        pids: set[int] = set()
        for root in self.state.data["cgroups"]:
            for procs in Path(root).rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return [f"killed {len(pids)} processes left in {CGROUP_ROOT} cgroups"] if pids else []

    def _shims(self) -> list[str]:
        """containerd-shim-runc-v2 processes of our containerd (their argv names our socket)."""
        killed = []
        needle = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(f"killed shim {entry.name}")
        return killed

    def _unmount(self) -> list[str]:
        """Mounts under DIR (overlays, shm, volumes, the kubelet's bind mounts) and our netns files."""
        done = []
        before = self.state.data.get("netns_before")
        for _ in range(5):
            targets = [m for m in _mountpoints() if m == str(self.dir) or m.startswith(str(self.dir) + "/")]
            if before is not None and NETNS_DIR.exists():
                targets += [str(NETNS_DIR / n) for n in os.listdir(NETNS_DIR)
                            if n.startswith("cni-") and n not in before and str(NETNS_DIR / n) in _mountpoints()]
            if not targets:
                break
            for target in sorted(targets, key=len, reverse=True):
                if _run("umount", target, check=False).returncode != 0:
                    _run("umount", "-l", target, check=False)
                done.append(f"unmounted {target}")
        if before is not None and NETNS_DIR.exists():
            for name in os.listdir(NETNS_DIR):
                if name.startswith("cni-") and name not in before:
                    (NETNS_DIR / name).unlink(missing_ok=True)
                    done.append(f"removed {NETNS_DIR / name}")
        return done

    def _remove_devices(self) -> list[str]:
        done = []
        links = json.loads(_run("ip", "-j", "link", check=False).stdout or "[]")
        for link in links:  # veths left on our bridge (their netns is gone or going)
            if link.get("master") == POD_BRIDGE:
                _run("ip", "link", "del", link["ifname"], check=False)
                done.append(f"deleted {link['ifname']}")
        names = {link["ifname"] for link in links}
        for device in self.state.data["devices"]:
            if device in names:
                _run("ip", "link", "del", device, check=False)
                done.append(f"deleted {device}")
        return done

    def add_address(self, cidr: str, device: str) -> None:
        """An address on one of the machine's devices (NodeLocal DNSCache's on `lo`); `down` removes it."""
        self.state.data["addresses"].append([cidr, device])
        self.state.save()
        if cidr.split("/")[0] not in _run("ip", "-o", "addr", "show", "dev", device).stdout:
            _run("ip", "addr", "add", cidr, "dev", device)

    def _remove_addresses(self) -> list[str]:
        done = []
        for cidr, device in self.state.data["addresses"]:
            if f" {cidr} " in _run("ip", "-o", "addr", "show", "dev", device, check=False).stdout:
                _run("ip", "addr", "del", cidr, "dev", device)
                done.append(f"removed {cidr} from {device}")
        self.state.data["addresses"] = []
        return done

    def _remove_cgroups(self) -> list[str]:
        done = []
        for root in self.state.data["cgroups"]:
            path = Path(root)
            if not path.exists():
                continue
            for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                _rmdir_retry(sub)
            _rmdir_retry(path)
            done.append(f"removed cgroup {root}")
        return done


def remove_later(path: Path) -> None:
    """Remove PATH (a stopped cluster's directory: gigabytes of unpacked images) without waiting.

    It is renamed at once, so PATH is gone when this returns, and a detached `rm -rf` at the lowest
    CPU and I/O priority removes the files while the tests go on: removing them in place took from
    40 s to two and a half minutes of a test run's wall time. Only for what `down` has unmounted."""
    if not path.exists():
        return
    trash = path.with_name(f".{path.name}.removing-{os.getpid()}-{time.monotonic_ns()}")
    path.rename(trash)
    argv = ["rm", "-rf", "--one-file-system", str(trash)]
    if shutil.which("ionice"):
        argv = ["ionice", "-c", "3", *argv]
    subprocess.Popen(["nice", "-n", "19", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def _rmdir_retry(path: Path) -> None:
    for _ in range(20):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def _mountpoints() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted hierarchy (the kubelet's cgroupfs driver uses every v1 one)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] in ("cgroup", "cgroup2"):  # runc also writes to a hybrid layout's unified one
            found.append(Path(left.split()[4]))
    return found


def _remove_rule_chains() -> list[str]:
    """KUBE-* and CNI-* chains (and the rules jumping to them) that kube-proxy --cleanup left."""
    done = []
    for tool in ("iptables", "ip6tables"):
        if not shutil.which(tool):
            continue
        for table in ("filter", "nat", "mangle"):
            rules = _run(tool, "-w", "-t", table, "-S", check=False).stdout.splitlines()
            chains = [r.split()[1] for r in rules if r.startswith("-N ") and r.split()[1].startswith(("KUBE-", "CNI-"))]
            if not chains:
                continue
            for rule in rules:
                parts = rule.split()
                if parts[0] == "-A" and any(c in parts for c in chains) and parts[1] not in chains:
                    _run(tool, "-w", "-t", table, "-D", *parts[1:], check=False)
            for chain in chains:
                _run(tool, "-w", "-t", table, "-F", chain, check=False)
            for chain in chains:
                _run(tool, "-w", "-t", table, "-X", chain, check=False)
            done.append(f"removed {len(chains)} {tool} chains from {table}")
    return done


def _nft_tables() -> list[str] | None:
    """`family name` of every nftables table, or None without nft."""
    if not shutil.which("nft"):
        return None
    out = _run("nft", "list", "tables", check=False).stdout
    return sorted(line.split(None, 1)[1] for line in out.splitlines() if line.startswith("table "))


def _remove_nft_tables(before: list[str] | None) -> list[str]:
    """Tables iptables-nft made for the cluster's rules (absent before `up`), once they hold no rule."""
    now = _nft_tables()
    if before is None or now is None:
        return []
    done = []
    for table in sorted(set(now) - set(before)):
        listing = _run("nft", "-a", "list", "table", *table.split(), check=False).stdout
        rules = [line for line in listing.splitlines() if "# handle" in line
                 and not line.strip().startswith(("table ", "chain "))]
        if not rules:
            _run("nft", "delete", "table", *table.split(), check=False)
            done.append(f"deleted empty nftables table {table}")
    return done


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- #
# Cluster DNS, as kubeadm deploys it
# --------------------------------------------------------------------------- #


def coredns_objects(corefile: str = KUBEADM_COREFILE) -> list[dict]:
    """kubeadm's CoreDNS add-on objects (cmd/kubeadm/app/phases/addons/dns/manifests.go), image ours."""
    labels = {"k8s-app": "kube-dns"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
         "spec": {
             "replicas": 2,
             "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
             "selector": {"matchLabels": labels},
             "template": {"metadata": {"labels": labels}, "spec": {
                 "priorityClassName": "system-cluster-critical",
                 "serviceAccountName": "coredns",
                 "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                 {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
                 "nodeSelector": {"kubernetes.io/os": "linux"},
                 "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                     {"weight": 100, "podAffinityTerm": {
                         "labelSelector": {"matchExpressions": [
                             {"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                         "topologyKey": "kubernetes.io/hostname"}}]}},
                 "containers": [{
                     "name": "coredns", "image": "localhost/coredns:dev", "imagePullPolicy": "Never",
                     "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
                     "args": ["-conf", "/etc/coredns/Corefile"],
                     "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
                     "ports": [{"containerPort": 53, "name": "dns", "protocol": "UDP"},
                               {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                               {"containerPort": 9153, "name": "metrics", "protocol": "TCP"}],
                     "livenessProbe": {"httpGet": {"path": "/health", "port": 8080, "scheme": "HTTP"},
                                       "initialDelaySeconds": 60, "timeoutSeconds": 5,
                                       "successThreshold": 1, "failureThreshold": 5},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181, "scheme": "HTTP"}},
                     "securityContext": {"allowPrivilegeEscalation": False,
                                         "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                         "readOnlyRootFilesystem": True},
                 }],
                 "dnsPolicy": "Default",
                 "volumes": [{"name": "config-volume", "configMap": {
                     "name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
             }}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system",
                      "labels": {**labels, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
                      "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
         "spec": {"selector": labels, "clusterIP": DNS_SERVICE_IP,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                            {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]}},
    ]


def deployment_ready(api: KubeClient, namespace: str, name: str) -> bool:
    """Every replica of the current template updated and ready (what `kubectl rollout status` waits for)."""
    dep = api.get("apps/v1", "Deployment", namespace, name)
    status, want = dep.get("status", {}), dep["spec"].get("replicas", 1)
    return (status.get("observedGeneration", 0) >= dep["metadata"]["generation"]
            and status.get("updatedReplicas", 0) == want and status.get("readyReplicas", 0) == want
            and status.get("replicas", 0) == want)


# --------------------------------------------------------------------------- #
# A user's steps, as docs/install.md gives them (shared by tests/test_cluster.py and
# benchmarks/cluster.py)
# --------------------------------------------------------------------------- #

REPO = Path(__file__).resolve().parent.parent
MCSDNS_IMAGE = "localhost/mcsdns:dev"
CLIENT_NAMESPACE = "dnsclient"


def kustomize_overlay(directory: Path, image: str = MCSDNS_IMAGE, flag_lines: list[str] | tuple[str, ...] = (),
                      components: tuple[str, ...] = ()) -> Path:
    """deploy/ with its image set, as `kustomize edit set image mcsdns=IMAGE` would, in an overlay; with
    `flag_lines`, its flags file is the base's plus those lines, and `components` (deploy/components/<name>)
    are added, as an operator's overlay does."""
    directory.mkdir(parents=True, exist_ok=True)
    name, _, tag = image.rpartition(":")
    kustomization: dict = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "deploy", directory)],
        "images": [{"name": "mcsdns", "newName": name, "newTag": tag}],
    }
    if components:
        kustomization["components"] = [os.path.relpath(REPO / "deploy" / "components" / c, directory) for c in components]
    if flag_lines:
        (directory / "mcsdns.flags").write_text((REPO / "deploy" / "base" / "mcsdns.flags").read_text() + "\n"
                                                + "\n".join(line.strip() for line in flag_lines) + "\n")
        kustomization["configMapGenerator"] = [{"name": "mcsdns-flags", "namespace": "mcsdns", "behavior": "replace",
                                                "files": ["flags=mcsdns.flags"]}]
    (directory / "kustomization.yaml").write_text(json.dumps(kustomization))
    return directory


def point_coredns_at(cl: Cluster, mcsdns_ip: str | None, directory: Path) -> None:
    """docs/install.md "Point CoreDNS at it": append the stub zone, replace the ConfigMap, restart.

    A stub zone already there (a reinstall gave mcsdns a new Service IP) is replaced, not repeated.
    `mcsdns_ip` None: the stub zone is removed (a cluster whose CoreDNS was never pointed at mcsdns).
    """
    directory.mkdir(parents=True, exist_ok=True)
    corefile = directory / "Corefile"
    current = cl.kubectl("-n", "kube-system", "get", "configmap", "coredns", "-o",
                         "jsonpath={.data.Corefile}").stdout
    current = re.sub(r"\nclusterset\.local:53 \{.*?\n\}\n", "\n", current, flags=re.S)
    stub = f"clusterset.local:53 {{\n    errors\n    cache 5\n    forward . {mcsdns_ip}\n}}\n" if mcsdns_ip else ""
    corefile.write_text(current + stub)
    manifest = cl.kubectl("-n", "kube-system", "create", "configmap", "coredns", f"--from-file={corefile}",
                          "--dry-run=client", "-o", "yaml").stdout
    cl.kubectl("replace", "-f", "-", input=manifest)
    cl.kubectl("-n", "kube-system", "rollout", "restart", "deployment/coredns")
    cl.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=180s", timeout=200)
    # `rollout status` returns while the old pods still run their 5 s lameduck; wait them out so
    # that what follows meets only the new CoreDNS.
    deadline = time.monotonic() + 60
    while len(cl.kubectl("-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns", "-o", "name").stdout.split()) > 2:
        if time.monotonic() > deadline:
            raise ClusterError("old CoreDNS pods still terminating after 60 s")
        time.sleep(0.5)


def start_client(cl: Cluster, searches: tuple[str, ...] = ("svc.clusterset.local",), name: str = "client",
                 nameserver: str | None = None) -> str:
    """A pod with dig and kdig and the kubelet's resolv.conf (plus ``searches``); returns its name.

    ``nameserver``: dnsPolicy None with that one nameserver and the kubelet's search list, as pods
    of a node whose kubelet points --cluster-dns at NodeLocal DNSCache get it."""
    cl.kubectl("create", "namespace", CLIENT_NAMESPACE, check=False)
    dns_config: dict[str, Any] = {"searches": list(searches)}
    if nameserver:
        dns_config = {"nameservers": [nameserver], "options": [{"name": "ndots", "value": "5"}],
                      "searches": [f"{CLIENT_NAMESPACE}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}",
                                   CLUSTER_DOMAIN, *searches]}
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": CLIENT_NAMESPACE},
        "spec": {"containers": [{"name": "dnsutils", "image": "localhost/dnsutils:dev",
                                 "imagePullPolicy": "Never", "command": ["sleep", "infinity"]}],
                 "terminationGracePeriodSeconds": 1,
                 **({"dnsPolicy": "None"} if nameserver else {}),
                 "dnsConfig": dns_config},
    }
    cl.kubectl("apply", "-f", "-", input=json.dumps(pod))
    cl.kubectl("-n", CLIENT_NAMESPACE, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=150)
    return name


def client_sh(cl: Cluster, command: str, *, check: bool = True, timeout: float = 60.0,
              pod: str = "client") -> subprocess.CompletedProcess:
    """``sh -c command`` in the client pod."""
    return cl.kubectl("-n", CLIENT_NAMESPACE, "exec", pod, "--", "sh", "-c", command, check=check,
                      timeout=timeout)


# NodeLocal DNSCache as the upstream add-on runs it (kubernetes/cluster/addons/dns/nodelocaldns): a
# CoreDNS on every node, host network, bound to a link-local address. The add-on's node-cache binary
# puts that address on a `dummy` device of its own (and also binds the kube-dns Service IP for its
# iptables-interception mode); this machine's kernel has no dummy device, so the address goes on the
# node's `lo`, the testbin CoreDNS binds it alone, and pods reach it as their nameserver -- the mode
# where the kubelet's --cluster-dns is the link-local address.
NODE_LOCAL_DNS_IP = "169.254.20.10"
NODELOCAL_EXAMPLE = REPO / "deploy" / "examples" / "nodelocaldns-stub-zone.yaml"
MCSDNS_BLOCK = re.compile(r"\n *# --- added for mcsdns.*?# --- end of the mcsdns addition[^\n]*", re.S)


def node_local_corefile(with_mcsdns_block: bool = True, block: str | None = None) -> str:
    """docs/install.md's NodeLocal DNSCache Corefile (deploy/examples/nodelocaldns-stub-zone.yaml),
    its __PILLAR__ values filled in as node-local-dns would on this node; without the mcsdns block,
    it is the add-on's own Corefile; with `block`, that server block stands in for the mcsdns block
    (docs/transfers.md's per-node secondary)."""
    corefile = yaml.safe_load(NODELOCAL_EXAMPLE.read_text())["data"]["Corefile"]
    if block is not None:
        corefile = MCSDNS_BLOCK.sub(lambda _: "\n" + block.rstrip("\n"), corefile)
    elif not with_mcsdns_block:
        corefile = MCSDNS_BLOCK.sub("", corefile)
    for pillar, value in (("__PILLAR__DNS__DOMAIN__", CLUSTER_DOMAIN),
                          ("__PILLAR__LOCAL__DNS__ __PILLAR__DNS__SERVER__", NODE_LOCAL_DNS_IP),
                          ("__PILLAR__LOCAL__DNS__", NODE_LOCAL_DNS_IP),
                          ("__PILLAR__CLUSTER__DNS__", DNS_SERVICE_IP),
                          ("__PILLAR__UPSTREAM__SERVERS__", "/etc/resolv.conf")):
        corefile = corefile.replace(pillar, value)
    assert "__PILLAR__" not in corefile, corefile
    return corefile


def node_local_dns_objects(corefile: str) -> list[dict]:
    """ConfigMap and DaemonSet `node-local-dns` in kube-system, shaped like the add-on's, image ours."""
    labels = {"k8s-app": "node-local-dns"}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "node-local-dns", "namespace": "kube-system"},
         "data": {"Corefile": corefile}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": {"name": "node-local-dns", "namespace": "kube-system", "labels": labels},
         "spec": {
             "selector": {"matchLabels": labels},
             "updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}},
             "template": {"metadata": {"labels": labels}, "spec": {
                 "priorityClassName": "system-node-critical",
                 "hostNetwork": True, "dnsPolicy": "Default",
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{
                     "name": "node-cache", "image": "localhost/coredns:dev", "imagePullPolicy": "Never",
                     "args": ["-conf", "/etc/coredns/Corefile"],
                     "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
                     "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
                     "readinessProbe": {"httpGet": {"host": NODE_LOCAL_DNS_IP, "path": "/health", "port": 8080}},
                 }],
                 "volumes": [{"name": "config-volume", "configMap": {
                     "name": "node-local-dns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
             }}}},
    ]


def run_node_local_dns(cl: Cluster, with_mcsdns_block: bool, block: str | None = None) -> None:
    """Put the link-local address on `lo` (down removes it) and (re)start node-local-dns with the
    Corefile as given (`block`: see node_local_corefile); returns once the new pod is Ready."""
    cl.add_address(f"{NODE_LOCAL_DNS_IP}/32", "lo")
    for obj in node_local_dns_objects(node_local_corefile(with_mcsdns_block, block)):
        cl.kubectl("apply", "-f", "-", input=json.dumps(obj))
    cl.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/node-local-dns")
    cl.kubectl("-n", "kube-system", "rollout", "status", "daemonset/node-local-dns", "--timeout=120s", timeout=150)


# --------------------------------------------------------------------------- #
# Command line
# --------------------------------------------------------------------------- #


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m testsupport.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument("--dir", required=True, type=Path, help="where the cluster keeps its state and logs")
    args = parser.parse_args(argv)
    cluster = Cluster(args.dir)
    if args.command == "down":
        try:
            for line in cluster.down():
                print(line)
        except ClusterError as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    started = time.monotonic()
    try:
        kubeconfig = cluster.up()
    except ClusterError as err:
        print(err, file=sys.stderr)
        return 1
    print(f"node Ready and cluster DNS answering after {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(kubeconfig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
