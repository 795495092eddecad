"""/imports, /explain and DNS-SD browsing against the real kube-apiserver (tests/test_discovery.py and
tests/test_dnssd.py hold the same to the manifests source).
"""

from __future__ import annotations

from pathlib import Path

import dns.rcode
import pytest
import yaml

from testsupport.cases import MAIN, Z
from compat.harness import load, unload
from inspection import assert_explain_agrees, explain, imports
from kube_server import ES_API, MCS, KubeServer, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from testsupport.mcsdnsserver import FIXTURES
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube


def test_explain_agrees_with_dns_for_every_contract_case(testbed: Testbed, tmp_path: Path) -> None:
    ensure_crd(testbed)
    objects = [o for o in yaml.safe_load_all((FIXTURES / "contract.yaml").read_text()) if o]
    load(testbed, objects)
    try:
        with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--namespaces", "testns") as server:
            server.wait_until_ready()
            eventually(lambda: server.answer(f"svc1.testns.svc.{Z}") == a("10.0.0.1"), 10)
            for c in MAIN:
                assert_explain_agrees(server, c)
    finally:
        unload(testbed, objects)


def test_imports_follow_adds_updates_and_deletes(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    """Each change is checked on /imports right after DNS shows it: both read the same table."""
    ensure_crd(testbed)
    ns = fresh_namespace
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()

        def mine() -> dict:
            return {e["name"]: e for e in imports(server)["imports"] if e["namespace"] == ns}

        assert mine() == {}
        testbed.create(service_import(ns, "vip", ["10.9.0.1"]))
        server.wait_answer(fqdn("vip", ns), "A", a("10.9.0.1"))
        vip = mine()["vip"]
        assert (vip["type"], vip["ips"], vip["clusters"]) == ("ClusterSetIP", ["10.9.0.1"], {})
        assert vip["names"] == [f"{fqdn('vip', ns)}.", f"_http._tcp.{fqdn('vip', ns)}."]

        testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.9.0.2"]}})
        server.wait_answer(fqdn("vip", ns), "A", a("10.9.0.2"))
        assert mine()["vip"]["ips"] == ["10.9.0.2"]

        testbed.create(service_import(ns, "web", headless=True))
        testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.1", True), ("10.1.0.2", False)]))
        server.wait_answer(fqdn("web", ns), "A", a("10.1.0.1"))
        web = mine()["web"]
        assert web["clusters"] == {"east": {"ready": 1, "not_ready": 1}}
        assert f"10-1-0-1.east.{fqdn('web', ns)}." in web["names"]
        why = explain(server, f"10-1-0-2.east.{fqdn('web', ns)}")
        assert why["rcode"] == "NXDOMAIN" and why["reason"] == (
            f"endpoint 10-1-0-2 of cluster east in EndpointSlice {ns}/web-east exists but is not ready")

        # Only the not-ready endpoint changes: no answer changes, /imports follows all the same.
        testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.1", True), ("10.1.0.2", False), ("10.1.0.3", False)]))
        eventually(lambda: mine()["web"]["clusters"] == {"east": {"ready": 1, "not_ready": 2}}, 10)

        testbed.delete(ES_API, "EndpointSlice", ns, "web-east")
        server.wait_answer(fqdn("web", ns), "A", ("NXDOMAIN", []))
        assert mine()["web"]["clusters"] == {} and mine()["web"]["names"] == []
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip")
        server.wait_answer(fqdn("vip", ns), "A", ("NXDOMAIN", []))
        assert set(mine()) == {"web"}
        assert server.shutdown() < 5


def test_rejected_objects_appear_with_their_reason(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    testbed.create(service_import(ns, "my.svc", ["10.9.1.1"]))  # a valid Kubernetes name, but no DNS label
    testbed.create(service_import(ns, "fine", ["10.9.1.2"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        doc = imports(server)
        rejected = [r for r in doc["rejected"] if r["namespace"] == ns]
        assert [(r["kind"], r["name"]) for r in rejected] == [("ServiceImport", "my.svc")]
        assert "metadata.name 'my.svc'" in rejected[0]["reason"]
        assert [e["name"] for e in doc["imports"] if e["namespace"] == ns] == ["fine"]
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "my.svc")
        eventually(lambda: not [r for r in imports(server)["rejected"] if r["namespace"] == ns], 10)


def test_dns_sd_browsing_follows_the_api(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    browse, kinds = f"b._dns-sd._udp.{Z}", f"_services._dns-sd._udp.{ns}.svc.{Z}"
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--dns-sd") as server:
        server.wait_until_ready()
        assert server.answer(kinds, "PTR") == ("NXDOMAIN", [])
        testbed.create(service_import(ns, "api", ["10.9.2.1"], port=8080))
        server.wait_answer(kinds, "PTR", ("NOERROR", [f"_http._tcp.{ns}.svc.{Z}"]))
        assert f"{ns}.svc.{Z}" in server.answer(browse, "PTR")[1]
        assert server.answer(f"_http._tcp.{ns}.svc.{Z}", "PTR") == ("NOERROR", [f"api._http._tcp.{ns}.svc.{Z}"])
        assert server.answer(f"api._http._tcp.{ns}.svc.{Z}", "SRV") == ("NOERROR", [f"0 0 8080 api.{ns}.svc.{Z}"])
        assert server.answer(f"api._http._tcp.{ns}.svc.{Z}", "TXT") == ("NOERROR", ['""'])
        testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "api")
        server.wait_answer(kinds, "PTR", ("NXDOMAIN", []))
        assert f"{ns}.svc.{Z}" not in server.answer(browse, "PTR")[1]
        assert server.query(f"api._http._tcp.{ns}.svc.{Z}", "SRV").rcode() == dns.rcode.NXDOMAIN


def _set_status(testbed: Testbed, ns: str, name: str, status: dict) -> None:
    """Write a ServiceImport's status as an MCS controller does: through the status subresource."""
    testbed.apply_status(service_import(ns, name, []), status)


def _condition(type_: str, status: str, reason: str, message: str) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-01T10:00:00Z"}


def test_import_conditions_are_shown_and_counted_never_answered(testbed: Testbed, fresh_namespace: str,
                                                                tmp_path: Path) -> None:
    """Decision 14: status.conditions and status.clusters reach /imports, /explain, `mcsdns explain`
    and the metric; a status change alone changes no answer; an odd status is cut, logged, shown."""
    import subprocess
    import sys

    ensure_crd(testbed)
    ns = fresh_namespace
    testbed.create(service_import(ns, "v6only", []))  # an IPv6-only service: no IPv4 VIP for this cluster
    testbed.create(service_import(ns, "vip", ["10.9.2.1"]))
    _set_status(testbed, ns, "v6only", {
        "clusters": [{"cluster": "east"}, {"cluster": "west"}],
        "conditions": [_condition("Ready", "False", "IPFamilyNotSupported", "IPv6 is not supported in this cluster")]})
    _set_status(testbed, ns, "vip", {"conditions": [_condition("Ready", "True", "Ready", "")]})
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        server.wait_answer(fqdn("vip", ns), "A", a("10.9.2.1"))

        def mine() -> dict:
            return {e["name"]: e for e in imports(server)["imports"] if e["namespace"] == ns}

        v6 = mine()["v6only"]
        assert v6["not_ready"] == "IPFamilyNotSupported: IPv6 is not supported in this cluster"
        assert v6["status"] == {"conditions": [{"type": "Ready", "status": "False", "reason": "IPFamilyNotSupported",
                                                "message": "IPv6 is not supported in this cluster"}],
                                "clusters": ["east", "west"], "cluster_count": 2, "notes": []}
        assert mine()["vip"]["not_ready"] is None
        why = explain(server, fqdn("v6only", ns))
        assert (why["rcode"], why["answer"]) == ("NOERROR", [])
        assert why["reason"] == (
            f"the name exists (ServiceImport {ns}/v6only) but has no IPv4 address: spec.ips are empty; the import is not "
            "Ready (IPFamilyNotSupported: IPv6 is not supported in this cluster): its status.conditions, written by the "
            "MCS controller; answers never depend on them (decision 14)")
        server_url = f"http://127.0.0.1:{server.http_port}"
        cli = subprocess.run([sys.executable, "-m", "mcsdns", "explain", fqdn("v6only", ns), "--server", server_url],
                             capture_output=True, text=True, timeout=30)
        assert cli.returncode == 0 and "the import is not Ready (IPFamilyNotSupported: IPv6" in cli.stdout
        table = subprocess.run([sys.executable, "-m", "mcsdns", "imports", "-n", ns, "--server", server_url],
                               capture_output=True, text=True, timeout=30).stdout.splitlines()
        assert table[0].split()[-1] == "NOT-READY"
        rows = {line.split()[1]: line.split() for line in table[1:]}
        assert rows["v6only"][-1] == "IPFamilyNotSupported" and rows["vip"][-1] == "0/0"
        assert server.metric("mcsdns_serviceimport_conditions", type="Ready", status="False",
                             reason="IPFamilyNotSupported") >= 1

        # A status update alone: shown at once, no answer changes, nothing recompiled.
        generation = server.metric("mcsdns_table_generation")
        assert generation is not None and generation > 0
        _set_status(testbed, ns, "vip", {"conditions": [_condition("Ready", "False", "Pending", "waiting")]})
        eventually(lambda: mine()["vip"]["not_ready"] == "Pending: waiting", 10)
        assert server.answer(fqdn("vip", ns)) == a("10.9.2.1")
        assert server.metric("mcsdns_table_generation") == generation

        # Adversarial: a message at the API's limit, a type and reason mcs-api does not define, a bad status.
        _set_status(testbed, ns, "vip", {"conditions": [
            _condition("Ready", "Unknown", "Pending", "x" * 32768),
            _condition("Exploded", "True", "Kaboom", "")]})
        eventually(lambda: len(mine()["vip"]["status"]["conditions"]) == 2, 10)
        vip = mine()["vip"]
        assert len(vip["status"]["conditions"][0]["message"]) == 256
        assert vip["status"]["notes"] == [
            "status.conditions[0].message: 32768 characters, cut to 256",
            "status.conditions[1].type: 'Exploded' is not a condition mcs-api defines (Ready); shown as written"]
        assert "its status is shown in part (status.conditions[0].message: 32768 characters" in \
            explain(server, fqdn("vip", ns))["reason"]
        assert server.answer(fqdn("vip", ns)) == a("10.9.2.1")
        assert server.metric("mcsdns_serviceimport_conditions", type="other", status="True", reason="other") >= 1
        eventually(lambda: f"ServiceImport {ns}/vip: its status is shown in part" in server.tail(200), 10)
        assert server.shutdown() < 5
