"""deploy/ against the real kube-apiserver of the testbed, and the server run as deploy/ runs it.

* `kubectl apply -k deploy/ --server-side` (kubectl built from the testbin Go
  module, kustomize included) and the production overlay; every object is read
  back and its properties checked: RBAC rules (also through the real
  authorizer, SubjectAccessReview), probes, security context, ports, the flags
  ConfigMap, the PodDisruptionBudget, HPA and ServiceMonitor.
* The pod template is admitted as a Pod (server-side dry run) under the
  namespace's `restricted` Pod Security level -- and a weakened copy is not.
* The examples (CoreDNS and NodeLocal DNSCache ConfigMaps, the CoreDNS
  multicluster RBAC) pass server-side validation (dry run: they would replace
  kube-system objects).
* mcsdns runs with the identity the ClusterRole describes (an ordinary user
  bound to the applied ClusterRole), started by the Deployment's own command
  with the flags of the applied ConfigMap; it syncs and answers, directly and
  through a real CoreDNS running the stub-zone block of the example (and the
  NodeLocal DNSCache block in front of it).

Static checks that need no cluster (the flags parse with the real CLI, the
Containerfile matches the Deployment) are not marked `kube`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
import yaml

from testsupport.cluster import node_local_dns_objects
from testsupport.polling import eventually
from testsupport.testbed import ApiError, Process, Testbed
from testsupport.testbed import testbin_cache as _testbin_cache

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
BASE = DEPLOY / "base"
PRODUCTION = DEPLOY / "overlays" / "production"
EXAMPLES = DEPLOY / "examples"
NAMESPACE = "mcsdns"
NAME = "mcsdns"
RBAC = "rbac.authorization.k8s.io/v1"
MCS = "multicluster.x-k8s.io"
ZONE = "clusterset.local"

# The only access mcsdns needs (spec 1.1-1.3): list + watch, three resources.
EXPECTED_RULES = {
    (MCS, "serviceimports"): {"list", "watch"},
    ("discovery.k8s.io", "endpointslices"): {"list", "watch"},
    ("", "namespaces"): {"list", "watch"},
}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "impersonate", "*"}


# --------------------------------------------------------------------------- helpers


def load_yaml_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def deployment_file() -> dict:
    (doc,) = [d for d in load_yaml_docs(BASE / "deployment.yaml") if d["kind"] == "Deployment"]
    return doc


def container_of(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def parse_flags(text: str) -> list[str]:
    """The flags file's flags, one item each, as a shell splits them (to compare, not to run)."""
    return shlex.split(text, comments=True)


def parse_flags_file(text: str, tmp_path: Path) -> Any:
    """The Config of `mcsdns serve --flags-file F` with `text` in F, read by the real CLI's reader."""
    from mcsdns.cli import build_parser, config_from_args
    from mcsdns.flagsfile import resolve

    path = tmp_path / "flags"
    path.write_text(text)
    return config_from_args(resolve(["--flags-file", str(path)], build_parser().parse_args(["serve"]))[0])


def served_command(command: list[str], flags_file: Path, *later: str) -> list[str]:
    """The Deployment's `command` (the image's `mcsdns serve --flags-file PATH`) run from this checkout,
    reading `flags_file` instead of the mounted PATH, with `later` flags after it (they win)."""
    assert command == ["mcsdns", "serve", "--flags-file", "/etc/mcsdns/flags"], command
    return [sys.executable, "-m", "mcsdns", *command[1:-1], str(flags_file), *later]


def split_hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- static checks (no cluster)


def test_flags_file_parses_with_the_real_cli(tmp_path: Path) -> None:
    config = parse_flags_file((BASE / "mcsdns.flags").read_text(), tmp_path)
    assert config.listen == (("0.0.0.0", 5353),)
    assert config.http_listen == ("0.0.0.0", 9153)  # probes come from the kubelet, not loopback
    assert config.zones == (ZONE,)
    assert config.upstreams == ()  # CoreDNS sends only clusterset.local: refuse the rest


def test_flags_match_the_deployment(tmp_path: Path) -> None:
    deployment = deployment_file()
    pod = deployment["spec"]["template"]["spec"]
    container = container_of(deployment)
    config = parse_flags_file((BASE / "mcsdns.flags").read_text(), tmp_path)
    ports = {(p["name"], p["protocol"]): p["containerPort"] for p in container["ports"]}
    assert ports[("dns", "UDP")] == ports[("dns-tcp", "TCP")] == config.listen[0][1] == 5353
    assert ports[("metrics", "TCP")] == config.http_listen[1] == 9153
    # lameduck, then up to 2 s drain and 2 s for the watches to close: SIGKILL must not come first.
    assert pod["terminationGracePeriodSeconds"] >= config.lameduck + 5


def test_containerfile_matches_the_deployment() -> None:
    text = (REPO / "Containerfile").read_text()
    final_stage = text.split("\nFROM ")[-1]
    deployment = deployment_file()
    pod_sc = deployment["spec"]["template"]["spec"]["securityContext"]
    user = re.search(r"^USER (\d+):(\d+)$", final_stage, re.M)
    assert user and (int(user[1]), int(user[2])) == (pod_sc["runAsUser"], pod_sc["runAsGroup"])
    exposed = set(re.search(r"^EXPOSE (.+)$", final_stage, re.M)[1].split())
    ports = {f"{p['containerPort']}/{p['protocol'].lower()}" for p in container_of(deployment)["ports"]}
    assert ports == exposed
    # The Deployment runs the image's own command, `mcsdns serve --flags-file /etc/mcsdns/flags`:
    # `mcsdns` from the venv first on PATH, the same default command, the base's flags as the default file.
    command = container_of(deployment)["command"]
    assert re.search(r"^ENV PATH=/opt/mcsdns/bin:\$PATH", final_stage, re.M)
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", final_stage, re.M)[1])
    cmd = json.loads(re.search(r"^CMD (.+)$", final_stage, re.M)[1])
    assert entrypoint + cmd == command == ["mcsdns", "serve", "--flags-file", "/etc/mcsdns/flags"]
    assert re.search(r"^COPY deploy/base/mcsdns.flags /etc/mcsdns/flags$", final_stage, re.M)
    for path in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for name in path.split():
            assert (REPO / name).exists(), f"Containerfile copies {name}, which does not exist"


# --------------------------------------------------------------------------- kubectl + the testbed


def cached_binary(name: str) -> Path:
    """kubectl or coredns from the testbin cache; like the rest of it, skipped (failed in CI) when absent."""
    path = _testbin_cache() / "bin" / name
    if not path.exists():
        message = (f"{name} not found at {path}; run tools/testbin/build.sh (kubectl builds from "
                   "the same Go module as kube-apiserver, about a minute on a warm cache)")
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def with_component(component: str, tmp: Path) -> list[dict]:
    """deploy/base with deploy/components/<component>, as the real `kubectl kustomize` renders them."""
    root = tmp / f"overlay-{component}"
    root.mkdir()
    rel = os.path.relpath(DEPLOY, root)
    (root / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"{rel}/base"], "components": [f"{rel}/components/{component}"]}))
    out = subprocess.run([str(cached_binary("kubectl")), "kustomize", str(root)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


class Kubectl:
    """The real kubectl (with its kustomize) against the testbed, admin credentials."""

    def __init__(self, binary: Path, kubeconfig: Path, cache_dir: Path) -> None:
        self.base = [str(binary), f"--kubeconfig={kubeconfig}", f"--cache-dir={cache_dir}"]

    def __call__(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.base, *map(str, args)], capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc

    def render(self, path: Path) -> list[dict]:
        return [d for d in yaml.safe_load_all(self("kustomize", path).stdout) if d]


@pytest.fixture(scope="module")
def kubectl(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return Kubectl(cached_binary("kubectl"), testbed.kubeconfig_path, tmp_path_factory.mktemp("kubectl-cache"))


def assert_no_warnings(proc: subprocess.CompletedProcess[str]) -> None:
    """PodSecurity `warn` and deprecated-API warnings both arrive as `Warning:` lines."""
    warnings = [line for line in proc.stderr.splitlines() if "Warning" in line]
    assert not warnings, proc.stderr


def read_back(testbed: Testbed, obj: dict) -> dict:
    """GET the object a manifest describes, by its apiVersion/kind/namespace/name."""
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    plural = {"ServiceMonitor": "servicemonitors"}.get(kind)
    if plural is None:
        from testsupport.testbed import resource_for

        plural = resource_for(kind).plural
    ns = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return testbed.api.request("GET", f"{prefix}{ns}/{plural}/{meta['name']}")


# A ServiceMonitor CRD cut down to the fields the example uses, with the real
# CRD's types and duration pattern: kubectl's strict field validation then
# rejects a misspelt or mistyped field, as the Prometheus Operator's CRD would.
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"kind": "ServiceMonitor", "listKind": "ServiceMonitorList",
                  "plural": "servicemonitors", "singular": "servicemonitor"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "required": ["endpoints", "selector"], "properties": {
                    "selector": {"type": "object", "properties": {
                        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "matchExpressions": {"type": "array", "items": {
                            "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }},
                    "namespaceSelector": {"type": "object", "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    }},
                    "jobLabel": {"type": "string"},
                    "endpoints": {"type": "array", "items": {"type": "object", "properties": {
                        "port": {"type": "string"},
                        "path": {"type": "string"},
                        "scheme": {"type": "string", "enum": ["http", "https"]},
                        "interval": {"type": "string", "pattern": DURATION},
                        "scrapeTimeout": {"type": "string", "pattern": DURATION},
                    }}},
                }},
            }}},
        }],
    },
}


def install_servicemonitor_crd(testbed: Testbed) -> None:
    testbed.apply(SERVICEMONITOR_CRD)
    # Established, then discovery (kubectl maps the kind through it), then listable.
    eventually(lambda: any(r["name"] == "servicemonitors" for r in testbed.api.request(
        "GET", "/apis/monitoring.coreos.com/v1")["resources"]), 30, what="ServiceMonitor in discovery", interval=0.1, ignore=(ApiError,))
    eventually(lambda: testbed.api.request("GET", "/apis/monitoring.coreos.com/v1/servicemonitors",
                                           query={"limit": 1}) is not None, 30, what="ServiceMonitor listable", interval=0.1, ignore=(ApiError,))


@pytest.fixture(scope="module")
def base(testbed: Testbed, kubectl: Kubectl) -> dict[tuple[str, str], dict]:
    """`kubectl apply -k deploy/ --server-side`; the applied objects read back, by (kind, name)."""
    rendered = kubectl.render(DEPLOY)
    assert rendered == kubectl.render(BASE), "deploy/ must be exactly the base"
    proc = kubectl("apply", "-k", DEPLOY, "--server-side")
    assert_no_warnings(proc)
    return {(obj["kind"], obj["metadata"]["name"]): read_back(testbed, obj) for obj in rendered}


def find(objects: dict[tuple[str, str], dict], kind: str) -> dict:
    (obj,) = [o for (k, _), o in objects.items() if k == kind]
    return obj


@pytest.mark.kube
def test_base_has_every_kind(base: dict[tuple[str, str], dict]) -> None:
    kinds = sorted(kind for kind, _ in base)
    assert kinds == sorted(["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                            "ConfigMap", "Deployment", "Service", "PodDisruptionBudget"])
    for (kind, name), obj in base.items():
        if kind != "Namespace" and obj["metadata"].get("namespace") is not None:
            assert obj["metadata"]["namespace"] == NAMESPACE, (kind, name)


@pytest.mark.kube
def test_cluster_role_is_exactly_read_only_on_three_resources(base: dict, kubectl: Kubectl) -> None:
    role = base[("ClusterRole", NAME)]
    got: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                got.setdefault((group, resource), set()).update(rule["verbs"])
    assert got == EXPECTED_RULES

    binding = base[("ClusterRoleBinding", NAME)]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert ("ServiceAccount", NAME) in base
    assert base[("Deployment", NAME)]["spec"]["template"]["spec"]["serviceAccountName"] == NAME

    # No write verb in any role anywhere in deploy/ (base, components, examples).
    docs = kubectl.render(PRODUCTION) + [d for f in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml_docs(f)]
    for doc in docs:
        for rule in doc.get("rules") or []:
            assert not set(rule["verbs"]) & WRITE_VERBS, (doc["metadata"]["name"], rule)


def access(testbed: Testbed, user: str, groups: list[str], group: str, resource: str, verb: str) -> bool:
    review = testbed.api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups,
                 "resourceAttributes": {"group": group, "resource": resource, "verb": verb}},
    })
    return bool(review["status"].get("allowed"))


@pytest.mark.kube
def test_service_account_may_read_and_nothing_else(testbed: Testbed, base: dict) -> None:
    """The real authorizer, asked about the pod's identity through the applied binding."""
    user = f"system:serviceaccount:{NAMESPACE}:{NAME}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
    allowed = [(g, r, v) for (g, r), verbs in EXPECTED_RULES.items() for v in sorted(verbs)]
    # The binding reaches the authorizer through an informer: wait for the first grant.
    eventually(lambda: access(testbed, user, groups, *allowed[0]), 15, what="RBAC grant visible", interval=0.1, ignore=(ApiError,))
    for g, r, v in allowed:
        assert access(testbed, user, groups, g, r, v), (g, r, v)
    denied = [(g, r, v) for (g, r) in EXPECTED_RULES for v in ("get", "create", "update", "patch", "delete")]
    denied += [("", "services", "list"), ("", "pods", "list"), ("", "secrets", "list"),
               ("", "configmaps", "list"), (MCS, "serviceexports", "list"), ("", "endpoints", "watch")]
    for g, r, v in denied:
        assert not access(testbed, user, groups, g, r, v), (g, r, v)


@pytest.mark.kube
def test_deployment(base: dict) -> None:
    deployment = base[("Deployment", NAME)]
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    container = container_of(deployment)
    labels = spec["template"]["metadata"]["labels"]

    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    node_spread = spread["kubernetes.io/hostname"]
    assert node_spread["maxSkew"] == 1 and node_spread["whenUnsatisfiable"] == "DoNotSchedule"
    assert node_spread["labelSelector"]["matchLabels"].items() <= labels.items()

    # Resources: modest requests, a memory limit, no CPU limit.
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert container["resources"]["limits"] == {"memory": "512Mi"}

    # Probes on the admin listener, by port name.
    ports = {p["name"]: p for p in container["ports"]}
    assert ports["metrics"]["containerPort"] == 9153
    assert (ports["dns"]["containerPort"], ports["dns"]["protocol"]) == (5353, "UDP")
    assert (ports["dns-tcp"]["containerPort"], ports["dns-tcp"]["protocol"]) == (5353, "TCP")
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics", "scheme": "HTTP"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics", "scheme": "HTTP"}
    assert container["startupProbe"]["httpGet"]["path"] == "/health"

    # Security: pod and container.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert "add" not in sc["capabilities"]

    # The downward API feeds ns.dns.<zone>.
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["POD_IPS"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIPs"


@pytest.mark.kube
def test_flags_reach_the_server_from_the_generated_config_map(testbed: Testbed, base: dict, tmp_path: Path) -> None:
    deployment = base[("Deployment", NAME)]
    pod = deployment["spec"]["template"]["spec"]
    container = container_of(deployment)
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    cm_name = volume["configMap"]["name"]
    assert re.fullmatch(r"mcsdns-flags-[a-z0-9]{10}", cm_name), cm_name  # kustomize's content hash
    config_map = testbed.get("v1", "ConfigMap", NAMESPACE, cm_name)
    assert config_map["data"]["flags"] == (BASE / "mcsdns.flags").read_text()
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert container["command"][-1] == f"{mount['mountPath']}/flags"  # the file `--flags-file` reads
    config = parse_flags_file(config_map["data"]["flags"], tmp_path)
    assert pod["terminationGracePeriodSeconds"] >= config.lameduck + 5


@pytest.mark.kube
def test_pod_template_is_admitted_as_restricted(testbed: Testbed, base: dict) -> None:
    namespace = base[("Namespace", NAMESPACE)]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    template = base[("Deployment", NAME)]["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": "mcsdns-dry-run-", "namespace": NAMESPACE,
                        "labels": template["metadata"]["labels"]},
           "spec": template["spec"]}
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    created = testbed.api.request("POST", path, pod, query={"dryRun": "All"})
    assert created["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True

    # The control: the same pod with privilege escalation allowed is refused by PodSecurity.
    weakened = json.loads(json.dumps(pod))
    weakened["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    with pytest.raises(ApiError) as refused:
        testbed.api.request("POST", path, weakened, query={"dryRun": "All"})
    assert refused.value.status == 403 and "PodSecurity" in str(refused.value)


@pytest.mark.kube
def test_service(base: dict) -> None:
    service = base[("Service", NAME)]
    spec = service["spec"]
    assert spec["type"] == "ClusterIP" and spec["clusterIP"] not in ("", "None")
    ports = {(p["port"], p["protocol"]): p for p in spec["ports"]}
    assert set(ports) == {(53, "UDP"), (53, "TCP"), (9153, "TCP")}
    assert ports[(53, "UDP")]["targetPort"] == "dns"
    assert ports[(53, "TCP")]["targetPort"] == "dns-tcp"
    assert ports[(9153, "TCP")]["name"] == "metrics" and ports[(9153, "TCP")]["targetPort"] == "metrics"
    template = base[("Deployment", NAME)]["spec"]["template"]
    assert spec["selector"].items() <= template["metadata"]["labels"].items()
    names = {p["name"] for p in container_of(base[("Deployment", NAME)])["ports"]}
    assert {p["targetPort"] for p in spec["ports"]} <= names


@pytest.mark.kube
def test_pod_disruption_budget(base: dict) -> None:
    pdb = base[("PodDisruptionBudget", NAME)]
    assert pdb["spec"]["maxUnavailable"] == 1
    labels = base[("Deployment", NAME)]["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.kube
def test_examples_pass_server_side_validation(kubectl: Kubectl, base: dict) -> None:
    """Dry run only: applied for real they would replace kube-system's CoreDNS ConfigMaps. `base`: the
    mcsdns namespace exists (knot-secondary.yaml goes there, under its restricted PodSecurity level)."""
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert {f.name for f in files} >= {"coredns-stub-zone.yaml", "nodelocaldns-stub-zone.yaml",
                                       "coredns-multicluster.yaml", "knot-secondary.yaml", PATCHES[0]}
    for path in files:
        if path.name in PATCHES:  # a patch of the user's own object: test_the_nodelocaldns_secondary_patch_...
            continue
        proc = kubectl("apply", "--server-side", "--dry-run=server", "-f", path)
        assert_no_warnings(proc)
        assert "serverside-applied (server dry run)" in proc.stdout, proc.stdout


PATCHES = ("nodelocaldns-secondary.yaml",)  # examples that patch an object of the user's, not objects


@pytest.mark.kube
def test_the_nodelocaldns_secondary_patch_merges_into_the_addon_daemonset(kubectl: Kubectl, tmp_path: Path) -> None:
    """deploy/examples/nodelocaldns-secondary.yaml, merged by kubectl's strategic merge into a DaemonSet shaped
    like the add-on's (testsupport/cluster.py's): node-cache keeps its own mounts and gains the shared
    directory read-only, the follower runs `mcsdns follow-primary` into it, and the API server accepts
    the result (server dry run, no warning)."""
    daemonset = next(o for o in node_local_dns_objects("") if o["kind"] == "DaemonSet")
    (tmp_path / "daemonset.json").write_text(json.dumps(daemonset))
    merged = json.loads(kubectl("patch", "--local", "-f", tmp_path / "daemonset.json", "--type=strategic",
                                "--patch-file", EXAMPLES / PATCHES[0], "-o", "json").stdout)
    pod = merged["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert list(containers) == ["node-cache", "mcsdns-primary"]
    assert sorted(containers["node-cache"]["volumeMounts"], key=lambda m: m["name"]) == [
        {"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True},
        {"name": "mcsdns-primary", "mountPath": "/run/mcsdns-primary", "readOnly": True}]
    follower = containers["mcsdns-primary"]
    assert follower["args"][0] == "follow-primary" and "--out=/run/mcsdns-primary/secondary.conf" in follower["args"]
    assert {"name": "mcsdns-primary", "mountPath": "/run/mcsdns-primary"} in follower["volumeMounts"]
    assert {v["name"] for v in pod["volumes"]} == {"config-volume", "mcsdns-primary"}
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    proc = kubectl("apply", "--server-side", "--dry-run=server", "-f", tmp_path / "merged.json")
    assert_no_warnings(proc)


@pytest.mark.kube
def test_production_overlay(testbed: Testbed, kubectl: Kubectl, base: dict) -> None:
    """Base + HPA + ServiceMonitor, applied for real; the base is re-applied afterwards."""
    install_servicemonitor_crd(testbed)
    rendered = kubectl.render(PRODUCTION)
    try:
        assert_no_warnings(kubectl("apply", "-k", PRODUCTION, "--server-side"))
        objects = {(o["kind"], o["metadata"]["name"]): read_back(testbed, o) for o in rendered}

        hpa = objects[("HorizontalPodAutoscaler", NAME)]
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
        assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
        # The HPA owns the replica count: kubectl no longer manages spec.replicas.
        deployment = objects[("Deployment", NAME)]
        assert "replicas" not in next(o for o in rendered if o["kind"] == "Deployment")["spec"]
        kubectl_fields = [m["fieldsV1"] for m in deployment["metadata"]["managedFields"] if m["manager"] == "kubectl"]
        assert kubectl_fields and all("f:replicas" not in m.get("f:spec", {}) for m in kubectl_fields)

        monitor = objects[("ServiceMonitor", NAME)]
        service = objects[("Service", NAME)]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    finally:
        kubectl("apply", "-k", DEPLOY, "--server-side")
        for obj in rendered:
            if obj["kind"] in ("HorizontalPodAutoscaler", "ServiceMonitor"):
                kubectl("delete", obj["kind"].lower(), "-n", NAMESPACE, obj["metadata"]["name"],
                        "--ignore-not-found")
    assert read_back(testbed, base[("Deployment", NAME)])["spec"]["replicas"] == 2


# --------------------------------------------------------------------------- the server, as deployed


def corefile_block(corefile: str, key: str) -> str:
    """The server block that starts with `key {`, up to its closing brace."""
    start = corefile.index(f"{key} {{")
    depth = 0
    for i, ch in enumerate(corefile[start:], start):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return corefile[start:i + 1]
    raise ValueError(f"unbalanced block {key}")


def example_corefile(name: str) -> str:
    (config_map,) = [d for d in load_yaml_docs(EXAMPLES / name) if d["kind"] == "ConfigMap"]
    return config_map["data"]["Corefile"]


def runnable(block: str, port: int, plugins: set[str], replacements: dict[str, str]) -> str:
    """An example block made runnable on loopback by the trimmed test CoreDNS.

    Its port becomes `port`; directives the trimmed build lacks (reload, loop;
    bind when absent) and `prometheus` (a fixed port) are dropped; `bind` is
    pointed at 127.0.0.1. What remains -- errors, cache, forward and its
    options -- is the example's text, unchanged apart from `replacements`.
    """
    lines = []
    for line in block.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("reload", "loop", "prometheus", "health", "bind"):
            continue
        lines.append(line)
    text = "\n".join(lines).replace(f"{ZONE}:53 {{", f"{ZONE}:{port} {{", 1)
    if "bind" in plugins:  # loopback only when the build has it (else: all addresses, briefly)
        text = text.replace(f"{ZONE}:{port} {{", f"{ZONE}:{port} {{\n    bind 127.0.0.1", 1)
    for old, new in replacements.items():
        assert old in text, (old, text)
        text = text.replace(old, new)
    return text + "\n"


@pytest.fixture
def user_bound_to_deploy_role(testbed: Testbed, base: dict) -> Iterator[Path]:
    """An ordinary user (client certificate) bound to the ClusterRole applied from deploy/."""
    user = f"mcsdns-deploy-{uuid.uuid4().hex[:8]}"
    kubeconfig = testbed.make_user_kubeconfig(user)
    binding = f"{user}-binding"
    testbed.apply({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })
    client = testbed.client_for(kubeconfig)
    eventually(lambda: client.request("GET", "/apis/discovery.k8s.io/v1/endpointslices", query={"limit": 1}),
               15, what="the binding reaching the authorizer", interval=0.1, ignore=(ApiError,))
    yield kubeconfig
    testbed.delete(RBAC, "ClusterRoleBinding", None, binding)


@pytest.mark.kube
def test_server_runs_as_deployed_with_the_cluster_role(
    testbed: Testbed, base: dict, user_bound_to_deploy_role: Path, fresh_namespace: str, tmp_path: Path,
) -> None:
    from kube_server import KubeServer, a, endpoint_slice, ensure_crd, fqdn, service_import
    from testsupport.testbed import free_port

    coredns_bin = cached_binary("coredns")
    ensure_crd(testbed)
    ns = fresh_namespace
    testbed.create(service_import(ns, "web", ["10.9.0.1"]))
    backends = [f"10.9.1.{i}" for i in range(1, 61)]  # ~1 KB of A records: beyond 512-byte UDP
    testbed.create(service_import(ns, "db", headless=True))
    testbed.create(endpoint_slice(ns, "db-east", "db", "east", [(ip, True) for ip in backends]))

    # The Deployment's own command, reading the applied ConfigMap's file as it is; only the
    # addresses (loopback, free ports), the credentials and lameduck differ, given after the file.
    deployment = base[("Deployment", NAME)]
    command = container_of(deployment)["command"]
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    flags_file = tmp_path / "flags"
    flags_file.write_text(testbed.get("v1", "ConfigMap", NAMESPACE, volume["configMap"]["name"])["data"]["flags"])

    server = KubeServer(user_bound_to_deploy_role, tmp_path / "mcsdns.log")
    server.argv = served_command(command, flags_file, f"--kubeconfig={user_bound_to_deploy_role}",
                                 f"--listen=127.0.0.1:{server.dns_port}", f"--http-listen=127.0.0.1:{server.http_port}",
                                 "--lameduck=0")
    plugins = set(subprocess.run([str(coredns_bin), "-plugins"], capture_output=True, text=True,
                                 timeout=30).stdout.split())
    stub_port, node_local_port = free_port(), free_port()
    corefile = tmp_path / "Corefile"
    corefile.write_text(
        runnable(corefile_block(example_corefile("coredns-stub-zone.yaml"), f"{ZONE}:53"), stub_port, plugins,
                 {"MCSDNS_SERVICE_IP": f"127.0.0.1:{server.dns_port}"})
        + runnable(corefile_block(example_corefile("nodelocaldns-stub-zone.yaml"), f"{ZONE}:53"), node_local_port,
                   plugins, {"__PILLAR__CLUSTER__DNS__": f"127.0.0.1:{stub_port}"}))
    coredns = Process("coredns", [str(coredns_bin), "-conf", str(corefile)], tmp_path / "coredns.log")

    with server:
        server.wait_until_ready()
        assert server.ready() == (200, "OK")
        assert server.answer(fqdn("web", ns)) == a("10.9.0.1")
        assert "Kubernetes API" in server.log() and "forbidden" not in server.log()

        coredns.start()
        try:
            def via(port: int, name: str, tcp: bool = False) -> dns.message.Message:
                query = dns.message.make_query(name + ".", "A", use_edns=0, payload=1232)
                if tcp:
                    return dns.query.tcp(query, "127.0.0.1", port=port, timeout=2)
                return dns.query.udp(query, "127.0.0.1", port=port, timeout=2)

            def answers(reply: dns.message.Message) -> tuple[int, list[str], list[int]]:
                rrs = [rrset for rrset in reply.answer if rrset.rdtype == dns.rdatatype.A]
                return reply.rcode(), sorted(rd.address for rrset in rrs for rd in rrset), [r.ttl for r in rrs]

            def coredns_answers() -> bool:
                try:
                    return answers(via(stub_port, fqdn("web", ns)))[1] == ["10.9.0.1"]
                except Exception:
                    assert coredns.running(), coredns.tail()
                    return False

            eventually(coredns_answers, 15, what="CoreDNS answering through the stub zone", interval=0.1, ignore=(ApiError,))
            # CoreDNS stub zone -> mcsdns, over UDP and (the large headless answer) TCP.
            rcode, ips, ttls = answers(via(stub_port, fqdn("web", ns)))
            assert (rcode, ips) == (0, ["10.9.0.1"]) and all(t <= 5 for t in ttls)
            rcode, ips, _ = answers(via(stub_port, fqdn("db", ns), tcp=True))
            assert (rcode, sorted(ips)) == (0, sorted(backends))
            # NodeLocal DNSCache block (force_tcp) -> stub zone -> mcsdns.
            rcode, ips, ttls = answers(via(node_local_port, fqdn("web", ns)))
            assert (rcode, ips) == (0, ["10.9.0.1"]) and all(t <= 5 for t in ttls)
            rcode, ips, _ = answers(via(node_local_port, fqdn("db", ns), tcp=True))
            assert (rcode, sorted(ips)) == (0, sorted(backends))
            nx = via(node_local_port, fqdn("nope", ns))
            assert nx.rcode() == dns.rcode.NXDOMAIN
        finally:
            coredns.stop()
