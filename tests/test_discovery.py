"""/imports, /explain and the `mcsdns imports` / `mcsdns explain` commands, against `mcsdns serve`
from manifests (tests/test_kube_discovery.py: the same against a real kube-apiserver).

/explain must agree with DNS for every case of the contract; /imports must list what
DNS answers, follow every change as DNS does, and show rejected objects with their reason.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import dns.rcode
import pytest
import yaml

from testsupport.cases import MAIN, Z
from inspection import assert_explain_agrees, explain, get_json, imports
from testsupport.objects import headless_service, service_import
from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer
from testsupport.polling import eventually
from testsupport.testbed import free_port

MCS = "multicluster.x-k8s.io/v1beta1"


@pytest.fixture(scope="module")
def contract():
    with McsdnsServer("--manifests", str(FIXTURES / "contract.yaml"), "--namespaces", "testns") as s:
        yield s


@pytest.mark.parametrize("c", MAIN, ids=lambda c: c.id)
def test_explain_agrees_with_dns_for_every_contract_case(contract, c):
    assert_explain_agrees(contract, c)


def test_explain_rejects_bad_questions(contract):
    for query in ("", "name=", "name=a..b.clusterset.local", "name=" + "x" * 64 + ".clusterset.local",
                  "name=a%20b.clusterset.local", "name=" + ".".join(["abcdefghij"] * 30),
                  "name=svc1.testns.svc.clusterset.local&type=BOGUS", "name=svc1.testns.svc.clusterset.local&type=TYPE70000",
                  "name=a.clusterset.local&name=b.clusterset.local"):  # fmt: skip
        status, doc = get_json(contract, "/explain?" + query)
        assert status == 400 and doc["error"], (query, doc)
    # The type defaults to A and is read in any case; TYPEn works for types without a mnemonic.
    assert explain(contract, "svc1.testns.svc.clusterset.local")["type"] == "A"
    assert explain(contract, "svc1.testns.svc.clusterset.local", "srv")["rcode"] == "NOERROR"
    assert explain(contract, "svc1.testns.svc.clusterset.local", "TYPE65280")["rcode"] == "NOERROR"
    axfr = explain(contract, "clusterset.local", "AXFR")
    assert axfr["rcode"] == "REFUSED" and axfr["reason"].startswith("zone transfers (AXFR/IXFR) are refused")


def test_explain_of_a_name_outside_the_zones(contract, tmp_path):
    doc = explain(contract, "example.org")  # the test server runs with --upstream none
    assert doc["rcode"] == "REFUSED" and doc["answer"] == []
    assert doc["reason"] == "example.org. is outside the zones served here (clusterset.local): forwarding is off " \
        "(--upstream none), so it is refused"
    with McsdnsServer("--upstream", f"127.0.0.1:{free_port()}", "--upstream-timeout", "500ms") as forwarding:
        doc = explain(forwarding, "example.org")
        assert doc["rcode"] is None and "it is forwarded to the upstream nameservers" in doc["reason"]


def test_imports_lists_what_dns_answers(contract):
    doc = imports(contract)
    assert doc["synced"] is True and doc["rejected"] == []
    keys = [(e["namespace"], e["name"]) for e in doc["imports"]]
    assert keys == sorted(keys) and ("testns", "svc1") in keys and ("kube-system", "kubedns") in keys
    by_key = {(e["namespace"], e["name"]): e for e in doc["imports"]}
    svc1 = by_key[("testns", "svc1")]
    assert svc1["type"] == "ClusterSetIP" and svc1["ips"] == ["10.0.0.1"]
    assert svc1["ports"] == [{"name": "http", "protocol": "tcp", "port": 80}]
    assert svc1["names"][:2] == [f"svc1.testns.svc.{Z}", f"_http._tcp.svc1.testns.svc.{Z}"]
    assert f"ep1a.cluster1.svc1.testns.svc.{Z}" in svc1["names"]
    hdls1 = by_key[("testns", "hdls1")]
    assert hdls1["type"] == "Headless" and hdls1["clusters"]["cluster1"]["ready"] == 6  # addresses, as DNS counts them
    only = get_json(contract, "/imports?namespace=kube-system")[1]
    assert [(e["namespace"], e["name"]) for e in only["imports"]] == [("kube-system", "kubedns")]
    # kube-system is not served under --namespaces testns: its import has no names.
    assert by_key[("kube-system", "kubedns")]["names"] == []
    # Every listed name answers over DNS (A, AAAA or SRV), and nothing the table compiled is missing.
    for e in doc["imports"]:
        for name in e["names"]:
            replies = [contract.query(name, t) for t in ("A", "AAAA", "SRV")]
            assert all(r.rcode() == dns.rcode.NOERROR for r in replies), name
            assert any(r.answer for r in replies), name


def _write(path, objects):
    path.write_text(yaml.safe_dump_all(objects))


def _import(ns, name, ips, ports=(("http", "TCP", 80),), spec_type="ClusterSetIP"):
    return service_import(ns, name, list(ips), headless=spec_type == "Headless",
                          ports=[{"name": n, "protocol": p, "port": port} for n, p, port in ports])


def test_imports_follow_adds_updates_and_deletes(tmp_path):
    """When DNS shows a change, /imports (read right after) shows it too: both come from the same table."""
    path = tmp_path / "live.yaml"
    ns = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}]
    _write(path, ns + [_import("app", "one", ["10.7.0.1"])])
    with McsdnsServer("--manifests", str(path)) as s:
        assert [e["name"] for e in imports(s)["imports"]] == ["one"]

        def dns_then_imports(name, want_rcode, check):
            eventually(lambda: s.query(f"{name}.app.svc.{Z}").rcode() == want_rcode, 10, what=f"{name} {want_rcode}")
            doc = imports(s)
            assert check(doc), doc

        _write(path, ns + [_import("app", "one", ["10.7.0.1"]), *headless_service("app", "two", [
            {"addresses": ["10.7.1.1"], "hostname": "h1"}, {"addresses": ["10.7.1.2"], "conditions": {"ready": False}}])])
        dns_then_imports("two", dns.rcode.NOERROR, lambda d: [e["name"] for e in d["imports"]] == ["one", "two"]
                         and d["imports"][1]["clusters"] == {"c1": {"ready": 1, "not_ready": 1}}
                         and f"h1.c1.two.app.svc.{Z}" in d["imports"][1]["names"])  # fmt: skip
        _write(path, ns + [_import("app", "one", ["10.7.0.9"], ports=(("dns", "UDP", 53),))])
        eventually(lambda: s.query(f"one.app.svc.{Z}").answer and s.query(f"one.app.svc.{Z}").answer[0][0].address == "10.7.0.9", 10)
        doc = imports(s)
        assert [e["name"] for e in doc["imports"]] == ["one"], doc
        assert doc["imports"][0]["ips"] == ["10.7.0.9"] and f"_dns._udp.one.app.svc.{Z}" in doc["imports"][0]["names"]
        assert f"_http._tcp.one.app.svc.{Z}" not in doc["imports"][0]["names"]
        _write(path, ns)
        dns_then_imports("one", dns.rcode.NXDOMAIN, lambda d: d["imports"] == [])


def test_rejected_objects_appear_with_their_reason(tmp_path):
    path = tmp_path / "m.yaml"
    broken = {"apiVersion": MCS, "kind": "ServiceImport", "metadata": {"name": "broken", "namespace": "app"},
              "spec": "not an object"}  # fmt: skip
    dotted = _import("app", "my.svc", ["10.7.0.2"])  # a valid Kubernetes name, but no DNS label
    _write(path, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}, broken, dotted,
                  _import("app", "fine", ["10.7.0.3"])])  # fmt: skip
    with McsdnsServer("--manifests", str(path)) as s:
        doc = imports(s)
        assert [e["name"] for e in doc["imports"]] == ["fine"]
        rejected = {(r["kind"], r["namespace"], r["name"]): r["reason"] for r in doc["rejected"]}
        assert set(rejected) == {("ServiceImport", "app", "broken"), ("ServiceImport", "app", "my.svc")}
        assert "spec" in rejected[("ServiceImport", "app", "broken")]
        assert "metadata.name" in rejected[("ServiceImport", "app", "my.svc")]
        why = explain(s, f"broken.app.svc.{Z}")
        assert why["rcode"] == "NXDOMAIN" and why["reason"].startswith("ServiceImport app/broken was rejected: spec")
        # Fixed: it leaves the rejected list and answers.
        _write(path, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}},
                      _import("app", "broken", ["10.7.0.4"]), _import("app", "fine", ["10.7.0.3"])])  # fmt: skip
        eventually(lambda: s.query(f"broken.app.svc.{Z}").rcode() == dns.rcode.NOERROR, 10)
        assert imports(s)["rejected"] == []
        assert explain(s, f"broken.app.svc.{Z}")["reason"].startswith("from ServiceImport app/broken (ClusterSetIP)")


def test_explain_reasons_for_endpoints_and_slices(tmp_path):
    path = tmp_path / "m.yaml"
    objects = headless_service("app", "db", [{"addresses": ["10.8.0.1"], "hostname": "db-0"},
                                             {"addresses": ["10.8.0.2"], "hostname": "db-1", "conditions": {"ready": False}}])
    clusterless = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                   "metadata": {"name": "db-nolabel", "namespace": "app",
                                "labels": {"multicluster.kubernetes.io/service-name": "db"}},
                   "endpoints": [{"addresses": ["10.8.0.3"], "hostname": "db-2"}], "ports": []}  # fmt: skip
    lonely = headless_service("app", "lonely", [{"addresses": ["10.8.1.1"], "conditions": {"ready": False}}])
    _write(path, objects + [clusterless] + lonely + [_import("app", "empty", [], spec_type="Headless")])
    with McsdnsServer("--manifests", str(path)) as s:
        cases = {
            ("db-0.c1.db.app.svc", "A"): ("NOERROR", "from endpoint db-0 of cluster c1 in EndpointSlice app/db-1"),
            ("db-1.c1.db.app.svc", "A"): ("NXDOMAIN", "endpoint db-1 of cluster c1 in EndpointSlice app/db-1 exists but is not ready"),
            ("db-2.c1.db.app.svc", "A"): ("NXDOMAIN", "db-2 is in EndpointSlice app/db-nolabel, which has no "
                                                      "multicluster.kubernetes.io/source-cluster label"),
            ("nope.c1.db.app.svc", "A"): ("NXDOMAIN", "no ready endpoint named nope in cluster c1 (ready there: db-0)"),
            ("db-0.c9.db.app.svc", "A"): ("NXDOMAIN", "comes from cluster c9 (clusters: c1)"),
            ("db.app.svc", "A"): ("NOERROR", "db-nolabel (no cluster label)"),
            ("lonely.app.svc", "A"): ("NXDOMAIN", "exist but none is ready (lonely-1: 1 not ready)"),
            ("empty.app.svc", "A"): ("NXDOMAIN", "is Headless and no EndpointSlice in app is labelled"),
            ("_http._udp.db.app.svc", "SRV"): ("NXDOMAIN", "no port named http with protocol udp"),
        }  # fmt: skip
        for (name, qtype), (rcode, reason) in cases.items():
            doc = explain(s, f"{name}.{Z}", qtype)
            assert (doc["rcode"], reason in doc["reason"]) == (rcode, True), (name, doc)
            assert doc["rcode"] == dns.rcode.to_text(s.query(f"{name}.{Z}", qtype).rcode())


def test_explain_before_sync_says_so(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    with McsdnsServer("--manifests", str(bad), "--startup-timeout", "0", wait_ready=False) as s:
        doc = explain(s, f"nothing.app.svc.{Z}")
        assert doc["rcode"] == "SERVFAIL" and doc["reason"].startswith("not synced yet (manifests not loaded")
        assert imports(s)["synced"] is False


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_cli_imports_and_explain(contract):
    server = f"http://127.0.0.1:{contract.http_port}"
    table = _cli("imports", "--server", server)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "TYPE", "IPS", "PORTS", "CLUSTERS", "READY"]
    assert ["testns", "svc1", "ClusterSetIP", "10.0.0.1", "80/tcp(http)", "cluster1", "1/1"] in [l.split() for l in lines]
    as_json = _cli("imports", "--server", f"127.0.0.1:{contract.http_port}", "-o", "json")
    assert json.loads(as_json.stdout) == imports(contract)
    one = _cli("imports", "--server", server, "-n", "kube-system").stdout.splitlines()
    assert len(one) == 2 and one[1].split()[:2] == ["kube-system", "kubedns"]
    why = _cli("explain", "svc0.testns.svc.clusterset.local", "--server", server)
    assert why.returncode == 0 and why.stdout.splitlines() == [
        "svc0.testns.svc.clusterset.local. A: NXDOMAIN", "no ServiceImport svc0 in namespace testns"]
    srv = _cli("explain", "_http._tcp.svc1.testns.svc.clusterset.local", "SRV", "--server", server).stdout.splitlines()
    assert srv[0] == "_http._tcp.svc1.testns.svc.clusterset.local. SRV: NOERROR"
    assert srv[2:] == ["_http._tcp.svc1.testns.svc.clusterset.local. 5 IN SRV 0 100 80 svc1.testns.svc.clusterset.local."]
    bad = _cli("explain", "a..b", "--server", server)
    assert bad.returncode == 1 and "HTTP 400" in bad.stderr and "empty label" in bad.stderr


def test_cli_unreachable_server_is_a_clear_error():
    port = free_port()  # nothing listens there
    for args in (("imports",), ("explain", "web.demo.svc.clusterset.local")):
        out = _cli(*args, "--server", f"http://127.0.0.1:{port}")
        assert out.returncode == 1 and out.stdout == ""
        assert f"cannot reach the mcsdns admin server at http://127.0.0.1:{port}" in out.stderr
        assert "Traceback" not in out.stderr


def test_explain_url_encoding(contract):
    """A name given URL-encoded (what curl --data-urlencode and the CLI send) is read the same."""
    query = urllib.parse.urlencode({"name": "SVC1.testns.svc.clusterset.local.", "type": "a"})
    status, doc = get_json(contract, f"/explain?{query}")
    assert status == 200 and doc["rcode"] == "NOERROR" and doc["answer"] == ["SVC1.testns.svc.clusterset.local. 5 IN A 10.0.0.1"]


def test_explain_never_fails_on_random_parameters(contract):
    rng = random.Random(11)
    alphabet = "abcXYZ019-_.*%&=?+ /\\\x00\xff\u00e9"
    for _ in range(300):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        qtype = rng.choice(["A", "srv", "TYPE1", "TYPE99999", "", "X" * 10, "ANY", "PTR"])
        query = urllib.parse.urlencode({"name": name, "type": qtype})
        status, doc = get_json(contract, f"/explain?{query}")
        assert (status == 200 and doc["reason"]) or (status == 400 and doc["error"]), (name, qtype, status, doc)
    assert contract.http("/health") == (200, "OK") and "Traceback" not in contract.log()


def test_dns_is_answered_while_a_long_imports_list_is_built(tmp_path):
    """/imports of 10,000 imports takes the server about a second: DNS replies must not wait for all of it."""
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}}]
    objects += [_import("big", f"s{i}", [f"10.{i // 250}.{i % 250}.1"]) for i in range(10_000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    with McsdnsServer("--manifests", str(path)) as s:
        done: dict[str, float] = {}
        sock = socket.create_connection(("127.0.0.1", s.http_port), timeout=30)

        def first_byte() -> None:  # the response starts once the whole list is built
            data = sock.recv(1)
            done["http"] = time.monotonic()
            while chunk := sock.recv(1 << 20):
                data += chunk
            done["count"] = len(json.loads(data.partition(b"\r\n\r\n")[2])["imports"])

        thread = threading.Thread(target=first_byte)
        thread.start()
        sock.sendall(b"GET /imports HTTP/1.1\r\nHost: test\r\n\r\n")
        time.sleep(0.05)  # the request is in: the server is building the list
        while "http" not in done:
            s.query(f"s1.big.svc.{Z}", timeout=5)
            done.setdefault("dns", time.monotonic())
        thread.join()
        sock.close()
        assert done["count"] == 10_000
        assert done["dns"] < done["http"], "a DNS reply came only after the whole /imports list was built"


def test_malformed_import_status_is_cut_logged_and_shown_never_answered(tmp_path):
    """Decision 14 with statuses the API would refuse but a manifest may hold: a condition without
    a type or status, a status that is not an object, 40 conditions, a message of 100 kB. Each
    import answers exactly what its twin without a status answers; the log and /explain say what was cut."""
    def imp(name: str, status=None) -> dict:
        obj = service_import("odd", name, ["10.7.0.1"])
        obj["metadata"]["name"] = name
        if status is not None:
            obj["status"] = status
        return obj

    statuses = {
        "notype": {"conditions": [{"status": "False", "reason": "Pending"}, {"type": "Ready", "reason": "Pending"}]},
        "scalar": "broken",
        "many": {"conditions": [{"type": "Ready", "status": "False", "reason": "Pending", "message": "m" * 100_000}] * 40,
                 "clusters": [{"cluster": f"c{i}"} for i in range(100)] + [{"name": "x"}]},
    }
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "odd"}}, imp("twin")]
    objects += [imp(name, status) for name, status in statuses.items()]
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    with McsdnsServer("--manifests", str(path)) as s:
        twin = s.query(f"twin.odd.svc.{Z}", "A")
        for name in statuses:
            reply = s.query(f"{name}.odd.svc.{Z}", "A")
            assert [rr.to_text() for rr in reply.answer] == [rr.to_text().replace("twin.", f"{name}.", 1) for rr in twin.answer]
        by_name = {e["name"]: e for e in imports(s)["imports"]}
        assert by_name["notype"]["status"]["notes"] == [
            "status.conditions[0]: no type; left out",
            "status.conditions[1].status: '' is none of True, False, Unknown; shown as Unknown"]
        assert by_name["notype"]["not_ready"] == "Pending"
        assert by_name["scalar"]["status"]["notes"] == ["status: str, not an object; ignored"]
        many = by_name["many"]["status"]
        assert len(many["conditions"]) == 8 and {len(c["message"]) for c in many["conditions"]} == {256}
        assert many["clusters"] == [f"c{i}" for i in range(16)] and many["cluster_count"] == 100
        assert many["notes"][0] == "status.conditions: 40 conditions, the first 8 shown"
        assert many["notes"][-1] == "status.clusters: 1 entries without a cluster name; left out"
        assert "its status is shown in part (status: str, not an object; ignored)" in explain(s, f"scalar.odd.svc.{Z}")["reason"]
        eventually(lambda: "ServiceImport odd/many: its status is shown in part" in s.log(), 5)
        assert "Traceback" not in s.log()
