"""What the differential suite found mcsdns doing differently from CoreDNS, pinned in-process
(no testbed needed), so the fixes stay fixed wherever the kube tests cannot run.

See docs/compatibility.md, "Differences found by the suite and fixed in mcsdns".
"""

from __future__ import annotations

from pathlib import Path

import dns.flags
import dns.message
import dns.name
import pytest
import yaml

from mcsdns.serve.resolve import Resolver
from testsupport.inprocess import ask, build_resolver

from .generator import endpoint, endpoint_slice, namespace, service_import

ZONE = "clusterset.local."
HTTP = [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "alt", "port": 8080, "protocol": "TCP"}]


@pytest.fixture(scope="module")
def resolver(tmp_path_factory: pytest.TempPathFactory) -> Resolver:
    objects = [
        namespace("ns"),
        service_import("ns", "dotted", headless=True, ports=[]),
        endpoint_slice("ns", "dotted-eu", "dotted", "eu.prod", [endpoint(["10.1.0.1"], "h")], ports=HTTP[:1]),
        service_import("ns", "ui", headless=True, ports=[]),
        endpoint_slice("ns", "ui-west", "ui", "west", [endpoint(["10.2.0.1"]), endpoint(["10.2.0.2"], "x1"), endpoint(["10.2.0.3"], "dup")], ports=HTTP),
        service_import("ns", "vip", ["10.3.0.1"], ports=HTTP[:1]),
    ]
    path = Path(tmp_path_factory.mktemp("regressions")) / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return build_resolver([path])


def test_cluster_id_with_dots_spans_labels_in_srv_targets(resolver: Resolver) -> None:
    """CoreDNS joins strings: `h.eu.prod.dotted...` has two labels for the cluster id."""
    reply = ask(resolver, f"dotted.ns.svc.{ZONE}", "SRV")
    (srv,) = reply.answer[0]
    assert srv.target == dns.name.from_text(f"h.eu.prod.dotted.ns.svc.{ZONE}")
    assert srv.target.labels[1:3] == (b"eu", b"prod")
    assert reply.additional[0].name == srv.target


def test_glue_owners_point_at_the_srv_targets(resolver: Resolver) -> None:
    """As miekg/dns compresses them: every glue owner is a 2-byte pointer, so the reply has
    exactly the size CoreDNS's has, and fits (or truncates) at the same limits."""
    qname = f"_._tcp.ui.ns.svc.{ZONE}"
    query = dns.message.make_query(qname, "SRV", use_edns=False)
    wire = resolver.handle(query.to_wire(), False)  # the bytes: their size is what is checked
    reply = dns.message.from_wire(wire)
    assert not reply.flags & dns.flags.TC
    srvs = [rd for rrset in reply.answer for rd in rrset]
    glue = [rd for rrset in reply.additional for rd in rrset]
    assert len(srvs) == 6 and len(glue) == 3
    question = len(dns.name.from_text(qname).to_wire()) + 4
    expected = 12 + question + sum(2 + 10 + 6 + len(rd.target.to_wire()) for rd in srvs) + len(glue) * (2 + 10 + 4)
    assert len(wire) == expected


def test_edns_payload_below_512_is_echoed_as_sent(resolver: Resolver) -> None:
    """CoreDNS echoes the client's size in the reply's OPT even below 512 (and truncates at 512)."""
    q = dns.message.make_query(f"vip.ns.svc.{ZONE}", "A", use_edns=0, payload=256)
    reply = ask(resolver, q)
    assert reply.edns == 0 and reply.payload == 256
    assert [rd.address for rrset in reply.answer for rd in rrset] == ["10.3.0.1"]
