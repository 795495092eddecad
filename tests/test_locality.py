"""`--local-cluster` (issue 15): the same answers, the local cluster's endpoints first, SRV priorities 0/10.

Real `mcsdns serve` processes on the same manifests, queried over UDP and TCP with dnspython:
one without any flag (CoreDNS's answers), one with `--local-cluster west`, one with it and
`--loadbalance round_robin`, one with `--local-cluster auto` reading the ClusterProperty from the
manifests. Each answer of the flagged servers is compared with the flag-free server's: the
same records (and, where locality does not apply, the same bytes), only the order and the SRV
priorities differ, exactly as documented in docs/locality-and-reverse.md.
"""

from __future__ import annotations

import struct
from pathlib import Path

import dns.flags
import dns.message
import dns.rdatatype
import pytest
import yaml

from testsupport.cases import Z
from testsupport.objects import endpoint, endpoint_slice, service_import
from testsupport.mcsdnsserver import McsdnsServer, ask, exchange, order
from testsupport.polling import eventually
from testsupport.mcsdnsserver import record_sets as unordered

NS = "loc"
HTTP = [{"name": "http", "protocol": "TCP", "port": 80}]
# service -> cluster -> [(ip, hostname, ready)]
CLUSTERS = {
    "two": {"east": [("10.40.1.1", "e-0", True), ("10.40.1.2", "e-1", True), ("10.40.1.3", "e-2", True),
                     ("10.40.1.9", "e-9", False), ("fd00:40:1::1", "e6-0", True)],
            "west": [("10.40.2.1", "w-0", True), ("10.40.2.2", "w-1", True), ("fd00:40:2::1", "w6-0", True),
                     ("fd00:40:2::2", "w6-1", True)]},
    "three": {"east": [("10.41.1.1", "e-0", True), ("10.41.1.2", "e-1", True)],
              "north": [("10.41.3.1", "n-0", True), ("10.41.3.2", "n-1", True), ("10.41.3.3", "n-2", True)],
              "west": [("10.41.2.1", "w-0", True), ("10.41.2.2", "w-1", True)]},
    # The same two addresses in the same order (so the same compiled bytes), local/remote split differently.
    "pair": {"west": [("10.46.0.1", "w-0", True)], "east": [("10.46.0.2", "e-0", True)]},
    "twin": {"west": [("10.46.0.1", "w-0", True), ("10.46.0.2", "w-1", True)]},
    # More addresses than 512 bytes hold: a truncated reply keeps the local ones.
    "many": {"east": [(f"10.44.1.{i}", f"e-{i}", True) for i in range(1, 41)],
             "west": [(f"10.44.2.{i}", f"w-{i}", True) for i in range(1, 41)]},
}  # fmt: skip


def slice_doc(service: str, cluster: str | None, endpoints: list[tuple[str, str, bool]], family: str) -> dict:
    v6 = family == "IPv6"
    return endpoint_slice(NS, f"{service}-{cluster or 'x'}-{family.lower()}", service, cluster,
                          [endpoint([ip], host, ready) for ip, host, ready in endpoints if (":" in ip) == v6],
                          address_type=family, ports=HTTP)


def import_doc(name: str, headless: bool, ips: list[str] | None = None) -> dict:
    return service_import(NS, name, ips or None, headless=headless, ports=HTTP)


def cluster_property(value: str) -> dict:
    return {"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
            "metadata": {"name": "cluster.clusterset.k8s.io"}, "spec": {"value": value}}


def documents() -> list[dict]:
    docs: list[dict] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}]
    for service, clusters in CLUSTERS.items():
        docs.append(import_doc(service, True))
        for cluster, endpoints in clusters.items():
            for family in ("IPv4", "IPv6"):
                if any((":" in ip) == (family == "IPv6") for ip, _, _ in endpoints):
                    docs.append(slice_doc(service, cluster, endpoints, family))
    # A slice without a cluster id (decision 4) counts as remote: never before the local cluster's.
    docs.append(import_doc("mixed", True))
    docs.append(slice_doc("mixed", None, [("10.43.0.1", "x-0", True), ("10.43.0.2", "x-1", True)], "IPv4"))
    docs.append(slice_doc("mixed", "west", [("10.43.2.1", "w-0", True)], "IPv4"))
    # A ClusterSetIP service with endpoint slices: its answers never change (one VIP).
    docs.append(import_doc("vip", False, ["10.42.0.1", "fd00:42::1"]))
    docs.append(slice_doc("vip", "east", [("10.42.1.1", "e-0", True)], "IPv4"))
    docs.append(slice_doc("vip", "west", [("10.42.2.1", "w-0", True)], "IPv4"))
    return docs


def local_ips(service: str, cluster: str, v6: bool = False) -> set[str]:
    return {ip for ip, _, ready in CLUSTERS[service].get(cluster, []) if ready and (":" in ip) == v6}


def all_ips(service: str, v6: bool = False) -> set[str]:
    return {ip for c in CLUSTERS[service] for ip in local_ips(service, c, v6)}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("locality") / "loc.yaml"
    path.write_text(yaml.safe_dump_all(documents()))
    return path


@pytest.fixture(scope="module")
def plain(manifests):
    with McsdnsServer("--manifests", str(manifests)) as s:
        yield s


@pytest.fixture(scope="module")
def west(manifests):
    with McsdnsServer("--manifests", str(manifests), "--local-cluster", "west") as s:
        yield s


@pytest.fixture(scope="module")
def west_rr(manifests):
    with McsdnsServer("--manifests", str(manifests), "--local-cluster", "west", "--loadbalance", "round_robin") as s:
        yield s


def srv(reply: dns.message.Message) -> list[tuple[int, int, int, str]]:
    return [(rd.priority, rd.weight, rd.port, rd.target.to_text()) for rrset in reply.answer for rd in rrset]


def exact(server: McsdnsServer, wire: bytes, tcp: bool = False) -> bytes:
    """The reply's bytes as sent, the SOA serial (if any) zeroed."""
    data = exchange(server, wire, tcp)
    msg = dns.message.from_wire(data)
    if msg.authority or any(r.rdtype == dns.rdatatype.SOA for r in msg.answer):
        for rrset in msg.answer + msg.authority:
            if rrset.rdtype == dns.rdatatype.SOA:
                serial = struct.pack(">I", rrset[0].serial)
                at = data.rindex(serial)
                data = data[:at] + b"\0\0\0\0" + data[at + 4 :]
    return data


# --------------------------------------------------------------------------- ordering


@pytest.mark.parametrize("how", ["udp", "udp512", "tcp"])
@pytest.mark.parametrize("service, qtype", [("two", "A"), ("two", "AAAA"), ("three", "A")])
def test_local_addresses_lead_the_same_set(plain, west, service, qtype, how):
    name = f"{service}.{NS}.svc.{Z}"
    v6 = qtype == "AAAA"
    reference = ask(plain, name, qtype, how)
    for _ in range(3):
        got = ask(west, name, qtype, how)
        assert unordered(got) == unordered(reference)  # the same records, flags, rcode and sections
        local = local_ips(service, "west", v6)
        assert set(order(got)[: len(local)]) == local, order(got)
        assert set(order(got)[len(local) :]) == all_ips(service, v6) - local


def test_three_clusters_local_first_whatever_the_id_case(manifests, plain):
    name = f"three.{NS}.svc.{Z}"
    with McsdnsServer("--manifests", str(manifests), "--local-cluster", "North") as north:
        got = ask(north, name, "A")
        assert unordered(got) == unordered(ask(plain, name, "A"))
        assert set(order(got)[:3]) == local_ips("three", "north")
        priorities = {target.split(".")[1]: p for p, _, _, target in srv(ask(north, name, "SRV"))}
        assert priorities == {"north": 0, "east": 10, "west": 10}


@pytest.mark.parametrize("service", ["two", "three"])
@pytest.mark.parametrize("prefix", ["", "_http._tcp."])
@pytest.mark.parametrize("how", ["udp", "tcp"])
def test_srv_priorities_local_0_remote_10(plain, west, service, prefix, how):
    name = f"{prefix}{service}.{NS}.svc.{Z}"
    reference = ask(plain, name, "SRV", how)
    got = ask(west, name, "SRV", how)
    assert unordered(got) == unordered(reference)  # same targets, weights, ports, glue
    assert all(p == 0 for p, _, _, _ in srv(reference))  # without the flag: CoreDNS's priority 0
    records = srv(got)
    for priority, _, _, target in records:
        assert priority == (0 if target.split(".")[1] == "west" else 10), records
    assert [p for p, *_ in records] == sorted(p for p, *_ in records)  # the local ones first
    # The glue follows the same order: the local cluster's addresses first.
    glue = [r.name.to_text().split(".")[1] for r in got.additional if r.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)]
    assert glue == sorted(glue, key=lambda c: c != "west")


def test_per_endpoint_srv_priority_by_its_cluster(plain, west):
    for host, cluster, priority in (("w-0", "west", 0), ("e-0", "east", 10)):
        name = f"{host}.{cluster}.two.{NS}.svc.{Z}"
        got = ask(west, name, "SRV")
        assert unordered(got) == unordered(ask(plain, name, "SRV"))
        assert [p for p, *_ in srv(got)] == [priority]


def test_slice_without_cluster_id_is_not_local(plain, west):
    name = f"mixed.{NS}.svc.{Z}"
    got = ask(west, name, "A")
    assert unordered(got) == unordered(ask(plain, name, "A"))
    assert order(got)[0] == "10.43.2.1"


def test_answers_locality_does_not_touch_are_byte_for_byte_unchanged(plain, west):
    """ClusterSetIP (one VIP), negative answers, the apex, names of one cluster: the same bytes."""
    names = [
        (f"vip.{NS}.svc.{Z}", "A"), (f"vip.{NS}.svc.{Z}", "AAAA"), (f"vip.{NS}.svc.{Z}", "SRV"),
        (f"_http._tcp.vip.{NS}.svc.{Z}", "SRV"), (f"e-0.east.vip.{NS}.svc.{Z}", "A"),
        (f"w-0.west.two.{NS}.svc.{Z}", "A"), (f"e-0.east.two.{NS}.svc.{Z}", "A"),
        (f"nothere.{NS}.svc.{Z}", "A"), (f"two.{NS}.svc.{Z}", "TXT"), (f"{NS}.svc.{Z}", "A"),
        (Z, "SOA"), (Z, "NS"), (f"two.{NS}.svc.{Z}", "MX"), (f"e-9.east.two.{NS}.svc.{Z}", "A"),
    ]  # fmt: skip
    for name, qtype in names:
        for tcp in (False, True):
            wire = dns.message.make_query(name, qtype, id=4242, use_edns=0, payload=1232).to_wire()
            assert exact(west, wire, tcp) == exact(plain, wire, tcp), (name, qtype, tcp)


def test_truncated_reply_keeps_local_addresses(plain, west):
    name = f"many.{NS}.svc.{Z}"
    got = ask(west, name, "A", "udp512")
    assert got.flags & dns.flags.TC
    kept = order(got)
    assert 0 < len(kept) < 40 and set(kept) <= local_ips("many", "west")  # ~29 fit in 512 bytes
    full = ask(west, name, "A", "tcp")
    assert unordered(full) == unordered(ask(plain, name, "A", "tcp"))
    assert set(order(full)[:40]) == local_ips("many", "west")


# --------------------------------------------------------------------------- with round robin


@pytest.mark.parametrize("how", ["udp", "udp512", "tcp"])
@pytest.mark.parametrize("service, qtype", [("two", "A"), ("two", "AAAA"), ("three", "A")])
def test_round_robin_rotates_within_each_group(plain, west_rr, service, qtype, how):
    name = f"{service}.{NS}.svc.{Z}"
    v6 = qtype == "AAAA"
    local, remote = local_ips(service, "west", v6), all_ips(service, v6) - local_ips(service, "west", v6)
    reference = unordered(ask(plain, name, qtype, how))
    replies = [ask(west_rr, name, qtype, how) for _ in range(2 * max(len(local), len(remote)) + 2)]
    for reply in replies:
        assert unordered(reply) == reference
        got = order(reply)
        assert set(got[: len(local)]) == local, got  # never a remote address before a local one
    # Each group rotates: every local address leads the answer, every remote one leads the remote group.
    assert {order(r)[0] for r in replies} == local
    assert {order(r)[len(local)] for r in replies} == remote


def test_round_robin_truncated_rotates_the_local_group(west_rr):
    kept = [order(ask(west_rr, f"many.{NS}.svc.{Z}", "A", "udp512")) for _ in range(45)]
    assert all(set(k) <= local_ips("many", "west") for k in kept)
    assert {k[0] for k in kept} == local_ips("many", "west")


def test_round_robin_keeps_each_services_groups_apart(west_rr):
    """`pair` and `twin` compile to the same bytes; only `pair` has a remote address, which never leads."""
    leaders = {"pair": set(), "twin": set()}
    for _ in range(6):
        for service in ("twin", "pair"):
            leaders[service].add(order(ask(west_rr, f"{service}.{NS}.svc.{Z}", "A"))[0])
    assert leaders == {"pair": {"10.46.0.1"}, "twin": {"10.46.0.1", "10.46.0.2"}}


def test_round_robin_srv_order_is_stable(west_rr):
    name = f"three.{NS}.svc.{Z}"
    assert len({tuple(srv(ask(west_rr, name, "SRV"))) for _ in range(6)}) == 1


# --------------------------------------------------------------------------- auto


def test_auto_follows_the_cluster_property_in_the_manifests(tmp_path, plain):
    name = f"two.{NS}.svc.{Z}"
    path = tmp_path / "loc.yaml"
    path.write_text(yaml.safe_dump_all(documents() + [cluster_property("east")]))
    with McsdnsServer("--manifests", str(path), "--local-cluster", "auto") as auto:
        reference = unordered(ask(plain, name, "A"))
        first = ask(auto, name, "A")
        assert unordered(first) == reference
        assert set(order(first)[:3]) == local_ips("two", "east")

        path.write_text(yaml.safe_dump_all(documents() + [cluster_property("west")]))
        eventually(lambda: set(order(ask(auto, name, "A"))[:2]) == local_ips("two", "west"), 10,
                   what="west first after the ClusterProperty changed")
        priorities = {t.split(".")[1]: p for p, _, _, t in srv(ask(auto, name, "SRV"))}
        assert priorities == {"west": 0, "east": 10}

        # Without a ClusterProperty: no local cluster, the flag-free answers.
        path.write_text(yaml.safe_dump_all(documents()))
        eventually(lambda: order(ask(auto, name, "A")) == order(ask(plain, name, "A")), 10,
                   what="the flag-free order once the ClusterProperty is gone")
        assert srv(ask(auto, name, "SRV")) == srv(ask(plain, name, "SRV"))
        assert "local cluster (ClusterProperty cluster.clusterset.k8s.io) is now unknown" in auto.log()


@pytest.mark.parametrize("value", ["bad id!", "-west", "x" * 64, ""])
def test_bad_local_cluster_exits_2_naming_the_flag(value):
    import subprocess
    import sys

    from testsupport.mcsdnsserver import ROOT

    proc = subprocess.run([sys.executable, "-m", "mcsdns", "serve", f"--local-cluster={value}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "--local-cluster must be auto or a cluster id" in proc.stderr and repr(value) in proc.stderr
