"""mcsdns as a pod runs it: no --kubeconfig, only the in-cluster service account.

No kubelet runs here, so the test plays its part, with nothing in mcsdns told
about it:

* the pod's view of the file system: `mcsdns serve` starts in a private mount
  namespace (`unshare --mount`) where a tmpfs covers /run (/var/run's target)
  and the service-account volume is bind-mounted, read-only, at
  /var/run/secrets/kubernetes.io/serviceaccount -- the path client-go, the
  kubernetes client library and mcsdns's kubeconfig.py read.  The host's /run is never touched;
* the volume's content and layout: a real bound ServiceAccount token from the
  TokenRequest API (for the `mcsdns` ServiceAccount that deploy/ binds to the
  project's ClusterRole), the testbed CA as ca.crt, the namespace; written the
  way kubelet's AtomicWriter does (files are symlinks through `..data`, and an
  update swaps `..data` with one rename);
* the pod's environment: KUBERNETES_SERVICE_HOST/PORT point at the testbed
  apiserver, whose serving certificate is valid for 127.0.0.1 (verified TLS).

Token rotation: mcsdns re-reads the token file at most once a minute
(kubeconfig.TOKEN_REFRESH, as client-go and the kubernetes client), so that
test takes about 75 s.  Tokens bound to a Secret stop working when the Secret is
deleted: after the refresh period has passed, the token in the file is
replaced by one bound to a second Secret and the first Secret is deleted;
the relists that follow (--resync 5s: every few seconds a new list and watch
per resource) must succeed, with no 401 in the log, and changes must still
arrive.  A second test checks that a rejected token is what the server
reports, so the absence of "unauthorized" above means something, and a third
that a token file ending in a newline (client-go trims it) works.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_server import KubeServer, a, ensure_crd, eventually, fqdn, service_import
from testsupport.mcsdnsserver import ROOT, McsdnsServer, mcsdns_command
from test_deploy import DEPLOY, NAME, NAMESPACE, Kubectl, cached_binary
from testsupport.testbed import Testbed

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # kubeconfig.SERVICE_ACCOUNT_DIR
RUN = os.path.realpath("/var/run")  # /run on Debian: the tmpfs goes over the link's target
HOST_TOKEN = Path(SERVICE_ACCOUNT_DIR) / "token"
TMPFS_NAME = "mcsdns-test-pod-run"  # the tmpfs's source name, to look for leftovers in /proc/mounts

# Runs in the new mount namespace, then becomes mcsdns (exec: same PID, SIGTERM reaches it).
POD_MOUNTS = r"""
set -eu
run=$1 volume=$2 target=$3
shift 3
mount -t tmpfs -o mode=0755,size=4m "$TMPFS_NAME" "$run"
mkdir -p "$target"
mount --bind -o ro "$volume" "$target"
exec "$@"
"""


# --------------------------------------------------------------------------- the mount namespace


def _unshare_mount_problem() -> str | None:
    """Why a private mount namespace with a tmpfs on /run cannot be had here, or None."""
    if not sys.platform.startswith("linux"):
        return "needs Linux mount namespaces"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs util-linux's unshare and mount"
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs probe "$1"', "probe", RUN],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if probe.returncode != 0:
        return ("unshare --mount + mount -t tmpfs not permitted here (needs root with CAP_SYS_ADMIN): "
                + probe.stderr.strip())
    return None


@pytest.fixture(scope="module")
def mount_namespaces() -> None:
    problem = _unshare_mount_problem()
    if problem:
        pytest.skip(f"the in-cluster tests run mcsdns in a private mount namespace: {problem}")


def token_refresh_period() -> float:
    """How often mcsdns re-reads the token file (kubeconfig.TOKEN_REFRESH: a minute, as client-go)."""
    from mcsdns.sources.kubeconfig import TOKEN_REFRESH

    return TOKEN_REFRESH


def host_run_state() -> tuple[list[str], list[str]]:
    """The host's /run entries and any mount of ours visible from here."""
    with open("/proc/self/mounts") as mounts:
        ours = [line for line in mounts if TMPFS_NAME in line or "/secrets/kubernetes.io/" in line]
    return sorted(os.listdir(RUN)), ours


# --------------------------------------------------------------------------- the service account


class ServiceAccountVolume:
    """A pod's service-account volume, laid out and updated the way kubelet's AtomicWriter does.

    `token`, `ca.crt` and `namespace` are symlinks to `..data/<name>`; `..data`
    links to a timestamped directory; an update writes a new directory and
    renames a fresh `..data` link over the old one, so a reader sees either
    the old or the new set, never a half-written file.
    """

    FILES = ("token", "ca.crt", "namespace")

    def __init__(self, path: Path, ca_cert: bytes, namespace: str) -> None:
        self.path = path
        self.ca_cert = ca_cert
        self.namespace = namespace
        self.generation = 0
        path.mkdir(mode=0o755)

    def write(self, token: str) -> None:
        self.generation += 1
        stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{self.generation}"
        new = self.path / stamp
        new.mkdir(mode=0o755)
        contents = {"token": token.encode(), "ca.crt": self.ca_cert, "namespace": self.namespace.encode()}
        for name, data in contents.items():
            (new / name).write_bytes(data)  # as kubelet writes them: no trailing newline added
            (new / name).chmod(0o644)
        data_link = self.path / "..data"
        old = os.readlink(data_link) if data_link.is_symlink() else None
        tmp_link = self.path / "..data_tmp"
        tmp_link.symlink_to(stamp)
        os.rename(tmp_link, data_link)  # the atomic switch
        for name in self.FILES:
            link = self.path / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        if old is not None:
            shutil.rmtree(self.path / old)

    def current_token(self) -> str:
        return (self.path / "token").read_text()


def create_secret(testbed: Testbed, stem: str) -> dict:
    """An (empty) Secret to bind a token to: deleting it revokes the token."""
    return testbed.create({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": f"{stem}-{uuid.uuid4().hex[:8]}", "namespace": NAMESPACE},
    })  # fmt: skip


def request_token(testbed: Testbed, bound_to: dict) -> str:
    """A ServiceAccount token from the TokenRequest API, bound to a Secret (kubelet binds to the Pod)."""
    meta = bound_to["metadata"]
    review = testbed.api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{NAME}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": meta["name"], "uid": meta["uid"]}},
    })  # fmt: skip
    token = review["status"]["token"]
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["sub"] == f"system:serviceaccount:{NAMESPACE}:{NAME}", claims
    assert claims["kubernetes.io"]["secret"]["name"] == meta["name"], claims
    return token


def status_with_token(testbed: Testbed, token: str) -> int:
    """HTTP status of a list the ClusterRole allows, sent with `token` as the bearer."""
    context = ssl.create_default_context(cafile=str(testbed.ca.cert_path))
    conn = http.client.HTTPSConnection("127.0.0.1", testbed.apiserver_port, context=context, timeout=10)
    try:
        conn.request("GET", "/apis/discovery.k8s.io/v1/endpointslices?limit=1",
                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@pytest.fixture(scope="module")
def deployed_rbac(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> None:
    """deploy/ applied as test_deploy.py applies it: the mcsdns ServiceAccount and its ClusterRoleBinding."""
    kubectl = Kubectl(cached_binary("kubectl"), testbed.kubeconfig_path, tmp_path_factory.mktemp("kubectl-cache"))
    kubectl("apply", "-k", DEPLOY, "--server-side")


@pytest.fixture
def secrets(testbed: Testbed, deployed_rbac: None) -> Iterator[list[dict]]:
    """Secrets the test binds tokens to (appended by the test); deleted afterwards."""
    made: list[dict] = []
    yield made
    for secret in made:
        testbed.delete("v1", "Secret", NAMESPACE, secret["metadata"]["name"])


def valid_token(testbed: Testbed, secrets: list[dict], stem: str) -> tuple[dict, str]:
    secret = create_secret(testbed, stem)
    secrets.append(secret)
    token = request_token(testbed, secret)
    # The ClusterRoleBinding reaches the authorizer through an informer: wait for the grant.
    eventually(lambda: status_with_token(testbed, token) == 200, 15,
               what=lambda: f"a list with the {stem} token: HTTP {status_with_token(testbed, token)}")
    return secret, token


def revoke(testbed: Testbed, secret: dict, token: str) -> None:
    """Delete the Secret `token` is bound to; return once the apiserver rejects the token.

    kube-apiserver caches successful token authentications for 10 s, so the
    401 can take that long.
    """
    testbed.delete("v1", "Secret", NAMESPACE, secret["metadata"]["name"], missing_ok=False)
    eventually(lambda: status_with_token(testbed, token) == 401, 30, interval=0.2,
               what=lambda: f"the token of the deleted Secret rejected: HTTP {status_with_token(testbed, token)}")


# --------------------------------------------------------------------------- the server, as in a pod


class PodServer(KubeServer):
    """`mcsdns serve` with no --kubeconfig, in a private mount namespace holding the service account."""

    def __init__(self, testbed: Testbed, volume: ServiceAccountVolume, log_path: Path, *extra: str) -> None:
        McsdnsServer.__init__(self, "--startup-timeout", "30s", "--log-level", "INFO", *extra, wait_ready=False)
        self.requested_log = log_path
        self.volume = volume
        self.api_port = testbed.apiserver_port

    def start(self, log_path: Path | None = None, timeout: float = 40) -> PodServer:
        cmd = [
            "unshare", "--mount", "--propagation", "private",
            "sh", "-c", POD_MOUNTS, "pod-mounts", RUN, str(self.volume.path), SERVICE_ACCOUNT_DIR,
            *mcsdns_command(self.dns_port, self.http_port, self.args),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        env.update(PYTHONUNBUFFERED="1", TMPFS_NAME=TMPFS_NAME,
                   KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.api_port))
        self.log_path = log_path or self.requested_log
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env)
        try:
            eventually(lambda: self.proc.poll() is not None or self._answers(), timeout,
                       what=lambda: f"mcsdns answering DNS\n{self.tail()}")
        except BaseException:
            self.stop()
            raise
        if self.proc.poll() is not None:
            self.stop()
            raise RuntimeError(f"mcsdns exited with {self.proc.returncode}:\n{self.tail()}")
        return self

    def __enter__(self) -> PodServer:
        return self.start()

    def own_mount_namespace(self) -> bool:
        assert self.proc is not None
        return os.readlink(f"/proc/{self.proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")


def relists_after(server: PodServer, mark: int, kind: str) -> int:
    """How many relists of `kind` completed after log offset `mark`; fails at once on a 401."""
    text = server.log()[mark:]
    assert "unauthorized" not in text, f"mcsdns still sends the revoked token\n{server.tail()}"
    return text.count(f"{kind}: relisted:")


# --------------------------------------------------------------------------- tests


@pytest.mark.kube
def test_in_cluster_service_account_and_token_rotation(
    testbed: Testbed, mount_namespaces: None, secrets: list[dict], fresh_namespace: str, tmp_path: Path,
) -> None:
    refresh = token_refresh_period()
    assert refresh <= 60, f"the client now re-reads the token every {refresh} s: this test would take too long"
    ensure_crd(testbed)
    ns = fresh_namespace
    host_before = host_run_state()
    host_had_token = HOST_TOKEN.exists()
    secret_a, token_a = valid_token(testbed, secrets, "mcsdns-token-a")
    volume = ServiceAccountVolume(tmp_path / "serviceaccount", testbed.ca.cert_path.read_bytes(), NAMESPACE)
    volume.write(token_a)
    testbed.create(service_import(ns, "web", ["10.7.0.1"]))

    server = PodServer(testbed, volume, tmp_path / "mcsdns.log", "--resync", "5s")
    with server:
        assert server.own_mount_namespace()
        # The token read at start-up: logged just after load_configuration.
        eventually(lambda: "watching the Kubernetes API at" in server.log(), 30, what=server.tail)
        token_read_by = time.time()
        log = server.log()
        assert "from Kubernetes API (in-cluster service account)" in log, server.tail()
        assert f"watching the Kubernetes API at https://127.0.0.1:{testbed.apiserver_port}" in log, server.tail()
        if not host_had_token:
            assert not HOST_TOKEN.exists(), "the service account must be visible to mcsdns only"

        server.wait_until_ready()
        assert server.ready() == (200, "OK")
        assert server.answer(fqdn("web", ns)) == a("10.7.0.1")
        testbed.patch(service_import(ns, "web")["apiVersion"], "ServiceImport", ns, "web",
                      {"spec": {"ips": ["10.7.0.2"]}})
        server.wait_answer(fqdn("web", ns), "A", a("10.7.0.2"))

        # kubelet rotates the token: the file now holds one bound to a second Secret.
        secret_b, token_b = valid_token(testbed, secrets, "mcsdns-token-b")
        volume.write(token_b)
        assert volume.current_token() == token_b
        # Until the client's refresh period has passed it may still send token A,
        # which stays valid until its Secret goes: wait that out, then revoke A.
        time.sleep(max(0.0, token_read_by + refresh + 1.0 - time.time()))
        testbed.create(service_import(ns, "mid", ["10.7.0.3"]))
        server.wait_answer(fqdn("mid", ns), "A", a("10.7.0.3"))
        revoke(testbed, secret_a, token_a)
        assert status_with_token(testbed, token_b) == 200

        # Every relist from now on is a new list + watch that token A would no longer get.
        mark = len(server.log())
        for kind in ("ServiceImport", "EndpointSlice", "Namespace"):
            eventually(lambda: relists_after(server, mark, kind) >= 2, 30, interval=0.2,
                       what=lambda: f"two {kind} relists after revoking token A\n{server.tail()}")
        testbed.create(service_import(ns, "late", ["10.7.0.4"]))
        server.wait_answer(fqdn("late", ns), "A", a("10.7.0.4"))
        testbed.patch(service_import(ns, "web")["apiVersion"], "ServiceImport", ns, "web",
                      {"spec": {"ips": ["10.7.0.5"]}})
        server.wait_answer(fqdn("web", ns), "A", a("10.7.0.5"))
        assert server.ready() == (200, "OK")

        log = server.log()
        assert token_a not in log and token_b not in log
        for bad in ("unauthorized", "forbidden", "watch down", "cannot list", "traceback"):
            assert bad not in log.lower(), f"{bad!r} in the log\n{server.tail()}"
        server.shutdown()

    # The mounts lived and died with mcsdns's namespace.
    assert host_run_state() == host_before


@pytest.mark.kube
def test_in_cluster_rejected_token_is_reported(
    testbed: Testbed, mount_namespaces: None, secrets: list[dict], fresh_namespace: str, tmp_path: Path,
) -> None:
    """The control for the test above: a token the apiserver rejects shows up as 'unauthorized'."""
    ensure_crd(testbed)
    secret = create_secret(testbed, "mcsdns-token-revoked")
    secrets.append(secret)
    token = request_token(testbed, secret)
    revoke(testbed, secret, token)  # never used before: no cached success, so rejected at once
    volume = ServiceAccountVolume(tmp_path / "serviceaccount", testbed.ca.cert_path.read_bytes(), NAMESPACE)
    volume.write(token)
    testbed.create(service_import(fresh_namespace, "web", ["10.7.1.1"]))

    server = PodServer(testbed, volume, tmp_path / "mcsdns.log", "--startup-timeout", "1s")
    with server:
        eventually(lambda: server.ready()[0] == 503 and server.ready()[1].count("unauthorized") == 3, 15,
                   what=lambda: f"/ready 503 naming the rejected credentials: {server.ready()}\n{server.tail()}")
        status, body = server.ready()
        assert status == 503, body
        for kind in ("ServiceImport", "EndpointSlice", "Namespace"):
            assert f"{kind}: unauthorized (the API server rejected the credentials)" in body, body
        log = server.log()
        assert "ServiceImport: cannot list: unauthorized" in log, server.tail()
        assert server.answer(fqdn("web", fresh_namespace))[0] == "SERVFAIL"
        server.shutdown()


@pytest.mark.kube
def test_in_cluster_token_file_with_a_trailing_newline(
    testbed: Testbed, mount_namespaces: None, secrets: list[dict], fresh_namespace: str, tmp_path: Path,
) -> None:
    """`kubectl create token ... > token` leaves a newline, which client-go trims.

    The kubernetes client sends the file as read; urllib3 then refused the
    header with a ValueError quoting it: the watch threads crashed the server
    and the token landed in the log.
    """
    ensure_crd(testbed)
    _, token = valid_token(testbed, secrets, "mcsdns-token-newline")
    volume = ServiceAccountVolume(tmp_path / "serviceaccount", testbed.ca.cert_path.read_bytes(), NAMESPACE)
    volume.write(token + "\n")
    testbed.create(service_import(fresh_namespace, "web", ["10.7.2.1"]))
    with PodServer(testbed, volume, tmp_path / "mcsdns.log", "--log-level", "DEBUG") as server:
        server.wait_until_ready()
        assert server.answer(fqdn("web", fresh_namespace)) == a("10.7.2.1")
        server.shutdown()
    assert token not in server.log()
    assert "from the in-cluster service account: read natively" in server.log(), server.tail()


def test_auth_header_is_trimmed_and_never_quoted() -> None:
    """ApiConnection._headers on its own: whitespace around the token goes; control characters are
    refused without quoting the token; a refresh that fails keeps the last good credentials."""
    from kubernetes.client import Configuration

    from mcsdns.sources.kubeapi import ApiConnection, Unauthorized

    configuration = Configuration(host="https://127.0.0.1:1")
    conn = ApiConnection(configuration)
    configuration.api_key["BearerToken"] = "bearer abc\ndef"
    with pytest.raises(Unauthorized) as refused:  # no good credentials yet: the watch retries and says why
        conn._headers("application/json")
    assert "abc" not in str(refused.value) and "control or non-ASCII" in str(refused.value)
    for raw in ("bearer abc.def\n", "bearer \n abc.def \r\n", "  bearer abc.def"):
        configuration.api_key["BearerToken"] = raw
        assert conn._headers("application/json")["authorization"] == "bearer abc.def", raw
    configuration.api_key["BearerToken"] = "bearer abc\ndef"
    assert conn._headers("application/json")["authorization"] == "bearer abc.def"  # the last good one

    def vanished() -> None:  # what the in-cluster loader's hook raises while the token file is missing
        raise OSError("Service token file does not exist.")

    configuration.refresh_api_key_hook = lambda _conf: vanished()
    assert conn._headers("application/json")["authorization"] == "bearer abc.def"
    conn.close()
