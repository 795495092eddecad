"""DNS-SD browsing (RFC 6763) with `--dns-sd`, walked end to end over real sockets with dnspython and dig;
and without the flag, the same names answer exactly as CoreDNS does (NXDOMAIN).

The bundled example: namespace `demo`, ClusterSetIP `web` (http/TCP 80, https/TCP 443) and headless
`db` (postgres/TCP 5432, ready endpoints in clusters east and west).
"""

from __future__ import annotations

import shutil
import subprocess

import dns.flags
import dns.rdatatype
import dns.rcode
import pytest
import yaml

from testsupport.cases import MAIN, Z, check, section_lines
from inspection import explain
from testsupport.objects import headless_service
from testsupport.mcsdnsserver import FIXTURES, McsdnsServer
from testsupport.polling import eventually

BROWSE = f"b._dns-sd._udp.{Z}"


@pytest.fixture(scope="module")
def on():
    with McsdnsServer("--dns-sd") as s:
        yield s


@pytest.fixture(scope="module")
def off():
    with McsdnsServer() as s:
        yield s


def ptr(server: McsdnsServer, name: str) -> list[str]:
    reply = server.query(name, "PTR")
    assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA, (name, reply)
    return sorted(rd.target.to_text() for rrset in reply.answer for rd in rrset)


def browse(server: McsdnsServer) -> dict[str, dict]:
    """Walk every browsing name down to each instance's SRV, TXT and addresses, as a DNS-SD browser does."""
    found: dict[str, dict] = {}
    for domain in ptr(server, BROWSE):
        for kind in ptr(server, f"_services._dns-sd._udp.{domain}"):
            for instance in ptr(server, kind):
                srv = server.query(instance, "SRV")
                txt = server.query(instance, "TXT")
                targets = [(rd.port, rd.target.to_text()) for rrset in srv.answer for rd in rrset]
                addresses = sorted(rd.address for _, target in targets for t in ("A", "AAAA")
                                   for rrset in server.query(target, t).answer for rd in rrset)  # fmt: skip
                found[instance] = {
                    "srv": sorted(targets),
                    "txt": [rd.strings for rrset in txt.answer for rd in rrset],
                    "addresses": addresses,
                }
    return found


def test_browse_the_example_with_dnspython(on):
    assert ptr(on, BROWSE) == [f"demo.svc.{Z}"]
    assert ptr(on, f"_services._dns-sd._udp.demo.svc.{Z}") == [
        f"_http._tcp.demo.svc.{Z}", f"_https._tcp.demo.svc.{Z}", f"_postgres._tcp.demo.svc.{Z}"]
    web, db = f"web.demo.svc.{Z}", f"db.demo.svc.{Z}"
    assert browse(on) == {
        f"web._http._tcp.demo.svc.{Z}": {"srv": [(80, web)], "txt": [(b"",)], "addresses": ["10.96.10.10", "fd00:10:96::a"]},
        f"web._https._tcp.demo.svc.{Z}": {"srv": [(443, web)], "txt": [(b"",)], "addresses": ["10.96.10.10", "fd00:10:96::a"]},
        f"db._postgres._tcp.demo.svc.{Z}": {"srv": [(5432, db)], "txt": [(b"",)], "addresses": ["10.1.1.20", "10.2.1.20"]},
    }


def test_browsing_names_exist_for_every_type_and_any_case(on):
    for name in (BROWSE, f"_services._dns-sd._udp.demo.svc.{Z}", f"_http._tcp.demo.svc.{Z}", f"web._http._tcp.demo.svc.{Z}"):
        for qtype in ("A", "AAAA", "HINFO", "ANY"):
            reply = on.query(name, qtype)
            assert reply.rcode() == dns.rcode.NOERROR and not reply.answer and len(reply.authority) == 1, (name, qtype)
    upper = on.query(f"WEB._HTTP._TCP.Demo.svc.{Z.upper()}", "SRV")
    assert [rd.port for rrset in upper.answer for rd in rrset] == [80]
    assert upper.question[0].name.to_text() == f"WEB._HTTP._TCP.Demo.svc.{Z.upper()}"
    # Names that are not offered stay NXDOMAIN.
    for name in (f"_ftp._tcp.demo.svc.{Z}", f"nope._http._tcp.demo.svc.{Z}", f"_services._dns-sd._udp.other.svc.{Z}"):
        assert on.query(name, "PTR").rcode() == dns.rcode.NXDOMAIN, name


def test_browse_with_dig(on):
    dig = shutil.which("dig")
    if dig is None:
        pytest.fail("dig is not installed (apt-get install bind9-dnsutils; .ci/run installs it)")

    def short(name: str, qtype: str) -> list[str]:
        out = subprocess.run([dig, "@127.0.0.1", "-p", str(on.dns_port), "+short", name, qtype],
                             capture_output=True, text=True, timeout=10, check=True).stdout  # fmt: skip
        return sorted(out.split("\n")[:-1])

    assert short(BROWSE, "PTR") == [f"demo.svc.{Z}"]
    kinds = short(f"_services._dns-sd._udp.demo.svc.{Z}", "PTR")
    instances = [i for kind in kinds for i in short(kind, "PTR")]
    assert sorted(instances) == [f"db._postgres._tcp.demo.svc.{Z}", f"web._http._tcp.demo.svc.{Z}", f"web._https._tcp.demo.svc.{Z}"]
    assert short(f"db._postgres._tcp.demo.svc.{Z}", "SRV") == [f"0 0 5432 db.demo.svc.{Z}"]
    assert short(f"db._postgres._tcp.demo.svc.{Z}", "TXT") == ['""']


def test_without_the_flag_browsing_names_answer_as_coredns(on, off):
    """CoreDNS knows no DNS-SD: every browsing name is NXDOMAIN with the SOA; with the flag off, so is ours."""
    names = [BROWSE, f"_services._dns-sd._udp.demo.svc.{Z}", f"_http._tcp.demo.svc.{Z}", f"web._http._tcp.demo.svc.{Z}",
             f"db._postgres._tcp.demo.svc.{Z}"]  # fmt: skip
    for name in names:
        for qtype in ("PTR", "SRV", "TXT", "A", "AAAA", "ANY"):
            reply = off.query(name, qtype)
            assert reply.rcode() == dns.rcode.NXDOMAIN and not reply.answer and not reply.additional, (name, qtype)
            assert [r.rdtype for r in reply.authority] == [dns.rdatatype.SOA]
    assert explain(off, names[2], "PTR")["reason"].startswith("a DNS-SD browsing name: answered only with --dns-sd")
    # Everything else is the same with and without the flag.
    for name, qtype in [(f"web.demo.svc.{Z}", "A"), (f"db.demo.svc.{Z}", "SRV"), (f"_http._tcp.web.demo.svc.{Z}", "SRV"),
                        (f"demo.svc.{Z}", "PTR"), (f"nothere.demo.svc.{Z}", "A"), (Z, "NS")]:  # fmt: skip
        a, b = on.query(name, qtype), off.query(name, qtype)
        assert (a.rcode(), section_lines(a.answer), section_lines(a.additional)) == \
            (b.rcode(), section_lines(b.answer), section_lines(b.additional)), (name, qtype)


def test_contract_unchanged_with_dns_sd():
    with McsdnsServer("--manifests", str(FIXTURES / "contract.yaml"), "--namespaces", "testns", "--dns-sd") as s:
        for c in MAIN:
            check(c, s.query(c.qname, c.qtype, use_edns=0))
        assert ptr(s, BROWSE) == [f"testns.svc.{Z}"]  # kube-system and unexposedns have imports but are not served
        assert ptr(s, f"_services._dns-sd._udp.testns.svc.{Z}") == [f"_http._tcp.testns.svc.{Z}"]
        assert ptr(s, f"_http._tcp.testns.svc.{Z}") == sorted(
            f"{svc}._http._tcp.testns.svc.{Z}" for svc in ("hdls1", "svc-dual-stack", "svc1", "svc6", "svcempty"))
        assert s.query(f"_services._dns-sd._udp.kube-system.svc.{Z}", "PTR").rcode() == dns.rcode.NXDOMAIN


def test_browsing_follows_changes(tmp_path):
    path = tmp_path / "m.yaml"
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}
    path.write_text(yaml.safe_dump_all([ns, *headless_service("app", "one", [{"addresses": ["10.6.0.1"]}])]))
    with McsdnsServer("--manifests", str(path), "--dns-sd") as s:
        assert ptr(s, f"_http._tcp.app.svc.{Z}") == [f"one._http._tcp.app.svc.{Z}"]
        path.write_text(yaml.safe_dump_all([ns, *headless_service("app", "one", [{"addresses": ["10.6.0.1"]}]),
                                            *headless_service("app", "two", [{"addresses": ["10.6.0.2"]}])]))  # fmt: skip
        eventually(lambda: s.query(f"_http._tcp.app.svc.{Z}", "PTR").answer
                   and len(s.query(f"_http._tcp.app.svc.{Z}", "PTR").answer[0]) == 2, 10)  # fmt: skip
        # An endpoint going unready empties the service: it is no longer offered.
        path.write_text(yaml.safe_dump_all([ns, *headless_service("app", "one", [{"addresses": ["10.6.0.1"]}]),
                                            *headless_service("app", "two", [{"addresses": ["10.6.0.2"],
                                                                              "conditions": {"ready": False}}])]))  # fmt: skip
        eventually(lambda: ptr(s, f"_http._tcp.app.svc.{Z}") == [f"one._http._tcp.app.svc.{Z}"], 10)
        assert s.query(f"two._http._tcp.app.svc.{Z}", "SRV").rcode() == dns.rcode.NXDOMAIN
        path.write_text(yaml.safe_dump_all([ns]))
        eventually(lambda: s.query(f"_http._tcp.app.svc.{Z}", "PTR").rcode() == dns.rcode.NXDOMAIN, 10)
        assert ptr(s, BROWSE) == []


def kdig_sections(server: McsdnsServer, name: str, qtype: str) -> tuple[list[str], list[str]]:
    """kdig's answer and additional sections, one record a line, whitespace folded."""
    kdig = shutil.which("kdig")
    if kdig is None:
        pytest.fail("kdig is not installed (apt-get install knot-dnsutils; .ci/run installs it)")
    out = subprocess.run([kdig, "@127.0.0.1", "-p", str(server.dns_port), name, qtype, "+noall", "+answer"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    extra = subprocess.run([kdig, "@127.0.0.1", "-p", str(server.dns_port), name, qtype, "+noall", "+additional"],
                           capture_output=True, text=True, timeout=10, check=True).stdout
    fold = lambda text: sorted(" ".join(line.split()) for line in text.splitlines() if line.strip() and not line.startswith(";"))
    return fold(out), fold(extra)


def test_an_instance_srv_carries_its_targets_addresses_in_additional(on, tmp_path):
    """RFC 6763 12.2: the SRV of an instance comes with its target's A/AAAA, as a browser connects next:
    a ClusterSetIP's spec.ips, a headless service's ready endpoints; and they follow a change."""
    answer, additional = kdig_sections(on, f"web._https._tcp.demo.svc.{Z}", "SRV")
    assert answer == [f"web._https._tcp.demo.svc.{Z} 5 IN SRV 0 0 443 web.demo.svc.{Z}"]
    assert additional == [f"web.demo.svc.{Z} 5 IN A 10.96.10.10", f"web.demo.svc.{Z} 5 IN AAAA fd00:10:96::a"]
    answer, additional = kdig_sections(on, f"db._postgres._tcp.demo.svc.{Z}", "SRV")
    assert answer == [f"db._postgres._tcp.demo.svc.{Z} 5 IN SRV 0 0 5432 db.demo.svc.{Z}"]
    assert additional == [f"db.demo.svc.{Z} 5 IN A 10.1.1.20", f"db.demo.svc.{Z} 5 IN A 10.2.1.20"]
    assert kdig_sections(on, f"db._postgres._tcp.demo.svc.{Z}", "TXT")[1] == []  # the TXT has none

    path = tmp_path / "m.yaml"
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}
    path.write_text(yaml.safe_dump_all([ns, *headless_service("app", "one", [{"addresses": ["10.6.0.1"]}])]))
    with McsdnsServer("--manifests", str(path), "--dns-sd") as s:
        assert kdig_sections(s, f"one._http._tcp.app.svc.{Z}", "SRV")[1] == [f"one.app.svc.{Z} 5 IN A 10.6.0.1"]
        path.write_text(yaml.safe_dump_all([ns, *headless_service("app", "one", [{"addresses": ["10.6.0.1"]},
                                                                                 {"addresses": ["10.6.0.2"]}])]))
        eventually(lambda: kdig_sections(s, f"one._http._tcp.app.svc.{Z}", "SRV")[1]
                   == [f"one.app.svc.{Z} 5 IN A 10.6.0.1", f"one.app.svc.{Z} 5 IN A 10.6.0.2"], 10)


def test_explain_names_dns_sd(on):
    doc = explain(on, f"web._http._tcp.demo.svc.{Z}", "SRV")
    assert doc["rcode"] == "NOERROR" and doc["answer"] == [f"web._http._tcp.demo.svc.{Z} 5 IN SRV 0 0 80 web.demo.svc.{Z}"]
    assert doc["reason"].startswith("DNS-SD browsing (--dns-sd): instance of ServiceImport demo/web")


def test_answers_kept_change_by_change_equal_the_answer_functions():
    """In-process: after every random change the DNS-SD answers the table keeps up to date change by change
    are exactly what the pure answer functions give for the whole store, compiled into the table."""
    import random

    import struct

    from mcsdns.zone import dnssd
    from mcsdns.zone.compiler import Service
    from mcsdns.zone.dnssd import DnsSd
    from mcsdns.zone.wire import encode_labels
    from mcsdns.objects import Namespace, to_endpoint_slice, to_service_import
    from mcsdns.store import Store
    from mcsdns.zone.table import Table, TableConfig

    config = TableConfig(("clusterset.local",), 5, frozenset({"ns0", "ns1"}), ("127.0.0.1",))
    ports = [{"name": "http", "protocol": "TCP", "port": 80}, {"name": "dns", "protocol": "UDP", "port": 53},
             {"name": "grpc", "protocol": "TCP", "port": 9000}]  # fmt: skip

    def table_over(store: Store) -> Table:
        table = Table(config, store)
        store.listener = table.on_change
        table.dnssd = DnsSd(table)
        return table

    def compiled(table: Table) -> dict:
        assert table.dnssd is not None
        return {k: table.answers[k] for keys in table.dnssd.owned.values() for k in keys}

    def reference(store: Store) -> dict:
        """What the table must hold, straight from the pure functions over the whole store."""
        table = Table(config, store)
        kinds: dict[str, dict] = {}
        out = []
        for (ns, name), imp in sorted(store.imports.items()):
            if table.namespace_exposed(ns):
                svc = Service(imp, store.service_slices((ns, name)))
                offers = dnssd.offered(svc)
                glue = dnssd.instance_glue(svc, 5, max(map(len, offers.values()))) if offers else ()
                for kind, numbers in offers.items():
                    kinds.setdefault(ns, {}).setdefault(kind, []).append(name)
                    out += dnssd.instance_answers(ns, name, kind, numbers, 5, glue)
        for ns, offering in kinds.items():
            out += dnssd.services_answers(ns, offering, 5)
            out += [c for kind, names in offering.items() for c in dnssd.kind_answers(ns, kind, names, 5)]
        out += dnssd.browse_answers({ns for ns, _ in store.imports if table.namespace_exposed(ns)}, 5)
        zwire = table.zones[0]
        return {encode_labels(labels) + zwire + struct.pack(">HH", qtype, 1):
                table.render(encode_labels(labels) + zwire, len(zwire), ans) for labels, qtype, ans in out}  # fmt: skip

    live = Store()
    table = table_over(live)
    for kind in ("Namespace", "ServiceImport", "EndpointSlice"):
        live.mark_synced(kind)
    rng = random.Random(5)
    most = 0
    for step in range(400):
        ns, name = f"ns{rng.randrange(3)}", f"s{rng.randrange(5)}"
        op = rng.random()
        if op < 0.35:
            live.apply(to_service_import({"metadata": {"name": name, "namespace": ns}, "spec": {
                "type": rng.choice(["ClusterSetIP", "Headless"]), "ips": rng.choice([[], ["10.0.0.1"]]),
                "ports": rng.sample(ports, rng.randrange(4))}}))  # fmt: skip
        elif op < 0.65:
            live.apply(to_endpoint_slice({
                "metadata": {"name": f"{name}-{rng.randrange(2)}", "namespace": ns, "labels": {
                    "multicluster.kubernetes.io/service-name": name, "multicluster.kubernetes.io/source-cluster": "c1"}},
                "endpoints": [{"addresses": [f"10.1.0.{i}"], "conditions": {"ready": rng.random() < 0.7}} for i in range(rng.randrange(3))],
                "ports": rng.sample(ports, rng.randrange(3))}))  # fmt: skip
        elif op < 0.8:
            live.delete("ServiceImport", ns, name)
        elif op < 0.9:
            live.delete("EndpointSlice", ns, f"{name}-{rng.randrange(2)}")
        elif op < 0.95:
            live.apply(Namespace(ns))
        else:
            live.delete("Namespace", "", ns)
        want = reference(live)
        most = max(most, len(want))
        assert compiled(table) == want, f"step {step}"
        assert table.dnssd.names == {k[:-4] for k in want}, f"step {step}"
        assert all(table.answers[k] == body for k, body in want.items())
    assert most > 50, "the random walk offered too little to test anything"
