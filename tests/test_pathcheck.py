"""`mcsdns explain --via` / `/explain?via=`: does the DNS pods use bring a name to mcsdns? (issue 30)

Real parts on loopback: mcsdns serving the contract fixture, the testbin's CoreDNS playing the
cluster DNS in the three shapes users have (the stub zone as docs/install.md gives it, no stub
zone, a stub zone forwarding to an address where nothing answers), and BIND's `named` serving a
root zone as the upstream resolvers do: without a stub zone, CoreDNS sends clusterset.local
there and gets NXDOMAIN with the root's SOA. tests/test_cluster.py asks the same in a real
cluster, through the mcsdns pod's own /etc/resolv.conf (`via=cluster`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.query
import pytest

from inspection import get_json
from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer
from testsupport.polling import eventually
from testsupport.testbed import Process, free_port, stop_popen
from compat.coredns import find_coredns

Z = "clusterset.local"
WEB = f"svc1.testns.svc.{Z}"  # ClusterSetIP 10.0.0.1 in the contract fixture
NONE = f"svc0.testns.svc.{Z}"  # no such import: NXDOMAIN with mcsdns's SOA
FIX = f"does not forward {Z} to mcsdns: add the stub zone (docs/install.md"

ROOT_ZONE = """\
$TTL 86400
. IN SOA a.root-servers.net. nstld.verisign-grs.com. 2026120300 1800 900 604800 86400
. IN NS a.root-servers.net.
a.root-servers.net. IN A 198.41.0.4
"""


@pytest.fixture(scope="module")
def mcsdns() -> Iterator[McsdnsServer]:
    with McsdnsServer("--manifests", str(FIXTURES / "contract.yaml"), "--namespaces", "testns") as s:
        yield s


@pytest.fixture(scope="module")
def root_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """`named` authoritative for the root zone: what the internet answers for clusterset.local."""
    binary = shutil.which("named") or "/usr/sbin/named"
    if not Path(binary).exists():
        pytest.skip("named is not installed (apt-get install bind9)")
    d = tmp_path_factory.mktemp("root")
    port = free_port()
    (d / "root.zone").write_text(ROOT_ZONE)
    (d / "named.conf").write_text(
        f'options {{\n  directory "{d}";\n  pid-file "{d}/named.pid";\n  session-keyfile "{d}/session.key";\n'
        f'  managed-keys-directory "{d}";\n  listen-on port {port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n'
        "  recursion no;\n  dnssec-validation no;\n};\ncontrols { };\n"
        f'zone "." {{ type primary; file "{d}/root.zone"; }};\n')
    with open(d / "named.log", "wb") as log:
        proc = subprocess.Popen([binary, "-g", "-n", "1", "-c", str(d / "named.conf")], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        def answers() -> bool:
            q = dns.message.make_query(".", "SOA")
            try:
                return bool(dns.query.udp(q, "127.0.0.1", port=port, timeout=0.3).answer)
            except Exception:
                return False
        eventually(lambda: proc.poll() is None and answers(), timeout=20,
                   what=lambda: (d / "named.log").read_text(errors="replace")[-2000:])
        yield port
    finally:
        stop_popen(proc, 10)


@pytest.fixture(scope="module")
def cluster_dns(tmp_path_factory: pytest.TempPathFactory, mcsdns: McsdnsServer, root_server: int) -> Iterator[dict]:
    """One real CoreDNS, one port per shape of the cluster DNS; plus a port where nothing listens."""
    d = tmp_path_factory.mktemp("coredns")
    ports = {"stub": free_port(), "no_stub": free_port(), "wrong_stub": free_port(), "dead": free_port()}

    def block(zone: str, port: int, to: int, extra: str = "") -> str:
        return f"{zone}:{port} {{\n    bind 127.0.0.1\n    errors\n{extra}    forward . 127.0.0.1:{to}\n}}\n"

    corefile = "".join([
        # docs/install.md's stub zone next to the `.:53` block, whose upstream is the "internet".
        block(Z, ports["stub"], mcsdns.dns_port, "    cache 5\n"), block(".", ports["stub"], root_server),
        block(".", ports["no_stub"], root_server),
        block(Z, ports["wrong_stub"], ports["dead"], "    cache 5\n"), block(".", ports["wrong_stub"], root_server),
    ])
    (d / "Corefile").write_text(corefile)
    proc = Process("coredns", [str(find_coredns()), "-conf", str(d / "Corefile")], d / "coredns.log")
    proc.start()
    try:
        def up() -> bool:
            q = dns.message.make_query(".", "SOA")
            try:
                return all(dns.query.udp(q, "127.0.0.1", port=ports[k], timeout=0.3).answer
                           for k in ("stub", "no_stub", "wrong_stub"))
            except Exception:
                return False
        eventually(lambda: proc.running() and up(), timeout=20, what=lambda: proc.tail())
        yield ports
    finally:
        proc.stop()


def explain_via(server: McsdnsServer, name: str, via: str, qtype: str = "A") -> dict:
    status, doc = get_json(server, f"/explain?name={name}&type={qtype}&via={via}")
    assert status == 200, doc
    return doc


def test_the_documented_stub_zone_reaches_mcsdns(mcsdns: McsdnsServer, cluster_dns: dict) -> None:
    doc = explain_via(mcsdns, WEB, f"127.0.0.1:{cluster_dns['stub']}")
    assert doc["rcode"] == "NOERROR" and doc["via"]["rcode"] == "NOERROR", doc
    assert doc["via"]["answer"] == ["a 10.0.0.1"] and doc["via"]["verdict"] == "same", doc
    assert "answers the same" in doc["via"]["reason"] and FIX not in doc["via"]["reason"]
    # A name mcsdns does not have: NXDOMAIN through the stub zone too, with mcsdns's SOA.
    nx = explain_via(mcsdns, NONE, f"127.0.0.1:{cluster_dns['stub']}")
    assert nx["rcode"] == nx["via"]["rcode"] == "NXDOMAIN" and nx["via"]["verdict"] == "same", nx
    assert nx["via"]["soa"] == f"{Z}. SOA ns.dns.{Z}. hostmaster.{Z}.", nx


def test_no_stub_zone_is_named_with_its_fix(mcsdns: McsdnsServer, cluster_dns: dict) -> None:
    """CoreDNS sends the zone to its upstream, which says NXDOMAIN with the root's SOA."""
    for name in (WEB, NONE):
        via = explain_via(mcsdns, name, f"127.0.0.1:{cluster_dns['no_stub']}")["via"]
        assert via["rcode"] == "NXDOMAIN" and via["soa"] == ". SOA a.root-servers.net. nstld.verisign-grs.com.", via
        assert via["verdict"] == "not_forwarded" and FIX in via["reason"], via
        assert "the SOA of . (a.root-servers.net.), not mcsdns's ns.dns.clusterset.local." in via["reason"], via


def test_a_stub_zone_with_a_wrong_address_is_named_with_its_fix(mcsdns: McsdnsServer, cluster_dns: dict) -> None:
    via = explain_via(mcsdns, WEB, f"127.0.0.1:{cluster_dns['wrong_stub']}")["via"]
    assert via["rcode"] == "SERVFAIL" and via["verdict"] == "not_forwarded", via
    assert FIX in via["reason"] and "the mcsdns Service's ClusterIP" in via["reason"], via


def test_a_dns_server_that_does_not_answer(mcsdns: McsdnsServer, cluster_dns: dict) -> None:
    via = explain_via(mcsdns, WEB, f"127.0.0.1:{cluster_dns['dead']}")["via"]
    assert via["rcode"] is None and via["verdict"] == "not_forwarded" and FIX in via["reason"], via
    assert "It gave no answer (" in via["reason"], via


def test_via_is_only_asked_for_names_in_the_zone_and_bad_values_are_refused(mcsdns: McsdnsServer, cluster_dns: dict) -> None:
    assert "via" not in explain_via(mcsdns, "example.org", f"127.0.0.1:{cluster_dns['stub']}")
    assert "via" not in explain_via(mcsdns, WEB, "none")
    for bad in ("example.org", "127.0.0.1:99999", "127.0.0.1:0", "[::1"):
        status, doc = get_json(mcsdns, f"/explain?name={WEB}&via={bad}")
        assert status == 400 and "via" in doc["error"], (bad, doc)


def test_cli_says_what_the_cluster_dns_answers_and_the_fix(mcsdns: McsdnsServer, cluster_dns: dict) -> None:
    server = f"http://127.0.0.1:{mcsdns.http_port}"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mcsdns", "explain", WEB, "--server", server, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=30)

    broken = cli("--via", f"127.0.0.1:{cluster_dns['no_stub']}")
    lines = broken.stdout.splitlines()
    assert broken.returncode == 0 and lines[0] == f"{WEB}. A: NOERROR", broken
    assert lines[-2] == f"via 127.0.0.1:{cluster_dns['no_stub']}: NXDOMAIN (not_forwarded)", lines
    assert FIX in lines[-1], lines
    fine = cli("--via", f"127.0.0.1:{cluster_dns['stub']}", "-o", "json")
    assert json.loads(fine.stdout)["via"]["verdict"] == "same", fine.stdout


def test_another_mcsdns_behind_the_path_differs(mcsdns: McsdnsServer) -> None:
    """A stub zone forwarding to another mcsdns (an old install, another cluster's): its negative
    answer carries the same SOA, so only the comparison of answers shows it."""
    with McsdnsServer() as other:  # the bundled example: no testns/svc1
        via = explain_via(mcsdns, WEB, f"127.0.0.1:{other.dns_port}")["via"]
    assert via["rcode"] == "NXDOMAIN" and via["verdict"] == "differs", via
    assert "answers differently (NXDOMAIN, 0 record(s))" in via["reason"] and "check its `forward` address" in via["reason"]


def test_auto_asks_only_in_a_pod(mcsdns: McsdnsServer) -> None:
    """`mcsdns explain`'s default: a server outside a pod (this one: no KUBERNETES_SERVICE_HOST)
    does not ask its machine's resolver, which says nothing about a cluster."""
    assert "via" not in explain_via(mcsdns, WEB, "auto")
