"""Project decision 12 in-process: never drop what CoreDNS serves.

Spellings CoreDNS accepts are served as CoreDNS serves them (a lower-case
protocol `tcp` answers `_tcp`, as its `matchPortAndProtocol` compares with
strings.EqualFold; a name that is a DNS label but not a DNS-1035 one, `1st`).
Only the part DNS cannot represent is left out -- a non-IP entry of
`spec.ips`, a port whose protocol is none of TCP/UDP/SCTP -- with one warning
and a count by reason. A name that cannot be a DNS label refuses the object.
"""

from __future__ import annotations

import logging
from pathlib import Path

import dns.message
import dns.rcode
import pytest
import yaml

from testsupport.cases import section_lines
from mcsdns.objects import InvalidObject, Port, convert
from mcsdns.serve.resolve import Resolver
from mcsdns.sources.manifests import ManifestSource
from mcsdns.store import Store
from testsupport.inprocess import ask, build_resolver

Z = "clusterset.local."
MCS = "multicluster.x-k8s.io/v1beta1"


def _import(name: str, ips: list, ports: list, kind: str = "ClusterSetIP") -> dict:
    return {"apiVersion": MCS, "kind": "ServiceImport", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"type": kind, "ips": ips, "ports": ports}}


OBJECTS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}},
    _import("lower", ["10.1.0.1"], [{"name": "http", "port": 80, "protocol": "tcp"},
                                    {"name": "DNS", "port": 53, "protocol": "Udp"}]),
    _import("1st", ["10.1.0.2"], [{"name": "http", "port": 80, "protocol": "TCP"}]),
    _import("badip", ["not-an-ip", "fd00::2"], [{"name": "http", "port": 80, "protocol": "TCP"}]),
    _import("icmp", ["10.1.0.3"], [{"name": "http", "port": 80, "protocol": "TCP"},
                                   {"name": "ping", "port": 7, "protocol": "ICMP"}]),
    _import("two.labels", ["10.1.0.4"], [{"name": "http", "port": 80, "protocol": "TCP"}]),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Resolver, list[str]]:
    path = Path(tmp_path_factory.mktemp("partial")) / "objects.yaml"
    path.write_text(yaml.safe_dump_all(OBJECTS))
    counted: list[str] = []
    return build_resolver([path], on_error=counted.append), counted


def test_lower_case_protocols_answer_srv_names_as_in_coredns(served) -> None:
    resolver, _ = served
    reply = ask(resolver, f"_http._tcp.lower.ns.svc.{Z}", "SRV")
    assert section_lines(reply.answer) == {f"_http._tcp.lower.ns.svc.{Z} 5 SRV 0 100 80 lower.ns.svc.{Z}"}
    reply = ask(resolver, f"_dns._udp.lower.ns.svc.{Z}", "SRV")  # name and protocol in any case
    assert section_lines(reply.answer) == {f"_dns._udp.lower.ns.svc.{Z} 5 SRV 0 100 53 lower.ns.svc.{Z}"}
    assert ask(resolver, f"_http._udp.lower.ns.svc.{Z}", "SRV").rcode() == dns.rcode.NXDOMAIN
    bare = ask(resolver, f"lower.ns.svc.{Z}", "SRV")
    assert section_lines(bare.answer) == {f"lower.ns.svc.{Z} 5 SRV 0 50 80 lower.ns.svc.{Z}",
                                          f"lower.ns.svc.{Z} 5 SRV 0 50 53 lower.ns.svc.{Z}"}


def test_a_dns_label_that_is_not_dns_1035_is_served(served) -> None:
    resolver, _ = served
    assert section_lines(ask(resolver, f"1st.ns.svc.{Z}", "A").answer) == {f"1st.ns.svc.{Z} 5 A 10.1.0.2"}


def test_a_non_ip_entry_of_spec_ips_is_left_out_alone(served) -> None:
    resolver, _ = served
    assert section_lines(ask(resolver, f"badip.ns.svc.{Z}", "AAAA").answer) == {f"badip.ns.svc.{Z} 5 AAAA fd00::2"}
    a = ask(resolver, f"badip.ns.svc.{Z}", "A")
    assert a.rcode() == dns.rcode.NOERROR and not a.answer and a.authority  # NODATA: no IPv4 left


def test_a_port_no_srv_can_carry_loses_only_its_srv(served) -> None:
    """ICMP: the port counts for the addresses and the SRV weights as in CoreDNS, has no SRV and no name."""
    resolver, _ = served
    assert section_lines(ask(resolver, f"icmp.ns.svc.{Z}", "A").answer) == {f"icmp.ns.svc.{Z} 5 A 10.1.0.3"}
    bare = ask(resolver, f"icmp.ns.svc.{Z}", "SRV")
    assert section_lines(bare.answer) == {f"icmp.ns.svc.{Z} 5 SRV 0 50 80 icmp.ns.svc.{Z}"}
    assert ask(resolver, f"_ping._icmp.icmp.ns.svc.{Z}", "SRV").rcode() == dns.rcode.NXDOMAIN


def test_only_a_name_that_cannot_be_a_label_refuses_the_import(served) -> None:
    resolver, counted = served
    assert ask(resolver, f"two.labels.ns.svc.{Z}", "A").rcode() == dns.rcode.NXDOMAIN
    with pytest.raises(InvalidObject, match=r"metadata.name 'two.labels' cannot be a DNS label"):
        convert(OBJECTS[-1])
    # One count per part left out or object refused, by reason.
    assert sorted(counted) == ["metadata.name", "spec.ips", "spec.ports"]


def test_omissions_are_named_in_one_warning_per_object(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(_import("many", ["x", "y"], [{"port": 1, "protocol": "ICMP"}, {"port": 70000}])))
    counted: list[str] = []
    with caplog.at_level(logging.WARNING):
        ManifestSource([path], Store(), on_error=counted.append).load()
    lines = [r.getMessage() for r in caplog.records if "served without" in r.getMessage()]
    assert len(lines) == 1 and "ServiceImport ns/many" in lines[0]
    for part in ("spec.ips[0]: 'x'", "spec.ips[1]: 'y'", "spec.ports[0].protocol: 'ICMP'", "spec.ports[1].port: 70000"):
        assert part in lines[0]
    assert sorted(counted) == ["spec.ips", "spec.ips", "spec.ports", "spec.ports"]


def test_spellings_are_kept_as_written() -> None:
    """Record what was written; compile compares case-insensitively, as CoreDNS does."""
    imp = convert(OBJECTS[1])
    assert imp.ports == (Port(80, "http", "tcp"), Port(53, "DNS", "Udp")) and not imp.omitted
    weird = convert(_import("w", [], [{"name": "a b", "port": 9, "protocol": "TCP"}], kind="headless"))
    assert not weird.headless  # as CoreDNS: only `Headless` exactly is headless
    assert weird.ports == (Port(9, "", "TCP"),)  # a name no question can spell: an unnamed port
    assert len(weird.omitted) == 2


def test_more_ips_than_the_mcs_api_crd_allows_are_served_up_to_a_bound() -> None:
    """One IP per source cluster (the AWS Cloud Map controller's shape): all served, as CoreDNS serves
    them (tests/compat/test_implementations.py checks three against a real CoreDNS); beyond 256, a
    manifest's YAML alias at most, the rest is left out with a note and the import still serves."""
    three = convert(_import("three", ["10.0.0.1", "10.0.0.2", "10.0.0.3"], [{"port": 80, "protocol": "TCP"}]))
    assert three.ips == ("10.0.0.1", "10.0.0.2", "10.0.0.3") and not three.omitted
    many = convert(_import("many", [f"10.1.{i // 256}.{i % 256}" for i in range(1000)], [{"port": 80, "protocol": "TCP"}]))
    assert len(many.ips) == 256 and many.ips[-1] == "10.1.0.255"
    assert many.omitted == ("spec.ips: 1000 entries; those after the first 256 are left out",)


def test_port_lists_shared_between_objects_keep_each_objects_notes_and_errors() -> None:
    """The same port list converts once and is shared (objects._ports), but what an object is told about
    its ports (a note, a refusal) is told every time, whatever was converted before."""
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "dns", "port": 53, "protocol": "UDP"}]
    first, second = convert(_import("one", ["10.1.0.1"], ports)), convert(_import("two", ["10.1.0.2"], [dict(p) for p in ports]))
    assert first.ports == (Port(80, "http", "TCP"), Port(53, "dns", "UDP")) and second.ports is first.ports

    noted = [{"name": "x", "port": 81, "protocol": "HTTP"}]
    for name in ("three", "four"):  # the note is each object's own: not lost to a kept list
        obj = convert(_import(name, ["10.1.0.3"], noted))
        assert obj.ports == (Port(-1),) and any("spec.ports[0].protocol" in note for note in obj.omitted), name

    convert(_import("five", ["10.1.0.5"], [{"name": "one", "port": 1, "protocol": "TCP"}]))
    for bad in ({"name": "one", "port": True, "protocol": "TCP"},  # True == 1, but no port number
                {"name": 1, "port": 1, "protocol": "TCP"}, {"name": "one", "port": 1.0, "protocol": "TCP"}):
        with pytest.raises(InvalidObject, match=r"spec\.ports\[0\]"):
            convert(_import("six", ["10.1.0.6"], [bad]))
