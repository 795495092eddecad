"""Asking a running server's /imports and /explain, and holding /explain to its DNS reply.

Shared by tests/test_discovery.py (manifests) and tests/test_kube_discovery.py
(the real kube-apiserver), which run the same contract cases through both.
"""

from __future__ import annotations

import json

import dns.rcode
import dns.rrset

from testsupport.cases import Case, check, expected_lines, section_lines
from testsupport.mcsdnsserver import McsdnsServer

# What the reason of some contract cases must say (served with --namespaces testns): the cause a user looks for.
REASONS = {
    "1": "from ServiceImport testns/svc1 (ClusterSetIP): its spec.ips 10.0.0.1",
    "6": "port http/tcp 80",  # the fixture writes protocols as CoreDNS's handler_test does
    "8": "from ServiceImport testns/hdls1 (Headless): the ready endpoints of EndpointSlice(s)",
    "10": "but has no IPv6 address",
    "12": "no ServiceImport svc0 in namespace testns",
    "13": "namespace svc-nons is not served: --namespaces lists only testns",
    "14": "schema version",
    "19": "no ready endpoint named bogusendpoint in cluster cluster1",
    "20": "no ServiceImport svc0 in namespace testns",
    "26": "namespace testns exists",
    "29": "not a name this zone holds",
    "41": "a per-endpoint name needs its cluster",
    "43": "from endpoint 172-0-0-2 of cluster cluster1 in EndpointSlice testns/",
    "47": "no namespace nsnoexist",
    "49": "the zone's own SOA record",
    "D6a": "has no port named https with protocol tcp (its ports: http/tcp 80)",
    "D6b": "has no port named http with protocol udp",
    "D22": "pod records are not served",
    "D23": "namespace unexposedns is not served",
    "kubedns-ns": "namespace kube-system is not served",
}


def get_json(server: McsdnsServer, path: str) -> tuple[int, dict]:
    status, body = server.http(path)
    assert status, f"no HTTP reply for {path}"
    return status, json.loads(body)


def explain(server: McsdnsServer, name: str, qtype: str = "A") -> dict:
    status, doc = get_json(server, f"/explain?name={name}&type={qtype}")
    assert status == 200, (name, qtype, doc)
    return doc


def imports(server: McsdnsServer) -> dict:
    status, doc = get_json(server, "/imports")
    assert status == 200, doc
    return doc


def zone_lines(lines: list[str]) -> set[str]:
    """/explain's zone-file lines in the normal form cases.section_lines gives a DNS section."""
    rrsets = []
    for line in lines:
        owner, ttl, rdclass, rdtype, rdata = line.split(" ", 4)
        rrsets.append(dns.rrset.from_text(owner, int(ttl), rdclass, rdtype, rdata))
    return section_lines(rrsets)


def assert_explain_agrees(server: McsdnsServer, c: Case) -> dict:
    """Ask `c` through DNS and /explain: same rcode and records, both the contract's; returns the explanation."""
    reply = server.query(c.qname, c.qtype, use_edns=0)
    check(c, reply)
    doc = explain(server, c.qname, c.qtype)
    assert doc["rcode"] == dns.rcode.to_text(reply.rcode()), (c.id, doc)
    assert zone_lines(doc["answer"]) == section_lines(reply.answer) == expected_lines(c.answer), (c.id, doc)
    assert zone_lines(doc["additional"]) == section_lines(reply.additional), (c.id, doc)
    assert doc["reason"], (c.id, doc)
    if c.id in REASONS:
        assert REASONS[c.id] in doc["reason"], (c.id, doc["reason"])
    return doc

