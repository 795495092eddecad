"""A real etcd + kube-apiserver for the test suite (in the spirit of envtest).

mcsdns watches EndpointSlices and ServiceImports. Its list/watch, relist-on-410,
RBAC and API-version discovery code only means something when exercised against
the real API server, so the tests start one: a loopback-only etcd and
kube-apiserver built by ``tools/testbin/build.sh`` (neither ships as a Debian or
PyPI package).  Nothing else runs -- no controller-manager, scheduler or kubelet
-- so no EndpointSlice is ever created for you: tests create them the way an MCS
controller would.

The module talks to the API server with nothing but the standard library (raw
JSON over HTTPS with the admin client certificate), so a test sees exactly what
a client sees on the wire: status codes, ``Status`` bodies and watch events.

The traps it handles (certificates, service-account keys, the CRD's
establishment, loopback-only ports) are explained where they are handled.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BUILD_HINT = (
    "The kube-based tests need a real kube-apiserver and etcd (and CoreDNS for the "
    "comparison tests), which are not available as Debian or PyPI packages. "
    "Build them once from the Go module proxy with `tools/testbin/build.sh` "
    "(a cold build takes 10-25 minutes; the binaries land in a cache outside the "
    "checkout, see MCSDNS_TESTBIN_CACHE)."
)

FIELD_MANAGER = "mcsdns-tests"
READY_TIMEOUT = 60.0
CRD_NAME = "serviceimports.multicluster.x-k8s.io"
MCS_GROUP = "multicluster.x-k8s.io"


# --------------------------------------------------------------------------- #
# Locating the binaries
# --------------------------------------------------------------------------- #


def testbin_cache() -> Path:
    """The cache dir build.sh writes to (same defaulting rules as the script)."""
    explicit = os.environ.get("MCSDNS_TESTBIN_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "mcsdns" / "testbin"


def testbin_coredns(plugin: str, missing: str) -> Path:
    """The testbin's CoreDNS (MCSDNS_COREDNS overrides), checked to have `plugin`; RuntimeError saying how
    to build it, or `missing` (how to add the plugin) when it lacks it."""
    explicit = os.environ.get("MCSDNS_COREDNS")
    path = Path(explicit) if explicit else testbin_cache() / "bin" / "coredns"
    if not path.exists():
        raise RuntimeError(f"CoreDNS not found at {path}: build it with tools/testbin/build.sh")
    plugins = subprocess.run([str(path), "-plugins"], capture_output=True, text=True, timeout=30).stdout
    if not any(line.strip() in (plugin, f"dns.{plugin}") for line in plugins.splitlines()):
        raise RuntimeError(f"{path}: {missing}")
    return path


def find_testbin() -> Path:
    """Return the testbin cache dir, or explain how to build it.

    Raises RuntimeError (not a skip) so that callers decide whether a missing
    build is fatal (CI) or merely skips the kube tests (a laptop).
    """
    cache = testbin_cache()
    required = [cache / "bin" / name for name in ("kube-apiserver", "etcd")]
    required.append(crd_path(cache, "v0.5.0"))
    missing = [str(p) for p in required if not p.exists()]
    if missing:
        raise RuntimeError(
            f"testbin not found in {cache} (missing: {', '.join(missing)}). {BUILD_HINT}"
        )
    return cache


def crd_path(cache: Path, version: str) -> Path:
    """Where build.sh stores the ServiceImport CRD of an mcs-api release."""
    return cache / "crds" / version / "serviceimports.yaml"


# --------------------------------------------------------------------------- #
# Certificates
# --------------------------------------------------------------------------- #


@dataclass
class KeyPair:
    """A certificate and its private key, both PEM, as written to disk."""

    cert_path: Path
    key_path: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds, unlike RSA, and every component
    # involved (Go TLS, kube-apiserver's SA signer, OpenSSL) accepts them.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


class CertificateAuthority:
    """A throw-away CA that signs the serving cert and every client cert.

    kube-apiserver authenticates client certificates against ``--client-ca-file``:
    the CN becomes the user name and each O an RBAC group.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcsdns-testbed-ca")])
        self.cert = (
            self._builder(name, self.key.public_key())
            .issuer_name(name)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = _write(directory / "ca.crt", self.cert.public_bytes(serialization.Encoding.PEM), 0o644)

    @staticmethod
    def _builder(subject: x509.Name, public_key: Any) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.timezone.utc)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=7))
        )

    def issue(self, stem: str, common_name: str, organizations: tuple[str, ...] = (),
              *, server: bool = False, sans: tuple[str, ...] = ()) -> KeyPair:
        """Issue a leaf certificate; ``server`` adds the loopback SANs and ``sans`` (IPs or names)."""
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        key = _new_key()
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            self._builder(x509.Name(attrs), key.public_key())
            .issuer_name(self.cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    *(_san(name) for name in sans),
                ]),
                critical=False,
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return KeyPair(
            cert_path=_write(self.directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644),
            key_path=_write(self.directory / f"{stem}.key", _key_pem(key)),
        )


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def write_service_account_keys(directory: Path) -> KeyPair:
    """The key pair kube-apiserver signs and verifies service-account tokens with.

    Separate from the CA on purpose: the two play different roles upstream.
    """
    key = _new_key()
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(
        cert_path=_write(directory / "sa.pub", pub, 0o644),
        key_path=_write(directory / "sa.key", _key_pem(key)),
    )


def write_kubeconfig(path: Path, server_url: str, ca: Path, client: KeyPair, user: str) -> Path:
    """Write a kubeconfig with the credentials embedded (``*-data`` fields).

    Embedded data is what kubeadm/kind produce, so every consumer (client-go in
    CoreDNS, the Python client, mcsdns) reads it, and the file stays valid
    without the other files next to it.
    """
    def b64(p: Path) -> str:
        return base64.b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": {
            "server": server_url, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(client.cert_path),
            "client-key-data": b64(client.key_path)}}],
        "contexts": [{"name": user, "context": {"cluster": "testbed", "user": user}}],
        "current-context": user,
    }
    _write(path, yaml.safe_dump(config).encode())
    return path


# --------------------------------------------------------------------------- #
# Raw JSON client
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Resource:
    """How a kind maps onto the REST path layout."""

    group: str  # "" for the core group
    plural: str
    namespaced: bool


# Kinds the tests and the deploy manifests use.  The version is always taken
# from the object's (or caller's) apiVersion, because ServiceImport is served
# at v1alpha1 and/or v1beta1 depending on the installed CRD.
RESOURCES: dict[str, Resource] = {
    "Namespace": Resource("", "namespaces", False),
    "Node": Resource("", "nodes", False),
    "ServiceAccount": Resource("", "serviceaccounts", True),
    "Service": Resource("", "services", True),
    "Endpoints": Resource("", "endpoints", True),
    "ConfigMap": Resource("", "configmaps", True),
    "Secret": Resource("", "secrets", True),
    "Pod": Resource("", "pods", True),
    "EndpointSlice": Resource("discovery.k8s.io", "endpointslices", True),
    "ServiceImport": Resource(MCS_GROUP, "serviceimports", True),
    "ServiceExport": Resource(MCS_GROUP, "serviceexports", True),
    "ClusterRole": Resource("rbac.authorization.k8s.io", "clusterroles", False),
    "ClusterRoleBinding": Resource("rbac.authorization.k8s.io", "clusterrolebindings", False),
    "Role": Resource("rbac.authorization.k8s.io", "roles", True),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "rolebindings", True),
    "CustomResourceDefinition": Resource("apiextensions.k8s.io", "customresourcedefinitions", False),
    "Deployment": Resource("apps", "deployments", True),
    "StatefulSet": Resource("apps", "statefulsets", True),
    "PodDisruptionBudget": Resource("policy", "poddisruptionbudgets", True),
    "HorizontalPodAutoscaler": Resource("autoscaling", "horizontalpodautoscalers", True),
    "Lease": Resource("coordination.k8s.io", "leases", True),
    "ClusterProperty": Resource("about.k8s.io", "clusterproperties", False),
}
_BY_PLURAL = {r.plural: r for r in RESOURCES.values()}


def resource_for(kind_or_plural: str) -> Resource:
    """Look a resource up by Kind ("EndpointSlice") or plural ("endpointslices")."""
    found = RESOURCES.get(kind_or_plural) or _BY_PLURAL.get(kind_or_plural)
    if found is None:
        raise KeyError(f"unknown kind {kind_or_plural!r}; add it to testbed.RESOURCES")
    return found


def resource_path(api_version: str, kind: str, namespace: str | None = None,
                  name: str | None = None) -> str:
    """The REST path of a collection (name=None) or a single object."""
    res = resource_for(kind)
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    group = api_version.split("/")[0] if "/" in api_version else ""
    if group != res.group:
        raise ValueError(f"{kind} lives in group {res.group!r}, not {api_version!r}")
    path = prefix
    if res.namespaced and namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{res.plural}"
    if name:
        path += f"/{name}"
    return path


def object_path(obj: dict, *, with_name: bool = True) -> str:
    meta = obj.get("metadata", {})
    return resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"),
                         meta.get("name") if with_name else None)


class ApiError(Exception):
    """A non-2xx answer; ``body`` is the decoded ``Status`` object when there is one."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")

    @property
    def reason(self) -> str | None:
        return self.body.get("reason") if isinstance(self.body, dict) else None


class KubeClient:
    """JSON over HTTPS with a client certificate -- no client library in between."""

    def __init__(self, server_url: str, ca_file: Path, cert_file: Path, key_file: Path,
                 timeout: float = 30.0) -> None:
        parsed = urllib.parse.urlsplit(server_url)
        self.server_url = server_url
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 443
        self.timeout = timeout
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.context.load_cert_chain(str(cert_file), str(key_file))

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeClient:
        """Build a client from a kubeconfig written by :func:`write_kubeconfig`."""
        config = yaml.safe_load(Path(path).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        # ssl wants files for the client chain; they only need to live while loading.
        with tempfile.TemporaryDirectory(prefix="kubeconfig-") as tmp:
            files = {}
            for field in ("certificate-authority", "client-certificate", "client-key"):
                if f"{field}-data" in user or f"{field}-data" in cluster:
                    data = user.get(f"{field}-data") or cluster[f"{field}-data"]
                    files[field] = _write(Path(tmp) / field, base64.b64decode(data))
                else:
                    files[field] = Path(user.get(field) or cluster[field])
            return cls(cluster["server"], files["certificate-authority"],
                       files["client-certificate"], files["client-key"])

    # -- transport ---------------------------------------------------------- #

    def _connection(self, timeout: float | None = None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=timeout or self.timeout)

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json",
                query: dict[str, Any] | None = None) -> Any:
        """Send one request; return decoded JSON (or text), raise ApiError on >= 400."""
        if query:
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        if resp.status >= 400:
            raise ApiError(method, path, resp.status, decoded)
        return decoded

    def watch(self, path: str, resource_version: str | None = None, *,
              timeout: float = 10.0, query: dict[str, Any] | None = None) -> Iterator[dict]:
        """Stream watch events (dicts with ``type`` and ``object``) from a collection path.

        The server ends the stream after ``timeout`` seconds (timeoutSeconds), so
        iterating to exhaustion is bounded.  An HTTP-level error raises ApiError;
        an expired resourceVersion arrives as an ``ERROR`` event (HTTP 200).
        """
        params: dict[str, Any] = {"watch": "1", "timeoutSeconds": max(1, int(timeout))}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        params.update(query or {})
        full = path + ("&" if "?" in path else "?") + urllib.parse.urlencode(params)
        conn = self._connection(timeout=timeout + 10)
        try:
            conn.request("GET", full, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status >= 400:
                raw = resp.read()
                raise ApiError("GET", full, resp.status, json.loads(raw) if raw else None)
            for line in resp:
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    # -- object helpers ----------------------------------------------------- #

    def create(self, obj: dict) -> dict:
        return self.request("POST", object_path(obj, with_name=False), obj)

    def apply(self, obj: dict, *, field_manager: str = FIELD_MANAGER, force: bool = True) -> dict:
        """Server-side apply (JSON is valid YAML, so the apply-patch type accepts it)."""
        query = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return self.request("PATCH", object_path(obj), obj,
                            content_type="application/apply-patch+yaml", query=query)

    def apply_status(self, obj: dict, status: dict, *, field_manager: str = "mcs-controller") -> dict:
        """Server-side apply of `status` through the status subresource, as a controller writes it
        (an apply of the object itself drops status when the CRD has that subresource)."""
        meta = obj["metadata"]
        body = {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                "metadata": {"name": meta["name"], "namespace": meta.get("namespace")}, "status": status}
        return self.request("PATCH", object_path(obj) + "/status", body, content_type="application/apply-patch+yaml",
                            query={"fieldManager": field_manager, "force": "true"})

    def get(self, api_version: str, kind: str, namespace: str | None = None,
            name: str | None = None, **query: Any) -> dict:
        """GET one object, or the list when ``name`` is None (all namespaces if namespace is None)."""
        return self.request("GET", resource_path(api_version, kind, namespace, name), query=query)

    def list(self, api_version: str, kind: str, namespace: str | None = None, **query: Any) -> dict:
        return self.get(api_version, kind, namespace, None, **query)

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str,
              patch: Any, patch_type: str = "merge") -> dict:
        """Patch with ``merge`` (RFC 7386), ``strategic`` or ``json`` (RFC 6902) semantics."""
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[patch_type]
        return self.request("PATCH", resource_path(api_version, kind, namespace, name), patch,
                            content_type=content_type)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *,
               missing_ok: bool = True) -> dict | None:
        """Delete one object; a 404 is fine unless ``missing_ok`` is False."""
        try:
            return self.request("DELETE", resource_path(api_version, kind, namespace, name))
        except ApiError as err:
            if err.status == 404 and missing_ok:
                return None
            raise


# --------------------------------------------------------------------------- #
# Processes
# --------------------------------------------------------------------------- #


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (what it hands out for bind to 0 and connect)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free for both UDP and TCP right now (DNS servers bind both).

    The port comes from below the kernel's ephemeral range: a port the kernel hands out (bind to 0)
    is also what it hands the next outgoing connection as its source port, so between this check and
    the server's bind any client on the machine (a kube-apiserver's watch, a test's HTTP GET) can take
    it and the server's TCP bind fails with EADDRINUSE."""
    low = _ephemeral_low()
    # 20000-29999 also keeps clear of the well-known ports a one-node cluster binds (kubelet's 102xx,
    # the NodePort range from 30000).
    top = max(min(low - 1, 29999), 20001)
    for _ in range(200):
        port = random.randint(20000, top)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            try:
                tcp.bind(("127.0.0.1", port))
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def _load_libc() -> Any:
    """libc, loaded in the parent: dlopen() after fork() can deadlock."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Have the kernel SIGKILL the child if the test process dies without cleanup.

    A crashed or SIGKILLed pytest would otherwise leave etcd and kube-apiserver
    running, holding ports.  Runs between fork and exec, so it only makes one
    syscall.  Linux-only.
    """
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


# What to pass as ``preexec_fn``: None where prctl is not available.
DIE_WITH_PARENT = die_with_parent if _LIBC is not None else None


def stop_popen(popen: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds; reaps the child and returns its exit code."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    return popen.returncode


class Process:
    """One child process with its output in a log file, stoppable by PID."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, detach: bool = False) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        # detach: outlive this Python process (testsupport/cluster.py's `up` returns while the
        # cluster runs, and `down`, a later process, stops it by PID); else die with it.
        self.detach = detach
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== starting {self.name} at {time.ctime()} ===\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=None if self.detach else DIE_WITH_PARENT,  # noqa: PLW1509 - only prctl
                start_new_session=self.detach,
            )

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; always reaps the child."""
        if self.popen is not None:
            stop_popen(self.popen, grace)
        self.popen = None

    def kill(self) -> None:
        """SIGKILL without grace -- simulates a crash."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self.popen = None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class TestbedError(RuntimeError):
    """The testbed could not reach the wanted state; the message has the log tails."""


# --------------------------------------------------------------------------- #
# The testbed
# --------------------------------------------------------------------------- #


class Testbed:
    """A loopback etcd + kube-apiserver with an admin kubeconfig.

    Usage::

        with Testbed() as tb:
            tb.install_crd("v0.5.0")
            tb.apply({...})
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, cache: Path | None = None, *, keep_dir: bool | None = None,
                 extra_apiserver_args: tuple[str, ...] = (), directory: Path | None = None,
                 host: str = "127.0.0.1", detach: bool = False) -> None:
        self.cache = cache or find_testbin()
        self.bin = self.cache / "bin"
        # MCSDNS_TESTBED_KEEP=1 keeps certs and logs for post-mortem debugging. A directory
        # given by the caller (testsupport/cluster.py's --dir) is the caller's to remove.
        self.keep_dir = bool(os.environ.get("MCSDNS_TESTBED_KEEP")) if keep_dir is None else keep_dir
        self.keep_dir = self.keep_dir or directory is not None
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self.directory = directory
        # The address kube-apiserver binds and advertises: loopback, unless pods must reach it.
        self.host = host
        self.detach = detach
        self.dir: Path | None = None
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self._api: KubeClient | None = None
        self.etcd_port = 0
        self.apiserver_port = 0

    # -- lifecycle ---------------------------------------------------------- #

    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Certificates, etcd, kube-apiserver; returns once /readyz says ok."""
        if self.dir is not None:
            raise TestbedError("testbed already started")
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.dir = self.directory
        else:
            self.dir = Path(tempfile.mkdtemp(prefix="mcsdns-testbed-"))
        try:
            self._write_pki()
            self.etcd_port, peer_port = free_port(), free_port()
            self.apiserver_port = free_port()
            self.etcd = Process("etcd", self._etcd_argv(peer_port), self.dir / "etcd.log", detach=self.detach)
            self.etcd.start()
            self._wait_etcd()
            self.apiserver = Process("kube-apiserver", self._apiserver_argv(),
                                     self.dir / "kube-apiserver.log", detach=self.detach)
            self.start_apiserver()
            write_kubeconfig(self.kubeconfig_path, self.server_url, self.ca.cert_path,
                             self.admin, "admin")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every process this testbed started (by PID) and remove its directory."""
        for proc in (self.apiserver, self.etcd):
            if proc is not None:
                proc.stop()
        if self.dir is not None and not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    @property
    def server_url(self) -> str:
        return f"https://{self.host}:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def api(self) -> KubeClient:
        """Admin (system:masters) client."""
        if self._api is None:
            raise TestbedError("testbed not started")
        return self._api

    # -- setup details ------------------------------------------------------ #

    def _write_pki(self) -> None:
        assert self.dir is not None
        pki = self.dir / "pki"
        pki.mkdir()
        self.ca = CertificateAuthority(pki)
        self.serving = self.ca.issue("apiserver", "kube-apiserver", server=True, sans=self.serving_sans())
        self.admin = self.ca.issue("admin", "mcsdns-testbed-admin", ("system:masters",))
        self.service_account = write_service_account_keys(pki)

    def serving_sans(self) -> tuple[str, ...]:
        """Names the serving certificate holds beside localhost and 127.0.0.1."""
        return (self.host,) if self.host != "127.0.0.1" else ()

    def _etcd_argv(self, peer_port: int) -> list[str]:
        assert self.dir is not None
        peer = f"http://127.0.0.1:{peer_port}"
        return [
            str(self.bin / "etcd"),
            "--name=testbed",
            f"--data-dir={self.dir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_argv(self) -> list[str]:
        assert self.dir is not None
        port = self.apiserver_port
        return [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.host}",
            f"--secure-port={port}",
            # Without it the apiserver looks for a default route and can fail.
            f"--advertise-address={self.host}",
            # kube-apiserver 1.37 refuses to write a loopback address into the `kubernetes` Service's
            # endpoints (it exits at start); outside a cluster nothing reads them.
            *(("--endpoint-reconciler-type=none",) if self.host == "127.0.0.1" else ()),
            f"--cert-dir={self.dir / 'apiserver-certs'}",
            f"--tls-cert-file={self.serving.cert_path}",
            f"--tls-private-key-file={self.serving.key_path}",
            f"--client-ca-file={self.ca.cert_path}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            f"--service-account-issuer=https://127.0.0.1:{port}/",
            f"--service-account-key-file={self.service_account.cert_path}",
            f"--service-account-signing-key-file={self.service_account.key_path}",
            # SIGTERM ends every watch within this grace, then the API server exits. Without it the server
            # keeps a watcher's connection open past SIGTERM until its shutdown timeout (60 s), so a stop
            # while any client watches ends in stop_popen's SIGKILL after the grace, not in a graceful stop.
            "--shutdown-watch-termination-grace-period=2s",
            *self.extra_apiserver_args,
        ]

    def _wait_etcd(self, timeout: float = 30.0) -> None:
        def healthy() -> bool:
            conn = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=2)
            try:
                conn.request("GET", "/health")
                return json.loads(conn.getresponse().read()).get("health") == "true"
            finally:
                conn.close()

        assert self.etcd is not None
        self._wait_for(self.etcd, healthy, timeout, "etcd /health")

    def _wait_for(self, proc: Process, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``check`` until true; fail fast with the log tail if ``proc`` exits."""
        deadline = time.monotonic() + timeout
        last_error = "not ready yet"
        while time.monotonic() < deadline:
            if not proc.running():
                raise TestbedError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
            try:
                if check():
                    return
            except (OSError, http.client.HTTPException, ValueError, ApiError) as err:
                last_error = f"{type(err).__name__}: {err}"
            time.sleep(0.2)
        raise TestbedError(
            f"{what} not ready after {timeout:.0f}s ({last_error}); {proc.name} log tail:\n{proc.tail()}")

    # -- apiserver outages --------------------------------------------------- #

    def start_apiserver(self, timeout: float = READY_TIMEOUT) -> None:
        """(Re)start kube-apiserver on the same port and etcd; wait for /readyz."""
        assert self.apiserver is not None and self.dir is not None
        if self.apiserver.running():
            raise TestbedError("kube-apiserver is already running")
        self.apiserver.start()
        self._api = KubeClient(self.server_url, self.ca.cert_path,
                               self.admin.cert_path, self.admin.key_path, timeout=10.0)
        self._wait_for(self.apiserver, lambda: self._api.request("GET", "/readyz") == "ok",
                       timeout, "kube-apiserver /readyz")
        self._api.timeout = 30.0
        self._wait_watch_caches(timeout)

    def _wait_watch_caches(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until the resources mcsdns reads can be listed.

        Trap: /readyz (and a CRD's Established condition) turn true before the
        per-resource watch caches are filled; until then lists and watches get
        "429 storage is (re)initializing".
        """
        paths = ["/api/v1/namespaces", "/api/v1/services",
                 "/apis/discovery.k8s.io/v1/endpointslices"]
        paths += [f"/apis/{MCS_GROUP}/{v}/serviceimports" for v in self.served_mcs_versions()]

        def all_listable() -> bool:
            for path in paths:
                self.api.request("GET", path, query={"limit": 1})  # ApiError(429) -> retry
            return True

        assert self.apiserver is not None
        self._wait_for(self.apiserver, all_listable, timeout, "watch caches")

    def stop_apiserver(self) -> None:
        """Graceful stop (SIGTERM): clients see their watches end and connections refused."""
        assert self.apiserver is not None
        self.apiserver.stop()

    def kill_apiserver(self) -> None:
        """SIGKILL: like a crash, connections are cut without a goodbye."""
        assert self.apiserver is not None
        self.apiserver.kill()

    def logs_tail(self, lines: int = 40) -> str:
        """The last lines of each process log, for assertion messages."""
        parts = [f"--- {p.name} ({p.log_path}) ---\n{p.tail(lines)}"
                 for p in (self.etcd, self.apiserver) if p is not None]
        return "\n".join(parts)

    # -- etcd ---------------------------------------------------------------- #

    def _etcd_post(self, path: str, body: dict, timeout: float = 10.0) -> dict:
        """POST to etcd's v3 HTTP/JSON gateway (int64s come back as strings)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=timeout)
        try:
            conn.request("POST", path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"{}")
        finally:
            conn.close()
        if resp.status != 200:
            raise TestbedError(f"etcd {path}: HTTP {resp.status}: {data}")
        return data

    def etcd_revision(self) -> int:
        """etcd's current revision (== the newest resourceVersion anywhere)."""
        key = base64.b64encode(b"/registry/").decode()
        data = self._etcd_post("/v3/kv/range", {"key": key, "limit": 1})
        return int(data["header"]["revision"])

    def _bump_etcd_revision(self) -> int:
        """Write a key kube-apiserver never reads; return the new revision."""
        key = base64.b64encode(b"/mcsdns-testbed/compaction-marker").decode()
        value = base64.b64encode(str(time.time()).encode()).decode()
        data = self._etcd_post("/v3/kv/put", {"key": key, "value": value})
        return int(data["header"]["revision"])

    def compact_etcd(self, *, restart_apiserver: bool = True, timeout: float = READY_TIMEOUT) -> int:
        """Expire every resourceVersion issued so far; return the compacted revision.

        Afterwards a watch (or exact list) from any resourceVersion the caller
        has seen gets "410 Gone / Expired" -- what a client meets after a long
        outage.  Two traps shape this:

        * etcd compaction alone does NOT make old watches fail.  Watches with a
          resourceVersion are served from kube-apiserver's watch cache, an
          in-memory window of recent events that etcd compaction does not shrink
          (k8s.io/apiserver 0.34 only drops cached list snapshots).  Restarting
          kube-apiserver (the default) re-initialises every watch cache at the
          current revision, so older versions get "too old resource version:
          R (N)".  ``restart_apiserver=False`` only compacts etcd; that suffices
          when the apiserver runs with --watch-cache=false ("The resourceVersion
          for the provided watch is too old.") and for reads that bypass the cache.
        * Compacting exactly at the revision of the last object write leaves a
          watch from the previous resourceVersion starting *at* the compaction
          revision: etcd allows it but has dropped the previous value, and a
          cache-less kube-apiserver answers 500 "etcd event received with
          PrevKv=nil".  So two marker writes (outside /registry) come first, and
          the compaction lands strictly after every real resourceVersion + 1.

        ``timeout`` bounds the compaction and the restart: with hundreds of
        thousands of objects etcd's physical compaction and the apiserver's
        watch-cache fill each take longer than the tests' 60 s default.
        """
        if restart_apiserver:
            # Stopped first: a running API server may send a watcher a bookmark with the newest revision
            # (1.37 does, from etcd's progress notifications), and a watch from the revision the restarted
            # cache starts at is no 410. Stopped, it can send none past the markers below.
            self.stop_apiserver()
        self._bump_etcd_revision()
        revision = self._bump_etcd_revision()
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True}, timeout=timeout)
        if restart_apiserver:
            self.start_apiserver(timeout)
        return revision

    # -- users --------------------------------------------------------------- #

    def make_user_kubeconfig(self, username: str, groups: tuple[str, ...] | list[str] = ()) -> Path:
        """Issue a client cert for an ordinary (non-admin) user and write its kubeconfig.

        RBAC sees ``username`` and ``groups`` (plus system:authenticated); bind a
        ClusterRole to grant it anything.
        """
        assert self.dir is not None
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in username)
        pair = self.ca.issue(f"user-{safe}", username, tuple(groups))
        return write_kubeconfig(self.dir / f"kubeconfig-{safe}", self.server_url,
                                self.ca.cert_path, pair, username)

    def client_for(self, kubeconfig: Path) -> KubeClient:
        return KubeClient.from_kubeconfig(kubeconfig)

    @property
    def kubeconfig_path(self) -> Path:
        """Admin kubeconfig (system:masters)."""
        if self.dir is None:
            raise TestbedError("testbed not started")
        return self.dir / "kubeconfig-admin"

    # -- the ServiceImport CRD ---------------------------------------------- #

    def install_crd(self, version: str = "v0.5.0", timeout: float = 30.0, *, only: str | None = None) -> dict:
        """Install the ServiceImport CRD of an mcs-api release; wait until usable.

        `only="v1beta1"` keeps just that version of the release's CRD (as mcs-api
        releases after v0.5 will serve it).

        "Usable" means Established=True, group discovery lists exactly the
        served versions (discovery lags Established by a moment, and mcsdns
        picks its ServiceImport version from discovery) and every served version
        can be listed (its watch cache is filled).  Switching to a release
        that drops a stored version (v0.5.0 -> v0.4.1) is rejected by the
        apiserver (status.storedVersions), so the CRD is then removed (with all
        ServiceImports) and created afresh.
        """
        crd = yaml.safe_load(crd_path(self.cache, version).read_text())
        if only is not None:
            crd["spec"]["versions"] = [dict(v, storage=True) for v in crd["spec"]["versions"] if v["name"] == only]
        try:
            self.api.apply(crd)
        except ApiError as err:
            if err.status != 422:
                raise
            self.remove_crd()
            self.api.apply(crd)
        served = sorted(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
        self._poll(lambda: self._crd_established() and self.served_mcs_versions() == served,
                   timeout, f"CRD {version} established and discovery serving {served}")
        self._wait_watch_caches(timeout)
        return crd

    def remove_crd(self, timeout: float = 60.0) -> None:
        """Delete the CRD (the apiserver deletes every ServiceImport first) and wait until gone."""
        self.api.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, CRD_NAME)

        def gone() -> bool:
            try:
                self.api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, CRD_NAME)
            except ApiError as err:
                if err.status == 404:
                    return self.served_mcs_versions() == []
                raise
            return False

        self._poll(gone, timeout, "CRD deletion")

    def _crd_established(self) -> bool:
        crd = self.api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, CRD_NAME)
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])

    def served_mcs_versions(self) -> list[str]:
        """Versions of multicluster.x-k8s.io that discovery advertises right now."""
        try:
            group = self.api.request("GET", f"/apis/{MCS_GROUP}")
        except ApiError as err:
            if err.status == 404:
                return []
            raise
        return sorted(v["version"] for v in group.get("versions", []))

    def _poll(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        assert self.apiserver is not None
        self._wait_for(self.apiserver, check, timeout, what)

    # -- object helpers (admin) --------------------------------------------- #

    def create(self, obj: dict) -> dict:
        return self.api.create(obj)

    def apply(self, obj: dict) -> dict:
        return self.api.apply(obj)

    def apply_status(self, obj: dict, status: dict) -> dict:
        return self.api.apply_status(obj, status)

    def get(self, api_version: str, kind: str, namespace: str | None = None,
            name: str | None = None, **query: Any) -> dict:
        return self.api.get(api_version, kind, namespace, name, **query)

    def list(self, api_version: str, kind: str, namespace: str | None = None, **query: Any) -> dict:
        return self.api.list(api_version, kind, namespace, **query)

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str,
              patch: Any, patch_type: str = "merge") -> dict:
        return self.api.patch(api_version, kind, namespace, name, patch, patch_type)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str, *,
               missing_ok: bool = True) -> dict | None:
        return self.api.delete(api_version, kind, namespace, name, missing_ok=missing_ok)

    def create_namespace(self, name: str) -> dict:
        return self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
