"""The SIG-Multicluster conformance suite's own DNS specs, passed by mcsdns in a real cluster.

The suite is kubernetes-sigs/mcs-api's conformance/ (built by tools/testbin/build-conformance.sh
from the snapshot in ../shared/upstream/), run by `python3 -m testsupport.conformance` against
the one-node cluster of testsupport/cluster.py: mcsdns from this checkout's image behind the
cluster CoreDNS's clusterset.local stub zone, the fixture exporter (testsupport/fixture_exporter.py)
and mcs-api's reference controller exporting. The suite runs once for this module; every DNS
spec must pass. (tests/compat/test_conformance.py replays the same expectations on the testbed
without a cluster; this runs the suite itself.)

Before it, the fixture exporter is held to what the suite needs of it on the session testbed
(kube-apiserver alone, no kubelet): seconds, and a failure there names the exporter, not DNS.
"""

from __future__ import annotations

import functools
import json
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testsupport import conformance, polling
from testsupport.fixture_exporter import (
    IMPORT_MARK,
    LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
    LABEL_SOURCE_CLUSTER,
    MANAGED_BY,
    Api,
    Exporter,
)
from testsupport.testbed import ApiError, Testbed
from testsupport.testbed import testbin_cache as cache_dir

ROOT = Path(__file__).resolve().parent.parent
MCS = "/apis/multicluster.x-k8s.io/v1beta1"
# The suite's DNS specs (clusterip_service_dns.go: 3, headless_service_dns.go: 3).
DNS_SPECS = 6
# The shared poller, at this file's pace; an API error (the CRD not served yet) counts as "not yet".
eventually = functools.partial(polling.eventually, timeout=15.0, interval=0.2, ignore=(ApiError,))


# --------------------------------------------------------------------------- the exporter, on the testbed


@pytest.fixture(scope="module")
def exporter(testbed: Testbed) -> Iterator[Exporter]:
    """The fixture exporter against the session testbed, with the ServiceExport CRD installed
    (and removed afterwards: the testbed is shared)."""
    crd_file = conformance.build_dir(cache_dir()) / "crd" / "multicluster.x-k8s.io_serviceexports.yaml"
    if not crd_file.exists():
        pytest.skip(f"{crd_file} missing (tools/testbin/build-conformance.sh)")
    testbed.install_crd("v0.5.0")  # ServiceImport, as the session's other tests leave it
    crd = yaml.safe_load(crd_file.read_text())
    testbed.api.apply(crd)
    eventually(lambda: testbed.api.request("GET", f"{MCS}/serviceexports") or True, timeout=30)  # served
    ex = Exporter(Api.from_kubeconfig(str(testbed.kubeconfig_path)), "cluster-t")
    thread = threading.Thread(target=ex.run, daemon=True)
    thread.start()
    try:
        yield ex
    finally:
        ex.stopping.set()
        thread.join(5)
        testbed.api.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd["metadata"]["name"])


def service(namespace: str, name: str, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace,
                                                              "labels": {"svc-label": "x"}},
            "spec": {"selector": {"app": name}, "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"},
                                                          {"name": "udp", "port": 42, "protocol": "UDP"}],
                     **spec}}


def k8s_slice(namespace: str, service_name: str, addresses: list[str]) -> dict:
    """What Kubernetes' EndpointSlice controller writes for a Service."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service_name}-abcde", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": service_name,
                                    LABEL_MANAGED_BY: "endpointslice-controller.k8s.io"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}, "hostname": f"h{i}",
                           "nodeName": "node-1"} for i, a in enumerate(addresses)],
            "ports": [{"name": "tcp", "port": 42, "protocol": "TCP"}]}


def export(namespace: str, name: str, **spec: object) -> dict:
    return {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def conditions(testbed: Testbed, namespace: str, name: str) -> dict[str, tuple[str, str]]:
    got = testbed.api.request("GET", f"{MCS}/namespaces/{namespace}/serviceexports/{name}")
    return {c["type"]: (c["status"], c["reason"]) for c in got.get("status", {}).get("conditions", [])}


def exists(testbed: Testbed, path: str) -> bool:
    try:
        testbed.api.request("GET", path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def mcs_slices(testbed: Testbed, namespace: str, name: str) -> list[dict]:
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector={LABEL_SERVICE_NAME}%3D{name}"
    return testbed.api.request("GET", path)["items"]


def test_exporter_imports_a_clusterip_service_and_its_endpoints(testbed: Testbed, exporter: Exporter,
                                                                fresh_namespace: str) -> None:
    ns = fresh_namespace
    testbed.api.apply(service(ns, "hello", sessionAffinity="ClientIP",
                              sessionAffinityConfig={"clientIP": {"timeoutSeconds": 10}},
                              internalTrafficPolicy="Cluster"))
    testbed.api.apply(k8s_slice(ns, "hello", ["10.1.0.1", "10.1.0.2"]))
    testbed.api.apply(export(ns, "hello", exportedLabels={"exp": "yes"}, exportedAnnotations={"note": "a"}))
    assert eventually(lambda: conditions(testbed, ns, "hello").get("Valid") == ("True", "Valid"))
    assert conditions(testbed, ns, "hello")["Conflict"][0] == "False"
    imported = testbed.api.request("GET", f"{MCS}/namespaces/{ns}/serviceimports/hello")
    spec = imported["spec"]
    assert spec["type"] == "ClusterSetIP"
    assert sorted((p["name"], p["protocol"], p["port"]) for p in spec["ports"]) == [("tcp", "TCP", 42), ("udp", "UDP", 42)]
    assert spec["ipFamilies"] == ["IPv4"]
    assert spec["sessionAffinity"] == "ClientIP" and spec["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10}}
    assert spec["internalTrafficPolicy"] == "Cluster"
    assert "ips" not in spec  # the reference controller's to write
    assert imported["metadata"]["labels"] == {"exp": "yes", IMPORT_MARK: "true"}  # not the Service's labels
    assert imported["metadata"]["annotations"] == {"note": "a"}
    assert eventually(lambda: testbed.api.request("GET", f"{MCS}/namespaces/{ns}/serviceimports/hello")
                      .get("status")) == {"clusters": [{"cluster": "cluster-t"}]}
    copies = eventually(lambda: mcs_slices(testbed, ns, "hello"))
    assert len(copies) == 1
    labels = copies[0]["metadata"]["labels"]
    assert labels[LABEL_SOURCE_CLUSTER] == "cluster-t" and labels[LABEL_MANAGED_BY] == MANAGED_BY
    assert "kubernetes.io/service-name" not in labels  # else the suite counts them as the Service's own
    assert [(e["addresses"], e["hostname"], e["conditions"]["ready"]) for e in copies[0]["endpoints"]] == \
        [(["10.1.0.1"], "h0", True), (["10.1.0.2"], "h1", True)]
    assert all("nodeName" not in e for e in copies[0]["endpoints"])

    # An endpoint leaves the Service's slice: the copy follows.
    testbed.api.apply(k8s_slice(ns, "hello", ["10.1.0.2"]))
    eventually(lambda: [e["addresses"] for e in mcs_slices(testbed, ns, "hello")[0]["endpoints"]] == [["10.1.0.2"]])

    # Unexport: import and copies go, the Service's own slice stays.
    testbed.api.delete("multicluster.x-k8s.io/v1beta1", "ServiceExport", ns, "hello")
    eventually(lambda: not mcs_slices(testbed, ns, "hello"))
    eventually(lambda: not exists(testbed, f"{MCS}/namespaces/{ns}/serviceimports/hello"))
    assert exists(testbed, f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/hello-abcde")


def test_exporter_makes_headless_imports_and_refuses_externalname(testbed: Testbed, exporter: Exporter,
                                                                   fresh_namespace: str) -> None:
    ns = fresh_namespace
    testbed.api.apply(service(ns, "db", clusterIP="None"))
    testbed.api.apply(export(ns, "db"))
    imported = eventually(lambda: testbed.api.request("GET", f"{MCS}/namespaces/{ns}/serviceimports/db"))
    assert imported["spec"]["type"] == "Headless"
    testbed.api.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ext", "namespace": ns},
                       "spec": {"type": "ExternalName", "externalName": "example.com"}})
    testbed.api.apply(export(ns, "ext"))
    assert eventually(lambda: conditions(testbed, ns, "ext").get("Valid") == ("False", "InvalidServiceType"))
    testbed.api.apply(export(ns, "nothing"))
    assert eventually(lambda: conditions(testbed, ns, "nothing").get("Valid") == ("False", "NoService"))
    time.sleep(1)
    for name in ("ext", "nothing"):
        assert not exists(testbed, f"{MCS}/namespaces/{ns}/serviceimports/{name}")


def test_parse_junit_keeps_what_ran_and_drops_what_the_filter_left_out(tmp_path: Path) -> None:
    """The JUnit shape Ginkgo 2.21 writes: filtered-out specs are `skipped` with message "skipped"."""
    (tmp_path / "junit.xml").write_text("""<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="Conformance Suite">
 <testcase name="[BeforeSuite]" classname="Conformance Suite" status="passed" time="0.1"></testcase>
 <testcase name="[It] A DNS lookup [Optional, DNS]" classname="Conformance Suite" status="passed" time="12.5"></testcase>
 <testcase name="[It] An SRV query [Optional, DNS]" classname="Conformance Suite" status="failed" time="20.0">
  <failure message="Received SRV records [] do not match" type="failed">details</failure></testcase>
 <testcase name="[It] two clusters [Required]" classname="Conformance Suite" status="skipped" time="0.2">
  <skipped message="skipped - This test requires at least 2 clusters - skipping"></skipped></testcase>
 <testcase name="[It] not selected [Required]" classname="Conformance Suite" status="skipped" time="0">
  <skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>""")
    got = conformance.parse_junit(tmp_path / "junit.xml")
    assert [(s.name, s.state) for s in got] == [("A DNS lookup [Optional, DNS]", "passed"),
                                                ("An SRV query [Optional, DNS]", "failed"),
                                                ("two clusters [Required]", "skipped")]
    assert got[1].line().startswith("FAILED   An SRV query") and "do not match" in got[1].line()
    assert "requires at least 2 clusters" in got[2].message


# --------------------------------------------------------------------------- the suite, in the cluster


@pytest.fixture(scope="module")
def mcsdns_run(tmp_path_factory: pytest.TempPathFactory) -> conformance.Run:
    """One run of the DNS specs for the module: its own cluster, brought up and torn down."""
    for script in ("build-images.sh", "build-conformance.sh"):  # warm: seconds of hashing
        done = subprocess.run([str(ROOT / "tools" / "testbin" / script)], capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"tools/testbin/{script} failed (exit {done.returncode}): {reason}")
    out = tmp_path_factory.mktemp("conformance")
    try:
        return conformance.run("mcsdns", "fixture", out)
    except conformance.ClusterUnavailable as err:
        pytest.skip(str(err))


@pytest.mark.cluster
@pytest.mark.slow  # a one-node cluster of its own: about 5 minutes
def test_every_dns_spec_of_the_suite_passes_for_mcsdns(mcsdns_run: conformance.Run) -> None:
    lines = "\n".join(s.line() for s in mcsdns_run.results)
    assert len(mcsdns_run.results) == DNS_SPECS, lines
    assert all(s.passed for s in mcsdns_run.results), lines
    assert mcsdns_run.suite_exit == 0, lines


@pytest.mark.cluster
@pytest.mark.slow  # a one-node cluster of its own: about 5 minutes
def test_the_suite_reports_land_in_the_out_directory(mcsdns_run: conformance.Run) -> None:
    out = mcsdns_run.out
    cases = [c for c in ET.parse(out / "junit.xml").getroot().iter("testcase") if c.get("name", "").startswith("[It]")]
    assert sum(c.get("status") == "passed" for c in cases) == DNS_SPECS
    report = yaml.safe_load((out / "report.yaml").read_text())
    assert report, "report.yaml is empty"
    assert (out / "report.html").stat().st_size > 0
    exporter_log = (out / "logs" / "fixture-exporter.log").read_text()
    assert "created ServiceImport" in exporter_log and "created EndpointSlice" in exporter_log


@pytest.mark.cluster
@pytest.mark.slow  # a one-node cluster of its own: about 5 minutes
def test_the_run_leaves_nothing_behind(mcsdns_run: conformance.Run) -> None:
    """No process, mount, cgroup, device or rule of the run's cluster remains. Another cluster may
    come up on the machine as soon as this one is gone (helpers share it; CI does not): its node
    bridge has another interface index, and the rules are only checked when no cluster is up."""
    assert mcsdns_run.scratch and mcsdns_run.node_ifindex
    assert not Path(mcsdns_run.scratch).exists()
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True).stdout)
    assert mcsdns_run.node_ifindex not in [link["ifindex"] for link in links]
    assert mcsdns_run.scratch not in Path("/proc/self/mountinfo").read_text()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mcsdns_run.scratch.encode() in (proc / "cmdline").read_bytes():
                left.append((proc / "cmdline").read_bytes().replace(b"\0", b" ")[:120])
        except OSError:
            pass
    assert not left, left
    if not any(link["ifname"] == "mcsdns-node" for link in links):
        assert not any(link["ifname"] == "mcsdns-cni0" or link.get("master") == "mcsdns-cni0" for link in links)
        rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        assert "KUBE-" not in rules and "CNI-" not in rules
        assert not any(Path(h, "mcsdns-cluster").exists() for h in Path("/sys/fs/cgroup").iterdir())
