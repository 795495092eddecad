"""Knot 3 and BIND 9 as secondaries of mcsdns: they load the zone by a TSIG-signed AXFR and answer as mcsdns does.

For the bundled example and the contract's fixture (manifests source), each secondary
transfers the zone from a running `mcsdns serve --transfer-to 127.0.0.1 --tsig-key-file`
and is then asked, beside mcsdns, every question test_zonefile asks of a zone file server
(testsupport/zonecompare.py): the same records for every name and type, the CoreDNS quirks
as exactly those. The secondary's serial is mcsdns's own.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path

import dns.rcode
import pytest

from testsupport.secondaries import BindSecondary, KnotSecondary
from testsupport.serverproc import FIXTURES, ROOT, Server, eventually
from testsupport.zonecompare import ZONE, answers_alike, ask, questions, soa_fields
from test_zonefile import print_zone

EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SOURCES = {"example": (EXAMPLE, ()), "contract": (FIXTURES / "contract.yaml", ("--namespaces", "testns"))}
SECONDARIES = {"knot": KnotSecondary, "bind": BindSecondary}
SECRET = base64.b64encode(bytes(range(100, 132))).decode()


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("kind", sorted(SECONDARIES))
def test_secondary_loads_the_zone_with_tsig_and_answers_like_mcsdns(kind: str, source: str, tmp_path: Path) -> None:
    manifests, extra = SOURCES[source]
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    asked, names = questions(print_zone(manifests, *extra))
    with Server("--manifests", str(manifests), "--ns-address", "127.0.0.1", *extra, "--transfer-to", "127.0.0.1",
                "--tsig-key-file", str(tmp_path / "key")) as server:
        with SECONDARIES[kind](tmp_path / kind, server.dns_port, ("xfr-key", "hmac-sha256", SECRET)) as secondary:
            assert secondary.serial() == ask(server.dns_port, ZONE, "SOA").answer[0][0].serial
            compared = answers_alike(server.dns_port, secondary.port, asked, kind)
            assert soa_fields(server.dns_port) == soa_fields(secondary.port)
            assert compared >= 3 * names, (compared, len(asked))
        _, metrics = server.http("/metrics")
    assert 'mcsdns_transfers_total{result="axfr",type="axfr"}' in metrics or "fallback_axfr" in metrics, metrics


def test_a_secondary_with_the_wrong_key_gets_nothing(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    wrong = base64.b64encode(b"w" * 32).decode()
    with Server("--manifests", str(EXAMPLE), "--transfer-to", "127.0.0.1", "--tsig-key-file", str(tmp_path / "key")) as server:
        knot = KnotSecondary(tmp_path / "knot", server.dns_port, ("xfr-key", "hmac-sha256", wrong), load_timeout=8)
        with pytest.raises(AssertionError, match="loading the zone"):
            with knot:
                pass
        assert "TSIG" in knot.log() or "BADSIG" in knot.log() or "failed" in knot.log(), knot.log()
        _, metrics = server.http("/metrics")
    assert 'result="badsig"' in metrics, metrics


def churn_step(step: int) -> tuple[str, str, str | None]:
    """The manifests added to the example at `step`, and (name, the address it must answer, None: NXDOMAIN)."""
    if step % 3 == 2:  # every third step deletes the service the step before added
        return "", f"added{step - 1}.demo.svc.{ZONE}", None
    address = f"10.77.{step}.{step % 7 + 1}"
    imp = ("---\napiVersion: multicluster.x-k8s.io/v1beta1\nkind: ServiceImport\n"
           f"metadata: {{name: added{step}, namespace: demo}}\n"
           f"spec: {{type: ClusterSetIP, ips: [{address}], ports: [{{name: http, protocol: TCP, port: 80}}]}}\n")
    slice_ = ("---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
              f"metadata: {{name: added{step}-east, namespace: demo, labels: "
              f"{{multicluster.kubernetes.io/service-name: added{step}, multicluster.kubernetes.io/source-cluster: east}}}}\n"
              f"addressType: IPv4\nendpoints: [{{addresses: [10.78.{step}.1], conditions: {{ready: true}}}}]\n"
              "ports: [{name: http, protocol: TCP, port: 8080}]\n")
    return imp + slice_, f"added{step}.demo.svc.{ZONE}", address


def a_record(port: int, name: str) -> str | None:
    """The A answer of `name` (None: NXDOMAIN), or "?" for anything else (not there yet)."""
    reply = ask(port, name, "A")
    if reply.rcode() == dns.rcode.NXDOMAIN:
        return None
    return reply.answer[0][0].address if reply.answer else "?"


@pytest.mark.parametrize("kind", sorted(SECONDARIES))
def test_secondary_follows_changes_by_notify(kind: str, tmp_path: Path) -> None:
    """Manifests change 9 times (services added, one deleted every third step); after each, mcsdns answers
    the change, sends NOTIFY, and the secondary answers the same within a few seconds (its SOA refresh
    timer is 2 hours: only the NOTIFY can bring it so soon). Then every question matches again."""
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    manifests = tmp_path / "manifests.yaml"
    base = EXAMPLE.read_text()
    manifests.write_text(base)
    server = Server("--manifests", str(manifests), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                    "--tsig-key-file", str(tmp_path / "key"))
    secondary = SECONDARIES[kind](tmp_path / kind, server.dns_port, ("xfr-key", "hmac-sha256", SECRET))
    server.args += ["--notify", f"127.0.0.1:{secondary.port}"]
    added = ""
    with server, secondary:
        for step in range(9):
            extra, name, address = churn_step(step)
            added = added + extra if address is not None else added[: added.rindex("---\napiVersion: multicluster")]
            manifests.write_text(base + "\n" + added)
            server.signal(signal.SIGHUP)
            eventually(lambda: a_record(server.dns_port, name) == address, timeout=10, what=f"mcsdns: {name}")
            eventually(lambda: a_record(secondary.port, name) == address, timeout=10,
                       what=lambda: f"{kind} following {name} -> {address}: {secondary.log()[-2000:]}")
            assert secondary.serial() == ask(server.dns_port, ZONE, "SOA").answer[0][0].serial
        asked, _ = questions(print_zone(manifests))
        answers_alike(server.dns_port, secondary.port, asked, kind)
        _, metrics = server.http("/metrics")
    assert 'mcsdns_notify_total{result="acknowledged"}' in metrics, metrics


@pytest.mark.kube
def test_knot_follows_changes_made_through_the_api(testbed, fresh_namespace: str, tmp_path: Path) -> None:
    """The API source: ServiceImports and EndpointSlices created, updated and deleted in a real
    kube-apiserver; a Knot secondary answers each change as mcsdns does, by NOTIFY, then every name."""
    from kube_server import ES_API, MCS, KubeServer, endpoint_slice, ensure_crd, service_import

    ensure_crd(testbed)
    ns = fresh_namespace
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    server = KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--namespaces", ns, "--ns-address",
                        "127.0.0.1", "--transfer-to", "127.0.0.1", "--tsig-key-file", str(tmp_path / "key"))
    knot = KnotSecondary(tmp_path / "knot", server.dns_port, ("xfr-key", "hmac-sha256", SECRET))
    server.args += ["--notify", f"127.0.0.1:{knot.port}"]
    vip, web = f"vip.{ns}.svc.{ZONE}", f"web.{ns}.svc.{ZONE}"
    steps = [
        (lambda: testbed.create(service_import(ns, "vip", ["10.9.0.1"])), vip, "10.9.0.1"),
        (lambda: testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.9.0.2"]}}),
         vip, "10.9.0.2"),
        (lambda: (testbed.create(service_import(ns, "web", headless=True)),
                  testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.1", True)]))), web, "10.1.0.1"),
        (lambda: testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.3", True)])), web, "10.1.0.3"),
        (lambda: testbed.delete(ES_API, "EndpointSlice", ns, "web-east"), web, None),
        (lambda: testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip"), vip, None),
    ]
    with server:
        server.wait_until_ready()
        with knot:
            for act, name, address in steps:
                act()
                eventually(lambda: a_record(server.dns_port, name) == address, timeout=10, what=f"mcsdns: {name}")
                eventually(lambda: a_record(knot.port, name) == address, timeout=10,
                           what=lambda: f"knot following {name} -> {address}: {knot.log()[-2000:]}")
            testbed.create(service_import(ns, "last", ["10.9.0.9"]))
            eventually(lambda: a_record(knot.port, f"last.{ns}.svc.{ZONE}") == "10.9.0.9", timeout=10)
            proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--kubeconfig", str(testbed.kubeconfig_path),
                                   "--namespaces", ns, "--ns-address", "127.0.0.1"], cwd=ROOT, capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            asked, _ = questions(proc.stdout)
            answers_alike(server.dns_port, knot.port, asked)
