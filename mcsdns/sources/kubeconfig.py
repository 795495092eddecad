"""How to reach the Kubernetes API: a kubeconfig or the in-cluster service account -> `ConnectionSettings`.

The common cases are read here directly: the service account of a pod, and a
kubeconfig whose user has a token, a token file, a client certificate or a
username and password. Importing the `kubernetes` package only to read them
would cost CPU before the first request of every start (its kubeconfig
module alone pulls in oauthlib, pydantic and dateutil), a fixed cost of the
initial sync that CoreDNS does not pay.

Everything else -- a user with `exec` or `auth-provider`, a field not read
here, a SOCKS proxy or one with NO_PROXY rules, a --kubeconfig path with a
`:` (which the library splits into several files) -- is loaded by the
library itself, imported only then. Which way a configuration took is logged at DEBUG.

Both ways end in the same `ConnectionSettings`, which builds the urllib3
pool (or asks the library's ApiClient for it) and produces the credentials
for each request; kubeapi.ApiConnection uses nothing else.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import urllib3
from urllib3.util.ssl_ import create_urllib3_context

log = logging.getLogger(__name__)

# Where kubelet mounts a pod's service-account volume (the path client-go and the library read).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A token file is read again once this much time passed since the last good read: kubelet rotates
# bound service-account tokens, and client-go and the library re-read theirs every minute too.
TOKEN_REFRESH = 60.0
# Settings this module applies itself; any other key changes how to connect: the library loads it.
CLUSTER_KEYS = frozenset({"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
                          "tls-server-name", "proxy-url", "extensions"})
USER_KEYS = frozenset({"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key",
                       "client-key-data", "username", "password", "extensions"})
SOCKS_SCHEMES = ("socks4", "socks4a", "socks5", "socks5h")

Credentials = Callable[[], dict[str, str]]  # header name -> value as loaded (kubeapi trims and checks it)


class KubeConfigError(Exception):
    """The kubeconfig or the in-cluster service account cannot be loaded."""


class _LibraryNeeded(Exception):
    """The configuration uses something read only by the `kubernetes` package; the message says what."""


def _no_credentials() -> dict[str, str]:
    return {}


@dataclass
class ConnectionSettings:
    """The API server, TLS and proxy settings and the credentials of one loaded configuration.

    `library` holds the kubernetes.client.Configuration when the library loaded it: the pool is
    then the library's own, built from it as the library builds it.
    """

    host: str
    verify: bool = True
    ca_file: str | None = None
    ca_data: bytes | None = field(default=None, repr=False)  # PEM or DER, from certificate-authority-data
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = field(default=None, repr=False)  # PEM, from client-certificate-data
    key_data: bytes | None = field(default=None, repr=False)  # PEM, from client-key-data (never logged)
    tls_server_name: str | None = None
    proxy: str | None = None
    credentials: Credentials = field(default=_no_credentials, repr=False)
    library: Any = field(default=None, repr=False)

    @classmethod
    def from_library(cls, configuration: Any) -> ConnectionSettings:
        """Settings that use a kubernetes.client.Configuration (its pool, its auth_settings hook)."""

        def credentials() -> dict[str, str]:
            return {
                setting["key"]: setting["value"]
                for setting in configuration.auth_settings().values()
                if setting.get("in") == "header" and setting.get("value")
            }

        return cls(host=configuration.host.rstrip("/"), credentials=credentials, library=configuration)

    def pool(self) -> urllib3.PoolManager:
        """The urllib3 pool: the one the library's RESTClientObject sets up, or the same built here.

        Same settings as the library's: cpu_count * 5 connections per host, the CA (else the
        system's), the client certificate, verification on unless insecure-skip-tls-verify, the
        TLS server name, a proxy (from proxy-url or the environment). Files are given to urllib3 as
        the library gives them, so each new connection reads them again (a rotated certificate
        file is picked up); with a *-data field the TLS context is built once here instead, so the
        certificate and key are loaded from memory rather than from a temporary file.
        """
        if self.library is not None:
            from kubernetes.client import ApiClient

            return ApiClient(self.library).rest_client.pool_manager
        cert_reqs = ssl.CERT_REQUIRED if self.verify else ssl.CERT_NONE
        args: dict[str, Any] = {"cert_reqs": cert_reqs, "maxsize": (os.cpu_count() or 1) * 5}
        if self.host.startswith("https"):
            if self.ca_data or self.cert_data or self.key_data:
                args["ssl_context"] = self._ssl_context(cert_reqs)
            else:
                args.update(ca_certs=self.ca_file, cert_file=self.cert_file, key_file=self.key_file)
        if self.tls_server_name:
            args["server_hostname"] = self.tls_server_name
        if self.proxy:
            return urllib3.ProxyManager(self.proxy, **args)
        return urllib3.PoolManager(**args)

    def _ssl_context(self, cert_reqs: int) -> ssl.SSLContext:
        context = create_urllib3_context(cert_reqs=cert_reqs)
        try:
            if self.ca_file:
                context.load_verify_locations(cafile=self.ca_file)
            elif self.ca_data:
                if self.ca_data.lstrip().startswith(b"-----"):
                    context.load_verify_locations(cadata=self.ca_data.decode("ascii"))
                else:
                    context.load_verify_locations(cadata=self.ca_data)
            else:
                context.load_default_certs()
            if self.cert_file or self.cert_data:
                _load_client_certificate(context, self)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise KubeConfigError(f"cannot load the Kubernetes client configuration: TLS settings: {exc}") from None
        return context


def _load_client_certificate(context: ssl.SSLContext, settings: ConnectionSettings) -> None:
    """load_cert_chain reads only files: data fields go through anonymous memory files (memfd) that
    are closed once read, or, where there are none, private temporary files removed at once."""
    with _as_file(settings.cert_file, settings.cert_data, "client-certificate") as cert, \
            _as_file(settings.key_file, settings.key_data, "client-key") as key:  # fmt: skip
        context.load_cert_chain(cert, key)


@contextlib.contextmanager
def _as_file(path: str | None, data: bytes | None, name: str) -> Iterator[str | None]:
    """The path of a file setting, or of its data written where only this process can read it."""
    if path or data is None:
        yield path
        return
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd(f"mcsdns-{name}", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, temp = tempfile.mkstemp(prefix=f"mcsdns-{name}-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        yield temp
    finally:
        os.unlink(temp)


class TokenFile:
    """A bearer token read from a file, read again once TOKEN_REFRESH seconds passed.

    A failed re-read raises (kubeapi then sends the last good credentials) and is tried again
    on the next request. Thread-safe: every watch thread asks for headers.
    """

    def __init__(self, path: Path, scheme: str = "Bearer") -> None:
        self.path = path
        self.scheme = scheme
        self._lock = threading.Lock()
        self._token = ""
        self._read_at = float("-inf")
        self._read()

    def _read(self) -> None:
        token = self.path.read_text()
        if not token.strip():
            raise KubeConfigError(f"the token file {self.path} is empty")
        self._token, self._read_at = token, time.monotonic()

    def __call__(self) -> dict[str, str]:
        with self._lock:
            if time.monotonic() - self._read_at >= TOKEN_REFRESH:
                self._read()
            return {"authorization": f"{self.scheme} {self._token}"}


def _static(value: str) -> Credentials:
    return lambda: {"authorization": value}


# --------------------------------------------------------------------------- loading


def load_settings(kubeconfig: Path | None, context: str | None, in_cluster: bool) -> ConnectionSettings:
    """The settings of `--kubeconfig`/`--context`, or of the pod's service account; KubeConfigError if unusable."""
    if kubeconfig is None and not in_cluster:
        raise KubeConfigError("neither --kubeconfig nor an in-cluster service account is available")
    where = f"kubeconfig {kubeconfig}" if kubeconfig is not None else "in-cluster service account"
    try:
        settings = _read_kubeconfig(kubeconfig, context) if kubeconfig is not None else _read_in_cluster()
        settings.proxy = _proxy_for(settings.host, settings.proxy)
    except _LibraryNeeded as why:
        log.debug("Kubernetes client settings from the %s: loaded by the kubernetes library (%s)", where, why)
        return ConnectionSettings.from_library(_library_configuration(kubeconfig, context, in_cluster))
    except KubeConfigError as exc:
        raise KubeConfigError(f"cannot load the Kubernetes client configuration: {exc}") from None
    log.debug("Kubernetes client settings from the %s: read natively (server %s)", where, settings.host)
    return settings


def _library_configuration(kubeconfig: Path | None, context: str | None, in_cluster: bool) -> Any:
    """A kubernetes.client.Configuration loaded by the library (imported here, and only here)."""
    from kubernetes import config as kube_config
    from kubernetes.client import Configuration

    configuration = Configuration()
    try:
        if kubeconfig is not None:
            kube_config.load_kube_config(
                config_file=str(kubeconfig), context=context, client_configuration=configuration, persist_config=False
            )
        else:
            kube_config.load_incluster_config(client_configuration=configuration)
    except kube_config.ConfigException as exc:
        raise KubeConfigError(f"cannot load the Kubernetes client configuration: {exc}") from exc
    return configuration


def _read_in_cluster(directory: Path = SERVICE_ACCOUNT_DIR) -> ConnectionSettings:
    """KUBERNETES_SERVICE_HOST/PORT, the service account's token (re-read as it rotates) and CA."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeConfigError("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set")
    if ":" in host or "%" in host:
        host = f"[{host}]"
    token, ca = directory / "token", directory / "ca.crt"
    try:
        credentials = TokenFile(token, "bearer")
    except OSError as exc:
        raise KubeConfigError(f"cannot read the service account token {token}: {exc.strerror or exc}") from None
    try:
        if not ca.read_bytes().strip():
            raise KubeConfigError(f"the service account CA {ca} is empty")
    except OSError as exc:
        raise KubeConfigError(f"cannot read the service account CA {ca}: {exc.strerror or exc}") from None
    return ConnectionSettings(host=f"https://{host}:{port}", ca_file=str(ca), credentials=credentials)


def _read_kubeconfig(path: Path, context_name: str | None) -> ConnectionSettings:
    """One kubeconfig file: the context's cluster and user, as the library would apply them."""
    if os.pathsep in str(path):
        raise _LibraryNeeded(f"several files in {path}")
    doc = _parse(path)
    if context_name is None:
        context_name = doc.get("current-context") or None
        if context_name is None:
            raise KubeConfigError(f"{path} has no current-context; name one with --context")
    ctx = _named(doc, "contexts", context_name, path)
    if ctx is None:
        raise KubeConfigError(f"context {context_name!r} is not in {path} (it has: {_names(doc, 'contexts')})")
    ctx = _section(ctx, "context", f"context {context_name!r}", path)
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    cluster = _named(doc, "clusters", cluster_name, path) if cluster_name else None
    if cluster is None:
        raise KubeConfigError(f"context {context_name!r} names cluster {cluster_name!r}, which is not in {path}")
    cluster = _section(cluster, "cluster", f"cluster {cluster_name!r}", path)
    user: dict = {}
    if user_name:
        found = _named(doc, "users", user_name, path)
        if found is None:
            raise KubeConfigError(f"context {context_name!r} names user {user_name!r}, which is not in {path}")
        user = _section(found, "user", f"user {user_name!r}", path)
    unknown = sorted((set(cluster) - CLUSTER_KEYS) | (set(user) - USER_KEYS))
    if unknown:
        raise _LibraryNeeded(f"{', '.join(unknown)} in context {context_name!r}")

    server = cluster.get("server")
    if not isinstance(server, str) or not server.strip():
        raise KubeConfigError(f"cluster {cluster_name!r} in {path} has no server")
    base = Path(os.path.abspath(path)).parent  # as kubectl: the file's directory, symlinks not followed
    settings = ConnectionSettings(host=server.strip().rstrip("/"))
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):  # the library takes any text ("false" too) as true
        raise KubeConfigError(f"cluster {cluster_name!r} in {path}: insecure-skip-tls-verify must be true or false")
    settings.verify = not insecure
    settings.tls_server_name = cluster.get("tls-server-name") or None
    settings.proxy = cluster.get("proxy-url") or None
    if settings.host.startswith("https"):
        settings.ca_file, settings.ca_data = _file_or_data(cluster, "certificate-authority", base)
        settings.cert_file, settings.cert_data = _file_or_data(user, "client-certificate", base)
        settings.key_file, settings.key_data = _file_or_data(user, "client-key", base)
    # The library's order: a token (inline before tokenFile), else username and password.
    if user.get("token"):
        settings.credentials = _static(f"Bearer {user['token']}")
    elif user.get("tokenFile"):
        token_path = base / str(user["tokenFile"])
        try:
            settings.credentials = TokenFile(token_path)
        except OSError as exc:
            raise KubeConfigError(f"user {user_name!r}: cannot read tokenFile {token_path}: {exc.strerror or exc}") from None
    elif "username" in user and "password" in user:
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()  # UTF-8, as client-go
        settings.credentials = _static(f"Basic {basic}")
    return settings


def _parse(path: Path) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=loader)  # noqa: S506 - a safe loader
    except OSError as exc:
        raise KubeConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise KubeConfigError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict):
        raise KubeConfigError(f"{path} is not a kubeconfig (expected a mapping of clusters, contexts and users)")
    return doc


def _names(doc: dict, kind: str) -> str:
    items = doc.get(kind)
    names = [str(i.get("name")) for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    return ", ".join(names) or "none"


def _named(doc: dict, kind: str, name: str, path: Path) -> dict | None:
    """The one entry of doc[kind] called `name`, or None; a malformed list is a KubeConfigError."""
    items = doc.get(kind) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise KubeConfigError(f"{kind} in {path} is not a list of named entries")
    found = [i for i in items if i.get("name") == name]
    if len(found) > 1:
        raise KubeConfigError(f"{kind} in {path} has {len(found)} entries named {name!r}")
    return found[0] if found else None


def _section(entry: dict, key: str, what: str, path: Path) -> dict:
    value = entry.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KubeConfigError(f"{what} in {path}: `{key}` is not a mapping")
    return value


def _file_or_data(section: dict, key: str, base: Path) -> tuple[str | None, bytes | None]:
    """`key-data` (base64) wins over `key` (a path, relative to the kubeconfig's directory)."""
    data = section.get(f"{key}-data")
    if data:
        try:
            return None, base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeConfigError(f"{key}-data is not base64") from None
    if section.get(key):
        file = os.path.normpath(base / str(section[key]))
        if not os.path.isfile(file):
            raise KubeConfigError(f"{key} {file}: no such file")
        return file, None
    return None, None


def _proxy_for(host: str, proxy: str | None) -> str | None:
    """The proxy the library would use: proxy-url, else the environment's for the scheme.

    NO_PROXY rules and SOCKS proxies are left to the library (it owns that matching).
    """
    env = _environment_proxies()
    if proxy is None:
        proxy = env.get(host.partition("://")[0]) or env.get("all")
    if not proxy:
        return None
    if env.get("no"):
        raise _LibraryNeeded("a proxy and NO_PROXY rules")
    if proxy.partition("://")[0].lower() in SOCKS_SCHEMES:
        raise _LibraryNeeded("a SOCKS proxy")
    return proxy


def _environment_proxies() -> dict[str, str]:
    """urllib.request.getproxies_environment() without importing urllib.request: `<scheme>_proxy`
    variables, the lower-case spelling winning, HTTP_PROXY ignored under CGI (REQUEST_METHOD)."""
    proxies: dict[str, str] = {}
    for name, value in os.environ.items():
        if value and name[-6:].lower() == "_proxy":
            proxies[name[:-6].lower()] = value
    if "REQUEST_METHOD" in os.environ:
        proxies.pop("http", None)
    for name, value in os.environ.items():
        if name[-6:] == "_proxy" and name.islower():
            if value:
                proxies[name[:-6]] = value
            else:
                proxies.pop(name[:-6], None)
    return proxies
