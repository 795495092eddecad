"""How mcsdns reaches the API: kubeconfigs and the service account read without the `kubernetes` package.

kubeconfig.py reads the common cases itself (client certificate, token,
tokenFile, username/password; the pod's service account) and hands the rest
(`exec`, `auth-provider`, several files) to the library. Against the test
bed's real kube-apiserver: each kind of credentials connects, a token file
is re-read, a relative path is the kubeconfig's directory's, a wrong CA is a
clean TLS error, --context picks the context, and an `exec` user goes
through the library. Unusable files are KubeConfigErrors that say why.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from kube_server import KubeServer, a, ensure_crd, fqdn, service_import
from test_kube_incluster import deployed_rbac, secrets, valid_token  # noqa: F401 - fixtures
from mcsdns.sources import kubeconfig
from mcsdns.sources.kubeapi import ApiConnection, KubeConfigError, Unauthorized, Unreachable, load_configuration
from testsupport.mcsdnsserver import ROOT
from testsupport.testbed import CertificateAuthority, Testbed


def write(path: Path, cluster: dict, user: dict, *, extra_contexts: dict | None = None, current: str = "main") -> Path:
    """A kubeconfig with context `main` (cluster `c`, user `u`) and more contexts `name -> (cluster, user)`."""
    clusters, users, contexts = [{"name": "c", "cluster": cluster}], [{"name": "u", "user": user}], [
        {"name": "main", "context": {"cluster": "c", "user": "u"}}]
    for name, (other_cluster, other_user) in (extra_contexts or {}).items():
        clusters.append({"name": f"c-{name}", "cluster": other_cluster})
        users.append({"name": f"u-{name}", "user": other_user})
        contexts.append({"name": name, "context": {"cluster": f"c-{name}", "user": f"u-{name}"}})
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": clusters, "users": users,
                                    "contexts": contexts, "current-context": current}))
    return path


def admin(testbed: Testbed) -> dict:
    """The test bed's admin kubeconfig as a dict."""
    return yaml.safe_load(testbed.kubeconfig_path.read_text())


def admin_cluster(testbed: Testbed) -> dict:
    return admin(testbed)["clusters"][0]["cluster"]


def get_api(path: Path, context: str | None = None) -> tuple[ApiConnection, dict]:
    conn = ApiConnection(load_configuration(path, context, False))
    return conn, conn.get("/api")


# --------------------------------------------------------------------------- against the test bed


@pytest.mark.kube
def test_the_test_beds_kubeconfig_is_read_natively_and_syncs(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    """Client certificate and CA as *-data fields, as kubeadm and kind write them: no library on the way."""
    ensure_crd(testbed)
    testbed.create(service_import(fresh_namespace, "web", ["10.8.0.1"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--log-level", "DEBUG") as server:
        server.wait_until_ready()
        assert server.answer(fqdn("web", fresh_namespace)) == a("10.8.0.1")
        assert f"kubeconfig {testbed.kubeconfig_path}: read natively" in server.log(), server.tail()
        assert "BEGIN" not in server.log()  # no certificate or key material in a DEBUG log
        server.shutdown()


@pytest.mark.kube
def test_native_settings_do_not_import_kubernetes(testbed: Testbed, secrets: list[dict], tmp_path: Path) -> None:  # noqa: F811
    """In a fresh interpreter: the kubeconfig and the service-account loaders reach the API, `kubernetes` unimported."""
    _, token = valid_token(testbed, secrets, "mcsdns-token-native")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(token)
    shutil.copy(testbed.ca.cert_path, account / "ca.crt")
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from mcsdns.sources import kubeconfig\n"
        "from mcsdns.sources.kubeapi import ApiConnection, load_configuration\n"
        "kinds = [ApiConnection(load_configuration(Path(sys.argv[1]), None, False)).get('/api')['kind'],\n"
        "         ApiConnection(kubeconfig._read_in_cluster(Path(sys.argv[2]))).get('/apis/discovery.k8s.io/v1/endpointslices',\n"
        "                                                                     {'limit': 1})['kind']]\n"
        "print(kinds, 'kubernetes' in sys.modules)\n"
    )
    env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(testbed.apiserver_port))
    result = subprocess.run([sys.executable, "-c", probe, str(testbed.kubeconfig_path), str(account)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['APIVersions', 'EndpointSliceList'] False", result.stdout


@pytest.mark.kube
def test_a_bearer_token_and_a_relative_ca_path(
    testbed: Testbed, secrets: list[dict], fresh_namespace: str, tmp_path: Path,  # noqa: F811
) -> None:
    """A ServiceAccount token in `token`; `certificate-authority: pki/ca.crt` is next to the kubeconfig."""
    ensure_crd(testbed)
    _, token = valid_token(testbed, secrets, "mcsdns-token-kubeconfig")
    (tmp_path / "pki").mkdir()
    shutil.copy(testbed.ca.cert_path, tmp_path / "pki" / "ca.crt")
    path = write(tmp_path / "kubeconfig", {"server": testbed.server_url, "certificate-authority": "pki/ca.crt"},
                 {"token": token})
    testbed.create(service_import(fresh_namespace, "web", ["10.8.1.1"]))
    with KubeServer(path, tmp_path / "mcsdns.log", "--log-level", "DEBUG") as server:  # cwd: the repository
        server.wait_until_ready()
        assert server.answer(fqdn("web", fresh_namespace)) == a("10.8.1.1")
        assert "read natively" in server.log() and token not in server.log()
        server.shutdown()


@pytest.mark.kube
def test_a_token_file_is_read_again(testbed: Testbed, secrets: list[dict], tmp_path: Path,  # noqa: F811
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """tokenFile is re-read once TOKEN_REFRESH passed (a rotated token is picked up); a failed read sends the last good one."""
    _, token = valid_token(testbed, secrets, "mcsdns-token-file")
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    path = write(tmp_path / "kubeconfig", {"server": testbed.server_url, "certificate-authority": str(testbed.ca.cert_path)},
                 {"tokenFile": "token"})
    conn, doc = get_api(path)
    assert doc["kind"] == "APIVersions"
    token_file.write_text("not-a-token")
    assert conn.get("/api")["kind"] == "APIVersions"  # within the refresh period: the token read at start
    monkeypatch.setattr(kubeconfig, "TOKEN_REFRESH", 0.0)
    with pytest.raises(Unauthorized):  # read again: the server rejects what the file holds now
        conn.get("/api")
    token_file.write_text(token)
    assert conn.get("/api")["kind"] == "APIVersions"
    token_file.unlink()  # kubelet-style gap: the last good token is sent again
    assert conn.get("/api")["kind"] == "APIVersions"
    conn.close()


@pytest.mark.kube
def test_a_wrong_ca_is_a_tls_error_not_a_crash(testbed: Testbed, tmp_path: Path) -> None:
    (tmp_path / "other-ca").mkdir()
    other = CertificateAuthority(tmp_path / "other-ca")
    cluster = dict(admin_cluster(testbed), **{"certificate-authority-data":
                                              base64.b64encode(other.cert_path.read_bytes()).decode()})
    path = write(tmp_path / "kubeconfig", cluster, admin(testbed)["users"][0]["user"])
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        get_api(path)


@pytest.mark.kube
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # what insecure-skip-tls-verify asks
def test_tls_server_name_and_insecure_skip_tls_verify(testbed: Testbed, tmp_path: Path) -> None:
    """The serving certificate names 127.0.0.1 and localhost: tls-server-name is what is checked."""
    user = admin(testbed)["users"][0]["user"]
    assert get_api(write(tmp_path / "kubeconfig", dict(admin_cluster(testbed), **{"tls-server-name": "localhost"}),
                         user))[1]["kind"] == "APIVersions"
    with pytest.raises(Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
        get_api(write(tmp_path / "kubeconfig", dict(admin_cluster(testbed), **{"tls-server-name": "elsewhere.example"}),
                      user))
    (tmp_path / "other-ca").mkdir()
    other = base64.b64encode(CertificateAuthority(tmp_path / "other-ca").cert_path.read_bytes()).decode()
    unverified = dict(admin_cluster(testbed), **{"certificate-authority-data": other, "insecure-skip-tls-verify": True})
    assert get_api(write(tmp_path / "kubeconfig", unverified, user))[1]["kind"] == "APIVersions"


class ConnectProxy:
    """An HTTP proxy that tunnels (CONNECT), as an https_proxy does; records each tunnel's target."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        proxy = self

        class Tunnel(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                method, target, _ = self.rfile.readline().decode().split(" ", 2)
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                if method != "CONNECT":
                    self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                    return
                proxy.targets.append(target)
                host, port = target.rsplit(":", 1)
                with socket.create_connection((host, int(port)), timeout=10) as upstream:
                    self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    self.wfile.flush()
                    pair = {self.connection: upstream, upstream: self.connection}
                    while True:
                        for ready in select.select(list(pair), [], [], 30)[0]:
                            data = ready.recv(65536)
                            if not data:
                                return
                            pair[ready].sendall(data)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Tunnel)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.kube
def test_proxy_url_tunnels_through_the_proxy(testbed: Testbed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    proxy = ConnectProxy()
    try:
        path = write(tmp_path / "kubeconfig", dict(admin_cluster(testbed), **{"proxy-url": proxy.url}),
                     admin(testbed)["users"][0]["user"])
        settings = load_configuration(path, None, False)
        assert settings.library is None and settings.proxy == proxy.url
        assert get_api(path)[1]["kind"] == "APIVersions"
        assert proxy.targets == [f"127.0.0.1:{testbed.apiserver_port}"]
    finally:
        proxy.close()


@pytest.mark.kube
def test_context_selects_cluster_and_user(testbed: Testbed, tmp_path: Path) -> None:
    """The current context points at a closed port; --context names the test bed."""
    user = admin(testbed)["users"][0]["user"]
    closed = dict(admin_cluster(testbed), server="https://127.0.0.1:1")
    path = write(tmp_path / "kubeconfig", closed, user, extra_contexts={"bed": (admin_cluster(testbed), user)})
    assert load_configuration(path, None, False).host == "https://127.0.0.1:1"
    with pytest.raises(Unreachable):
        get_api(path)
    conn, doc = get_api(path, "bed")
    assert conn.host == testbed.server_url.rstrip("/") and doc["kind"] == "APIVersions"


@pytest.mark.kube
def test_an_exec_user_is_loaded_by_the_library(testbed: Testbed, secrets: list[dict], tmp_path: Path) -> None:  # noqa: F811
    """A credential plugin printing an ExecCredential with a ServiceAccount token: the library runs it."""
    _, token = valid_token(testbed, secrets, "mcsdns-token-exec")
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json\nprint(json.dumps(" + repr({
        "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": token}}) + "))\n")
    path = write(tmp_path / "kubeconfig", {"server": testbed.server_url, "certificate-authority": str(testbed.ca.cert_path)},
                 {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                           "args": [str(plugin)], "interactiveMode": "Never"}})
    settings = load_configuration(path, None, False)
    assert settings.library is not None
    conn = ApiConnection(settings)
    assert conn.get("/apis/discovery.k8s.io/v1/endpointslices", {"limit": 1})["kind"] == "EndpointSliceList"
    assert conn._headers("application/json")["authorization"] == f"Bearer {token}"
    conn.close()


# --------------------------------------------------------------------------- files that cannot be used


def test_what_falls_back_to_the_library(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """exec, auth-provider and fields not read here go to the library (imported only then); the log says why."""
    for user, why in (({"exec": {"command": "true"}}, "exec"), ({"auth-provider": {"name": "oidc"}}, "auth-provider"),
                      ({"token": "t", "as": "someone"}, "as")):
        path = write(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}, user)
        with caplog.at_level("DEBUG", logger=kubeconfig.log.name):
            caplog.clear()
            try:
                settings = load_configuration(path, None, False)
            except KubeConfigError:
                settings = None  # the library refused it (an oidc provider without its settings)
        assert f"loaded by the kubernetes library ({why} in context 'main')" in caplog.text, caplog.text
        assert settings is None or settings.library is not None
    native = write(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True},
                   {"username": "ann", "password": "pw"})
    settings = load_configuration(native, None, False)
    assert settings.library is None and not settings.verify
    assert settings.credentials() == {"authorization": "Basic " + base64.b64encode(b"ann:pw").decode()}


@pytest.mark.parametrize("text, message", [
    ("clusters: [\n", "is not valid YAML"),
    ("just a string\n", "is not a kubeconfig"),
    ("apiVersion: v1\nkind: Config\nclusters: []\n", "has no current-context"),
    ("current-context: x\ncontexts: []\n", "context 'x' is not in"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n", "names user 'u', which is not in"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n", "names cluster 'c', which is not in"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: [{name: c, cluster: {}}]\n",
     "has no server"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority: missing.crt}}]\n", "missing.crt: no such file"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: '@@'}}]\n", "not base64"),
    ("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
     "clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: 'false'}}]\n", "must be true or false"),
])  # fmt: skip
def test_unusable_kubeconfigs_say_why(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(KubeConfigError) as error:
        load_configuration(path, None, False)
    assert str(error.value).startswith("cannot load the Kubernetes client configuration: ")
    assert message in str(error.value)


def test_unreadable_kubeconfig_and_token_file(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="cannot read .*kubeconfig"):
        load_configuration(tmp_path / "kubeconfig", None, False)
    path = write(tmp_path / "kubeconfig", {"server": "https://h"}, {"tokenFile": "gone"})
    with pytest.raises(KubeConfigError, match="cannot read tokenFile .*gone"):
        load_configuration(path, None, False)


def test_in_cluster_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment and files a pod has; an IPv6 service host gets brackets."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeConfigError, match="cannot read the service account token"):
        kubeconfig._read_in_cluster(tmp_path)
    (tmp_path / "token").write_text("abc\n")
    with pytest.raises(KubeConfigError, match="cannot read the service account CA"):
        kubeconfig._read_in_cluster(tmp_path)
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    settings = kubeconfig._read_in_cluster(tmp_path)
    assert settings.host == "https://[fd00::1]:443" and settings.ca_file == str(tmp_path / "ca.crt")
    assert settings.credentials() == {"authorization": "bearer abc\n"}  # kubeapi trims it
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT")
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_PORT"):
        kubeconfig._read_in_cluster(tmp_path)


def test_client_key_data_stays_off_the_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Key data reaches the TLS context through a memfd, closed once loaded: no file left behind, none in TMPDIR."""
    (tmp_path / "ca").mkdir()
    ca = CertificateAuthority(tmp_path / "ca")
    pair = ca.issue("client", "client")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    path = write(tmp_path / "kubeconfig", {"server": "https://127.0.0.1:1", "certificate-authority": str(ca.cert_path)},
                 {"client-certificate-data": base64.b64encode(pair.cert_path.read_bytes()).decode(),
                  "client-key-data": base64.b64encode(pair.key_path.read_bytes()).decode()})
    settings = load_configuration(path, None, False)
    assert "BEGIN" not in repr(settings)
    conn = ApiConnection(settings)
    assert list(temp.iterdir()) == []
    open_files = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [f for f in open_files if "mcsdns-client" in f], open_files
    mismatched = dict(yaml.safe_load(path.read_text()))
    mismatched["users"][0]["user"]["client-key-data"] = base64.b64encode(ca.issue("x", "x").key_path.read_bytes()).decode()
    path.write_text(json.dumps(mismatched))
    with pytest.raises(KubeConfigError, match="TLS settings"):
        ApiConnection(load_configuration(path, None, False))
    conn.close()
