"""`--reverse-cidr` (issue 15): PTR records for ClusterSetIPs and ready headless endpoints.

The zone arithmetic in-process (mcsdns.zone.reverse is pure), then a real `mcsdns serve` on manifests
queried over UDP and TCP: PTR for IPv4 and IPv6 addresses, an address with two names, a not-ready
endpoint, unknown addresses (NXDOMAIN with the reverse zone's SOA), the apex, and addresses
outside the CIDRs, which still go to the upstream (a fake one that records what it receives).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.reversename
import pytest
import yaml

from testsupport.cases import Z
from testsupport.objects import endpoint_slice, namespace, service_import
from mcsdns.zone import reverse
from testsupport.mcsdnsserver import FIXTURES, ROOT
from testsupport.polling import eventually
from upstreams import Fake, ForwardingServer

NS = "rev"
HTTP = [{"name": "http", "protocol": "TCP", "port": 80}]
CIDRS = ("10.50.0.0/20", "fd00:50::/62")


# --------------------------------------------------------------------------- zones (pure)


def test_a_cidr_off_the_octet_boundary_becomes_one_zone_per_block():
    assert reverse.reverse_zones(["10.50.0.0/20"]) == tuple(f"{i}.50.10.in-addr.arpa" for i in range(16))
    assert reverse.reverse_zones(["10.0.0.0/8"]) == ("10.in-addr.arpa",)
    assert reverse.reverse_zones(["10.96.0.0/12"]) == tuple(f"{i}.10.in-addr.arpa" for i in range(96, 112))
    # A /25 is not the whole of its /24: one zone per address, none holding an address outside it.
    assert reverse.reverse_zones(["192.168.7.128/25"]) == tuple(f"{i}.7.168.192.in-addr.arpa" for i in range(128, 256))


def test_ipv6_splits_on_nibbles():
    assert reverse.reverse_zones(["fd00:50::/62"]) == tuple(
        ".".join(reversed(f"fd000050000000{i:02x}")) + ".ip6.arpa" for i in range(4))
    assert reverse.reverse_zones(["fd00::/8"]) == ("d.f.ip6.arpa",)


def test_zones_inside_another_cidr_are_not_repeated():
    assert reverse.reverse_zones(["10.0.0.0/8", "10.50.0.0/20", "10.0.0.0/8"]) == ("10.in-addr.arpa",)


@pytest.mark.parametrize("cidrs, why", [
    (["10.50.0.1/20"], "has host bits set"),
    (["nonsense"], "not a CIDR"),
    (["10.1.0.128/25", "10.2.0.128/25", "10.3.0.128/25"], "384 reverse zones in all (more than 256)"),
])  # fmt: skip
def test_bad_cidrs_exit_2_naming_flag_and_value(cidrs, why):
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "serve", *(f"--reverse-cidr={c}" for c in cidrs)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "--reverse-cidr" in proc.stderr and why in proc.stderr, proc.stderr
    assert len(cidrs) > 1 or cidrs[0] in proc.stderr


# --------------------------------------------------------------------------- over real sockets


def documents(db_1_ready: bool = False) -> list[dict]:
    def imp(name: str, headless: bool, ips: list[str] | None = None) -> dict:
        return service_import(NS, name, ips or None, headless=headless, ports=HTTP)

    def sl(name: str, service: str, cluster: str | None, family: str, endpoints: list[dict]) -> dict:
        return endpoint_slice(NS, name, service, cluster or None, endpoints, address_type=family, ports=HTTP)

    return [
        namespace(NS),
        imp("vip", False, ["10.50.0.10", "fd00:50::10"]),
        imp("outside", False, ["192.168.77.7"]),
        imp("db", True),
        sl("db-east", "db", "east", "IPv4", [
            {"addresses": ["10.50.1.1"], "hostname": "db-0", "conditions": {"ready": True}},
            {"addresses": ["10.50.1.2"], "hostname": "db-1", "conditions": {"ready": db_1_ready}},
            {"addresses": ["10.50.1.3"]},  # no hostname: 10-50-1-3, ready (unset counts as ready)
        ]),
        sl("db-west", "db", "west", "IPv6", [{"addresses": ["fd00:50:0:1::1"], "hostname": "db-0"}]),
        # 10.50.1.1 is also an endpoint of another service: its PTR answers both names.
        imp("cache", True),
        sl("cache-east", "cache", "east", "IPv4", [{"addresses": ["10.50.1.1"], "hostname": "cache-0"}]),
        # No cluster id: no per-endpoint name, so no PTR (decision 4).
        imp("anon", True),
        sl("anon-1", "anon", None, "IPv4", [{"addresses": ["10.50.2.1"], "hostname": "anon-0"}]),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def upstream():
    with Fake() as up:
        yield up


@pytest.fixture
def manifests(tmp_path) -> Path:
    path = tmp_path / "rev.yaml"
    path.write_text(yaml.safe_dump_all(documents()))
    return path


@pytest.fixture
def served(manifests, upstream):
    args = ["--manifests", str(manifests), "--upstream", upstream.addr]
    for cidr in CIDRS:
        args += ["--reverse-cidr", cidr]
    with ForwardingServer(*args) as s:
        yield s


def ptr(server, ip: str, qtype: str = "PTR", tcp: bool = False) -> dns.message.Message:
    name = dns.reversename.from_address(ip).to_text()
    return server.query(name, qtype, tcp=tcp)


def targets(reply: dns.message.Message) -> set[str]:
    return {rd.target.to_text() for rrset in reply.answer for rd in rrset}


def soa_owner(reply: dns.message.Message) -> str:
    (rrset,) = reply.authority
    assert rrset.rdtype == dns.rdatatype.SOA
    return rrset.name.to_text()


@pytest.mark.parametrize("tcp", [False, True])
def test_ptr_for_clusterset_ips_and_ready_endpoints(served, tcp):
    expected = {
        "10.50.0.10": {f"vip.{NS}.svc.{Z}"},
        "fd00:50::10": {f"vip.{NS}.svc.{Z}"},
        "10.50.1.3": {f"10-50-1-3.east.db.{NS}.svc.{Z}"},
        "fd00:50:0:1::1": {f"db-0.west.db.{NS}.svc.{Z}"},
        "10.50.1.1": {f"db-0.east.db.{NS}.svc.{Z}", f"cache-0.east.cache.{NS}.svc.{Z}"},  # shared: both names
    }
    for ip, names in expected.items():
        reply = ptr(served, ip, tcp=tcp)
        assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA, (ip, reply)
        assert targets(reply) == names, ip
        assert all(r.ttl == 5 and r.name == dns.reversename.from_address(ip) for r in reply.answer)
        # The same name for another type exists but holds nothing: NODATA with the zone's SOA.
        other = ptr(served, ip, "A", tcp=tcp)
        assert other.rcode() == dns.rcode.NOERROR and not other.answer and other.authority


def test_not_ready_unknown_and_anonymous_addresses_are_nxdomain_with_the_zone_soa(served):
    for ip, zone in (("10.50.1.2", "1.50.10.in-addr.arpa."),  # endpoint not ready
                     ("10.50.15.200", "15.50.10.in-addr.arpa."),  # nothing there (last /24 of the /20)
                     ("10.50.2.1", "2.50.10.in-addr.arpa."),  # slice without cluster id
                     ("fd00:50:0:3::99", "3.0.0.0.0.0.0.0.0.5.0.0.0.0.d.f.ip6.arpa.")):
        reply = ptr(served, ip)
        assert reply.rcode() == dns.rcode.NXDOMAIN and reply.flags & dns.flags.AA, ip
        assert soa_owner(reply) == zone, ip


def test_names_above_an_address_are_nodata_others_nxdomain(served):
    zone = "0.0.0.0.0.0.0.0.0.5.0.0.0.0.d.f.ip6.arpa."  # fd00:50:0:0::/64, which holds fd00:50::10
    above = served.query("0.0.0.0." + zone, "PTR")  # fd00:50::0000:...: above ::10
    assert above.rcode() == dns.rcode.NOERROR and not above.answer and soa_owner(above) == zone
    empty = served.query("f.f.f.f." + zone, "PTR")
    assert empty.rcode() == dns.rcode.NXDOMAIN and soa_owner(empty) == zone
    bad = served.query("300.1.50.10.in-addr.arpa.", "PTR")  # not an octet
    assert bad.rcode() == dns.rcode.NXDOMAIN and soa_owner(bad) == "1.50.10.in-addr.arpa."


def test_apex_soa_and_ns(served):
    zone = "1.50.10.in-addr.arpa."
    soa = served.query(zone, "SOA")
    assert soa.rcode() == dns.rcode.NOERROR and soa.flags & dns.flags.AA
    assert soa.answer[0].rdtype == dns.rdatatype.SOA and soa.answer[0].name.to_text() == zone
    assert soa.answer[0][0].mname.to_text() == "ns.dns." + zone
    ns = served.query(zone, "NS")
    assert [rd.target.to_text() for rd in ns.answer[0]] == ["ns.dns." + zone]
    glue = served.query("ns.dns." + zone, "A")
    assert glue.rcode() == dns.rcode.NOERROR and glue.answer


def test_addresses_outside_the_cidrs_are_forwarded(served, upstream):
    for ip in ("192.168.77.7", "10.50.16.1", "fd00:50:0:4::1"):
        name = dns.reversename.from_address(ip)
        before = len(upstream.queries)
        reply = served.query(name.to_text(), "PTR")
        assert not reply.flags & dns.flags.AA, ip  # the (fake) upstream's reply, not ours
        assert any(dns.message.from_wire(q).question[0].name == name for q in upstream.queries[before:]), ip


def test_a_change_to_the_objects_reaches_the_ptr_answers(served, manifests):
    assert ptr(served, "10.50.1.2").rcode() == dns.rcode.NXDOMAIN
    manifests.write_text(yaml.safe_dump_all(documents(db_1_ready=True)))
    eventually(lambda: targets(ptr(served, "10.50.1.2")) == {f"db-1.east.db.{NS}.svc.{Z}"}, 10,
               what="PTR after db-1 became ready")
    # And back: the address is NXDOMAIN again, and the shared one keeps both names.
    manifests.write_text(yaml.safe_dump_all(documents()))
    eventually(lambda: ptr(served, "10.50.1.2").rcode() == dns.rcode.NXDOMAIN, 10, what="NXDOMAIN again")
    assert len(targets(ptr(served, "10.50.1.1"))) == 2


def test_without_the_flag_reverse_names_are_forwarded(manifests, upstream):
    with ForwardingServer("--manifests", str(manifests), "--upstream", upstream.addr) as plain:
        for ip in ("10.50.0.10", "10.50.1.2", "fd00:50::10"):
            name = dns.reversename.from_address(ip)
            before = len(upstream.queries)
            reply = plain.query(name.to_text(), "PTR")
            assert not reply.flags & dns.flags.AA and not reply.answer
            assert any(dns.message.from_wire(q).question[0].name == name for q in upstream.queries[before:])


# --------------------------------------------------------------------------- fuzzing with the flags on


@pytest.mark.slow
def test_mutated_packets_with_both_flags_on(tmp_path):
    """testsupport/fuzz.py's mutator and invariants on a resolver with --local-cluster, --reverse-cidr and
    round robin: nothing raises, every reply parses and carries the query's ID, UDP without EDNS fits 512."""
    import random

    from prometheus_client import CollectorRegistry

    from mcsdns.metrics import Metrics
    from mcsdns.serve.loadbalance import RoundRobinResolver
    from mcsdns.serve.resolve import Resolver
    from testsupport.inprocess import build_table
    from testsupport.fuzz import mutate, run_one, seed_queries
    from test_locality import documents as locality_documents

    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump_all(documents() + locality_documents()[1:]))
    table = build_table([FIXTURES / "contract.yaml", path], zones=(Z.rstrip("."),), local_cluster="west",
                        reverse_cidrs=CIDRS + ("10.40.0.0/16",))
    resolvers = (RoundRobinResolver(table), Resolver(table, forwarding=True))
    names = [dns.reversename.from_address(ip).to_text() for ip in ("10.50.1.1", "10.50.1.2", "fd00:50::10", "10.40.1.1")]
    names += [f"two.loc.svc.{Z}", f"_http._tcp.three.loc.svc.{Z}", "0.0.0.0.0.0.0.0.0.5.0.0.0.0.d.f.ip6.arpa.",
              "1.50.10.in-addr.arpa.", f"many.loc.svc.{Z}"]
    seeds = seed_queries() + [dns.message.make_query(n, t, use_edns=e).to_wire()
                              for n in names for t in ("PTR", "A", "SRV", "SOA", "NS") for e in (False, 0)]
    rng = random.Random(15)
    metrics = Metrics(CollectorRegistry())
    outcomes: dict[str, int] = {}
    for _ in range(30_000):
        query = mutate(rng, seeds)
        outcome = run_one(resolvers[rng.random() < 0.3], metrics, query, rng.random() < 0.2)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("NOERROR", 0) > 3000 and outcomes.get("NXDOMAIN", 0) > 300, outcomes


# --------------------------------------------------------------------------- behind CoreDNS


def example_blocks(dns_port: int, mcsdns: str) -> str:
    """The stub-zone server blocks of deploy/examples/coredns-reverse-stub-zone.yaml (all but `.:53`),
    on a loopback port, forwarding to `mcsdns` (HOST:PORT)."""
    corefile = yaml.safe_load((ROOT / "deploy/examples/coredns-reverse-stub-zone.yaml").read_text())["data"]["Corefile"]
    blocks, current = [], None
    for line in corefile.splitlines():
        if current is None and line.endswith("{") and not line.startswith((" ", ".:")):
            current = [line.replace(":53", f":{dns_port}"), "    bind 127.0.0.1"]
        elif current is not None:
            current.append(line.replace("MCSDNS_SERVICE_IP", mcsdns))
            if line == "}":
                blocks.append("\n".join(current))
                current = None
    assert len(blocks) == 2, corefile  # clusterset.local and the reverse zones
    return "\n".join(blocks) + "\n"


def test_the_example_stub_zones_reach_mcsdns_through_coredns(testbin, tmp_path, upstream):
    from compat.coredns import find_coredns
    from testsupport.testbed import Process, free_port

    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport", "metadata": {"name": "vip", "namespace": NS},
         "spec": {"type": "ClusterSetIP", "ips": ["10.112.0.5"], "ports": HTTP}},
        {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport", "metadata": {"name": "db", "namespace": NS},
         "spec": {"type": "Headless", "ports": HTTP}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv6",
         "metadata": {"name": "db-west", "namespace": NS, "labels": {
             "multicluster.kubernetes.io/service-name": "db", "multicluster.kubernetes.io/source-cluster": "west"}},
         "endpoints": [{"addresses": ["fd00:20::5"], "hostname": "db-0"}], "ports": HTTP},
    ]  # fmt: skip
    path = tmp_path / "stub.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    with ForwardingServer("--manifests", str(path), "--upstream", upstream.addr,
                "--reverse-cidr", "10.112.0.0/16", "--reverse-cidr", "fd00:20::/48") as server:
        port = free_port()
        (tmp_path / "Corefile").write_text(example_blocks(port, f"127.0.0.1:{server.dns_port}"))
        coredns = Process("coredns", [str(find_coredns()), "-conf", str(tmp_path / "Corefile")], tmp_path / "coredns.log")
        coredns.start()
        try:
            def ask_coredns(name: str, qtype: str = "PTR") -> dns.message.Message | None:
                try:
                    return dns.query.udp(dns.message.make_query(name, qtype), "127.0.0.1", port=port, timeout=1)
                except Exception:
                    return None

            reply = eventually(lambda: ask_coredns(dns.reversename.from_address("10.112.0.5").to_text()), 20,
                               what=lambda: f"CoreDNS answering\n{coredns.tail()}")
            assert targets(reply) == {f"vip.{NS}.svc.{Z}"}
            assert targets(ask_coredns(dns.reversename.from_address("fd00:20::5").to_text())) == {
                f"db-0.west.db.{NS}.svc.{Z}"}
            missing = ask_coredns(dns.reversename.from_address("10.112.9.9").to_text())
            assert missing.rcode() == dns.rcode.NXDOMAIN and soa_owner(missing) == "112.10.in-addr.arpa."
            assert [rd.address for rd in ask_coredns(f"vip.{NS}.svc.{Z}", "A").answer[0]] == ["10.112.0.5"]
        finally:
            coredns.stop()
