"""The Helm chart (deploy/helm/mcsdns) against the kustomize base, the real kube-apiserver and the server.

* `helm lint` (helm built from the Go module proxy by tools/testbin/build.sh)
  at the defaults and with every optional part switched on.
* At default values the chart renders the objects of the kustomize base
  (`kubectl kustomize deploy/base`), Helm's own labels, the flags checksum and
  the ConfigMap name's hash aside, with the flags compared as the pod parses
  them; the only object the chart leaves out is the Namespace (Helm's
  `--create-namespace`). With `hpa.enabled` and `prometheus.monitor.enabled`
  it renders the production overlay (base + HPA + ServiceMonitor).
* RBAC is exactly the base's three read-only rules; `rbac.clusterProperty`
  adds get/list/watch on ClusterProperties and nothing else.
* `helm template` with every option on is applied with a server-side dry run
  to the real kube-apiserver (ServiceMonitor and PrometheusRule CRDs installed,
  the namespace at the `restricted` Pod Security level, warnings refused).
* The Deployment's command, run with the rendered flags, serves and answers.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testsupport.mcsdnsserver import ROOT, McsdnsServer

from testsupport.polling import eventually
from test_deploy import (  # noqa: F401  (kubectl is a fixture)
    BASE, EXPECTED_RULES, PRODUCTION, Kubectl, assert_no_warnings, cached_binary, install_servicemonitor_crd,
    kubectl, parse_flags, served_command,
)
from testsupport.testbed import ApiError, Testbed

CHART = ROOT / "deploy" / "helm" / "mcsdns"
RULES_FILE = ROOT / "deploy" / "monitoring" / "mcsdns-alerts.yaml"
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
CHECKSUM = "checksum/flags"

# Every optional part on, and every value the issue names set to something visible.
EVERYTHING = {
    "replicaCount": 3,
    "image": {"repository": "registry.example/platform/mcsdns", "tag": "0.1.0-test", "pullSecrets": [{"name": "regcred"}]},
    "priorityClassName": "system-cluster-critical",
    "podAntiAffinityPreset": "soft",
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
    # The test bed's API server is single-stack: PreferDualStack with IPv4 first is what it accepts.
    "service": {"clusterIP": "", "ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv4"],
                "trafficDistribution": "PreferSameZone", "annotations": {"example.com/service": "yes"}},
    "hpa": {"enabled": True},
    "prometheus": {"monitor": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}},
                   "rules": {"enabled": True, "additionalLabels": {"release": "kube-prometheus-stack"}}},
    "rbac": {"clusterProperty": True},
    "customLabels": {"team": "platform"},
    "customAnnotations": {"example.com/owner": "platform"},
    "podAnnotations": {"example.com/pod": "yes"},
    "flags": ["--zone=clusterset.local", "--ttl=30", "--lameduck=5s", "--upstream=none", "--namespaces=demo,team-a"],
}


def helm_binary() -> Path:
    return cached_binary("helm")


def helm(*args: str | Path, values: dict | None = None, tmp: Path | None = None) -> str:
    cmd = [str(helm_binary()), *map(str, args)]
    if values is not None:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        cmd += ["--values", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"helm {' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def render(tmp: Path, values: dict | None = None, release: str = "mcsdns", namespace: str = "mcsdns") -> list[dict]:
    out = helm("template", release, CHART, "--namespace", namespace, values=values, tmp=tmp)
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(objects: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for obj in objects:
        assert obj["kind"] not in out, f"two {obj['kind']} objects"
        out[obj["kind"]] = obj
    return out


def rules_of(role: dict) -> dict[tuple[str, str], set[str]]:
    got: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                got.setdefault((group, resource), set()).update(rule["verbs"])
    return got


def normalized(obj: dict) -> dict:
    """What must match between chart and base: Helm's labels, the checksum and the ConfigMap hash left out."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in HELM_LABELS and k != CHECKSUM}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    out = strip(copy.deepcopy(obj))
    for holder in (out["metadata"], out.get("spec", {}).get("template", {}).get("metadata", {})):
        if holder.get("annotations") == {}:
            del holder["annotations"]
    if out["kind"] == "ConfigMap":
        out["metadata"]["name"] = out["metadata"]["name"].rsplit("-flags", 1)[0] + "-flags"
        out["data"]["flags"] = parse_flags(out["data"]["flags"])
    if out["kind"] == "Deployment":
        for volume in out["spec"]["template"]["spec"]["volumes"]:
            if "configMap" in volume:
                volume["configMap"]["name"] = volume["configMap"]["name"].rsplit("-flags", 1)[0] + "-flags"
    return out


def kustomize(path: Path) -> list[dict]:
    proc = subprocess.run([str(cached_binary("kubectl")), "kustomize", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


# --------------------------------------------------------------------------- static (helm, kubectl kustomize)


def test_helm_lint(tmp_path: Path) -> None:
    for values in (None, EVERYTHING):
        out = helm("lint", "--strict", CHART, values=values, tmp=tmp_path)
        assert "1 chart(s) linted, 0 chart(s) failed" in out, out


@pytest.mark.parametrize("values, overlay", [
    (None, BASE),
    ({"hpa": {"enabled": True}, "prometheus": {"monitor": {"enabled": True}}}, PRODUCTION),
], ids=["defaults=base", "hpa+monitor=production"])
def test_chart_renders_the_kustomize_objects(tmp_path: Path, values: dict | None, overlay: Path) -> None:
    chart = {o["kind"]: normalized(o) for o in render(tmp_path, values)}
    base = {o["kind"]: normalized(o) for o in kustomize(overlay)}
    assert set(base) - set(chart) == {"Namespace"} and set(chart) <= set(base)
    for kind in sorted(chart):
        assert chart[kind] == base[kind], f"{kind} differs:\nchart: {chart[kind]}\nbase:  {base[kind]}"


def test_rbac_is_the_bases_and_the_cluster_property_rule_only_when_asked(tmp_path: Path) -> None:
    assert rules_of(by_kind(render(tmp_path))["ClusterRole"]) == EXPECTED_RULES
    with_property = rules_of(by_kind(render(tmp_path, {"rbac": {"clusterProperty": True}}))["ClusterRole"])
    assert with_property == {**EXPECTED_RULES, ("about.k8s.io", "clusterproperties"): {"get", "list", "watch"}}
    assert not {k for k in by_kind(render(tmp_path, {"rbac": {"create": False}}))} & {"ClusterRole", "ClusterRoleBinding"}


def test_every_option_renders_where_it_belongs(tmp_path: Path) -> None:
    objects = by_kind(render(tmp_path, EVERYTHING))
    assert set(objects) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service",
                            "PodDisruptionBudget", "HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule"}
    for obj in objects.values():
        assert obj["metadata"]["labels"]["team"] == "platform", obj["kind"]
        assert obj["metadata"]["annotations"]["example.com/owner"] == "platform", obj["kind"]
    deployment = objects["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert "replicas" not in deployment["spec"]  # the HPA owns the count
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/platform/mcsdns:0.1.0-test"
    assert deployment["spec"]["template"]["metadata"]["annotations"]["example.com/pod"] == "yes"
    selector = deployment["spec"]["selector"]["matchLabels"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    assert pod["affinity"]["nodeAffinity"] == EVERYTHING["affinity"]["nodeAffinity"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in pod["topologySpreadConstraints"])
    service = objects["Service"]["spec"]
    assert (service["ipFamilyPolicy"], service["ipFamilies"], service["trafficDistribution"]) == (
        "PreferDualStack", ["IPv4"], "PreferSameZone")
    assert objects["ServiceMonitor"]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert objects["ServiceMonitor"]["spec"]["selector"]["matchLabels"] == selector
    # The PrometheusRule carries deploy/monitoring's rules unchanged.
    assert objects["PrometheusRule"]["spec"]["groups"] == yaml.safe_load(RULES_FILE.read_text())["groups"]
    flags = parse_flags(objects["ConfigMap"]["data"]["flags"])
    assert flags[:2] == ["--listen=0.0.0.0:5353", "--http-listen=0.0.0.0:9153"] and "--ttl=30" in flags
    # A flag change changes the checksum, so the pods roll.
    default_checksum = by_kind(render(tmp_path))["Deployment"]["spec"]["template"]["metadata"]["annotations"][CHECKSUM]
    assert deployment["spec"]["template"]["metadata"]["annotations"][CHECKSUM] != default_checksum


def test_anti_affinity_presets(tmp_path: Path) -> None:
    pod = by_kind(render(tmp_path, {"podAntiAffinityPreset": "hard"}))["Deployment"]["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert "affinity" not in by_kind(render(tmp_path))["Deployment"]["spec"]["template"]["spec"]
    proc = subprocess.run([str(helm_binary()), "template", "x", str(CHART), "--set", "podAntiAffinityPreset=always"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and 'podAntiAffinityPreset must be soft, hard or empty: "always"' in proc.stderr


def test_server_started_with_the_rendered_flags_answers(tmp_path: Path) -> None:
    """The Deployment's own command, with the ConfigMap's flags; only addresses and lameduck differ."""
    objects = by_kind(render(tmp_path, {"flags": ["--zone=clusterset.local", "--ttl=30", "--upstream=none"]}))
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    flags_file = tmp_path / "flags"
    flags_file.write_text(objects["ConfigMap"]["data"]["flags"])  # as the pod reads it; later flags win
    server = McsdnsServer()
    server.argv = served_command(container["command"], flags_file, f"--listen=127.0.0.1:{server.dns_port}",
                                 f"--http-listen=127.0.0.1:{server.http_port}", "--lameduck=0")
    with server:
        reply = server.query("web.demo.svc.clusterset.local.", "A")
        assert [(rrset.ttl, rd.address) for rrset in reply.answer for rd in rrset] == [(30, "10.96.10.10")]
        assert server.query("example.org.", "A").rcode() == 5  # --upstream=none: REFUSED
        assert server.http("/ready") == (200, "OK")


# --------------------------------------------------------------------------- the real kube-apiserver

PROMETHEUSRULE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {"kind": "PrometheusRule", "listKind": "PrometheusRuleList", "plural": "prometheusrules",
                  "singular": "prometheusrule"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "groups": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "interval": {"type": "string"},
                    "rules": {"type": "array", "items": {"type": "object", "required": ["expr"], "properties": {
                        "alert": {"type": "string"},
                        "record": {"type": "string"},
                        "expr": {"x-kubernetes-int-or-string": True},
                        "for": {"type": "string"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                    }}},
                }}},
            }}}}},
        }],
    },
}


@pytest.mark.kube
def test_rendered_chart_passes_server_side_dry_run(testbed: Testbed, kubectl: Kubectl, tmp_path: Path) -> None:
    install_servicemonitor_crd(testbed)
    testbed.apply(PROMETHEUSRULE_CRD)
    eventually(lambda: any(r["name"] == "prometheusrules" for r in testbed.api.request(
        "GET", "/apis/monitoring.coreos.com/v1")["resources"]), 30, what="PrometheusRule in discovery", interval=0.1,
        ignore=(ApiError,))
    namespace = "mcsdns-helm"
    testbed.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}}})
    for values in (None, EVERYTHING):
        manifest = tmp_path / "rendered.yaml"
        manifest.write_text(helm("template", "mcsdns-helm", CHART, "--namespace", namespace, values=values, tmp=tmp_path))
        proc = kubectl("apply", "--server-side", "--dry-run=server", "-f", manifest)
        assert_no_warnings(proc)
        applied = [line for line in proc.stdout.splitlines() if "serverside-applied (server dry run)" in line]
        assert len(applied) == len([d for d in yaml.safe_load_all(manifest.read_text()) if d]), proc.stdout
