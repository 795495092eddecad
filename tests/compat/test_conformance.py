"""The DNS checks of the mcs-api conformance suite (v0.5.0, contract section 7), on the testbed.

The objects are what the conformance environment leaves in the API after its
setup (Service `hello` with ports tcp/42 and udp/42, its export imported as a
ServiceImport, the MCS EndpointSlices an MCS controller copies from cluster 0),
each spec in its own namespace as the suite does. The checks query the way the
suite's `nslookup` does (UDP, TCP on truncation, a trailing-dot name) and apply
its pass conditions, polling for up to 20 s like its `Eventually`.

They run against mcsdns, and against the CoreDNS of the differential suite as
well, which shows that the checks themselves hold for the reference.
"""

from __future__ import annotations

import ipaddress
import random
import time
from dataclasses import dataclass

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from .harness import World
from .generator import endpoint, endpoint_slice, namespace, service_import

pytestmark = pytest.mark.kube

DOMAIN = "clusterset.local"
CLUSTER = "cluster-a"  # source-cluster of cluster 0, the exporting cluster
EVENTUALLY = 20.0
PORTS = [{"name": "tcp", "port": 42, "protocol": "TCP"}, {"name": "udp", "port": 42, "protocol": "UDP"}]


def local_service(ns: str, *, headless: bool) -> dict:
    """The plain Service `hello` of the conformance suite (its own cluster's view)."""
    spec = {"ports": [{"name": "tcp", "port": 42, "protocol": "TCP"}, {"name": "udp", "port": 42, "protocol": "UDP"}],
            "selector": {"app": "hello"}, "sessionAffinity": "ClientIP"}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hello", "namespace": ns}, "spec": spec}


def local_slice(ns: str, name: str, family: str, endpoints: list[dict]) -> dict:
    """cluster 0's own EndpointSlice for `hello` (what the headless spec compares against)."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"kubernetes.io/service-name": "hello",
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": family, "endpoints": endpoints, "ports": PORTS}


def mcs_copy(local: dict, name: str) -> dict:
    """The MCS EndpointSlice an MCS controller derives from a local one."""
    return endpoint_slice(local["metadata"]["namespace"], name, "hello", CLUSTER, local["addressType"],
                          local["endpoints"], local["ports"])


@dataclass
class Scenario:
    clusterip_ns: str
    clusterip_ips: list[str]
    headless_ns: str
    headless_local: list[dict]
    statefulset_ns: str
    statefulset_slice: dict
    unexported_ns: str


@pytest.fixture(scope="module")
def scenario(world: World) -> Scenario:
    rng = random.Random(1645)
    suffix = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(5))
    ns = {kind: f"mcs-conformance-{kind}-{suffix}" for kind in ("clusterip", "headless", "sts", "unexported")}
    for name in ns.values():
        world.apply(namespace(name))

    # ClusterSetIP: Service + ServiceImport with a VIP per family + cluster 0's endpoints.
    ips = ["10.96.42.1", "fd00:42::1"]
    world.apply(local_service(ns["clusterip"], headless=False))
    world.apply(service_import(ns["clusterip"], "hello", "ClusterSetIP", ips, PORTS, ["IPv4", "IPv6"]))
    world.apply(endpoint_slice(ns["clusterip"], "hello-cluster-a", "hello", CLUSTER, "IPv4",
                               [endpoint(["10.42.0.1"]), endpoint(["10.42.0.2"])], PORTS))

    # Headless: 2 ready replicas per family (plus a pod that is not ready), no hostnames.
    world.apply(local_service(ns["headless"], headless=True))
    world.apply(service_import(ns["headless"], "hello", "Headless", None, PORTS, ["IPv4", "IPv6"]))
    v4 = local_slice(ns["headless"], "hello-abcde", "IPv4",
                     [endpoint(["10.42.1.1"], ready=True), endpoint(["10.42.1.2"], ready=None),
                      endpoint(["10.42.1.3"], ready=False, serving=True, terminating=True)])
    v6 = local_slice(ns["headless"], "hello-fghij", "IPv6",
                     [endpoint(["fd00:42:1::1"], ready=True), endpoint(["fd00:42:1::2"], ready=True),
                      endpoint(["fd00:42:1::3"], ready=False)])
    for local in (v4, v6):
        world.apply(local)
        world.apply(mcs_copy(local, f"hello-{CLUSTER}-{local['addressType'].lower()}"))

    # StatefulSet hello-ss behind the headless service: endpoints with hostnames.
    world.apply(local_service(ns["sts"], headless=True))
    world.apply(service_import(ns["sts"], "hello", "Headless", None, PORTS, ["IPv4"]))
    sts = endpoint_slice(ns["sts"], f"hello-{CLUSTER}", "hello", CLUSTER, "IPv4",
                         [endpoint(["10.42.2.1"], "hello-ss-0"), endpoint(["10.42.2.2"], "hello-ss-1", ready=None)],
                         PORTS)
    world.apply(sts)

    # Not exported: a plain Service `hello`, no ServiceImport.
    world.apply(local_service(ns["unexported"], headless=False))
    world.refresh()
    return Scenario(ns["clusterip"], ips, ns["headless"], [v4, v6], ns["sts"], sts, ns["unexported"])


@pytest.fixture(params=["mcsdns", "coredns"])
def port(request: pytest.FixtureRequest, world: World) -> int:
    """The DNS port of the server under test (all namespaces exposed)."""
    return world.mcsdns_all.dns_port if request.param == "mcsdns" else world.coredns.port


def lookup(port: int, name: str, rdtype: str) -> dns.message.Message:
    """Like `nslookup -type=T name.`: UDP, then TCP if the reply is truncated."""
    q = dns.message.make_query(name, rdtype)
    reply, _ = dns.query.udp_with_fallback(q, "127.0.0.1", port=port, timeout=2)
    return reply


def records(reply: dns.message.Message, rdtype: str) -> list:
    return [rd for rrset in reply.answer if rrset.rdtype == dns.rdatatype.from_text(rdtype) for rd in rrset]


def eventually(check, what: str):
    """The suite's Eventually(..., 20s, 1s), polling faster."""
    deadline = time.monotonic() + EVENTUALLY
    while True:
        ok, detail = check()
        if ok:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {EVENTUALLY:.0f}s; last: {detail}")
        time.sleep(0.2)


def fqdn(ns: str) -> str:
    return f"hello.{ns}.svc.{DOMAIN}."


def family(ip: str) -> str:
    return "AAAA" if ipaddress.ip_address(ip).version == 6 else "A"


def test_clusterip_name_resolves_to_each_clusterset_ip(scenario: Scenario, port: int) -> None:
    """clusterip_service_dns.go: for each ServiceImport IP, A/AAAA of the name contains it."""
    for ip in scenario.clusterip_ips:
        def check(ip=ip):
            got = [rd.address for rd in records(lookup(port, fqdn(scenario.clusterip_ns), family(ip)), family(ip))]
            return ip in got, got
        eventually(check, f"{fqdn(scenario.clusterip_ns)} {family(ip)} contains {ip}")


def test_clusterip_srv_returns_exactly_one_record(scenario: Scenario, port: int) -> None:
    """Ports tcp/42 and udp/42: one SRV, port 42, target the service name."""
    def check():
        srv = records(lookup(port, fqdn(scenario.clusterip_ns), "SRV"), "SRV")
        found = [(rd.port, rd.target.to_text().rstrip(".").lower()) for rd in srv]
        return found == [(42, fqdn(scenario.clusterip_ns).rstrip("."))], found
    eventually(check, f"{fqdn(scenario.clusterip_ns)} SRV has exactly one record")


def _ready(local: dict) -> list[str]:
    return sorted(a for ep in local["endpoints"] if (ep.get("conditions") or {}).get("ready") is not False
                  for a in ep["addresses"])


def test_headless_name_returns_exactly_the_ready_addresses(scenario: Scenario, port: int) -> None:
    """headless_service_dns.go: per family, the sorted addresses equal cluster 0's ready ones."""
    for local in scenario.headless_local:
        rdtype = "AAAA" if local["addressType"] == "IPv6" else "A"
        want = _ready(local)

        def check(rdtype=rdtype, want=want):
            got = sorted(rd.address for rd in records(lookup(port, fqdn(scenario.headless_ns), rdtype), rdtype))
            return got == want, got
        eventually(check, f"{fqdn(scenario.headless_ns)} {rdtype} == {want}")


def test_statefulset_hostname_names_resolve_to_their_endpoint(scenario: Scenario, port: int) -> None:
    """<hostname>.<clusterid>.<service>.<ns>.svc.<domain> resolves to that endpoint's addresses."""
    sl = scenario.statefulset_slice
    cluster = sl["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"]
    for ep in sl["endpoints"]:
        name = f"{ep['hostname']}.{cluster}.hello.{scenario.statefulset_ns}.svc.{DOMAIN}."

        def check(name=name, want=sorted(ep["addresses"])):
            got = sorted(rd.address for rd in records(lookup(port, name, "A"), "A"))
            return got == want, got
        eventually(check, f"{name} A == {ep['addresses']}")


def test_headless_srv_has_one_record_per_endpoint_and_family(scenario: Scenario, port: int) -> None:
    """Exactly #endpoints x #families SRV records; each endpoint's host name starts a target; port 42."""
    hosts = [a.replace(".", "-") if "." in a else a.replace(":", "-")
             for local in scenario.headless_local for a in _ready(local)]

    def check():
        srv = records(lookup(port, fqdn(scenario.headless_ns), "SRV"), "SRV")
        targets = [rd.target.to_text().lower() for rd in srv]
        ok = (len(srv) == len(hosts) and all(rd.port == 42 for rd in srv)
              and all(any(t.startswith(h) for t in targets) for h in hosts))
        return ok, [(rd.port, t) for rd, t in zip(srv, targets)]
    eventually(check, f"{fqdn(scenario.headless_ns)} SRV: one per endpoint and family ({len(hosts)})")


def test_service_that_is_not_exported_does_not_resolve(scenario: Scenario, port: int) -> None:
    """A plain Service `hello` without a ServiceImport: no clusterset.local name (NXDOMAIN)."""
    name = fqdn(scenario.unexported_ns)
    # The namespace itself is known (so the NXDOMAIN below is not just a missing namespace).
    eventually(lambda: (lookup(port, f"{scenario.unexported_ns}.svc.{DOMAIN}.", "A").rcode() == dns.rcode.NOERROR, None),
               f"{scenario.unexported_ns}.svc.{DOMAIN} exists")
    for rdtype in ("A", "AAAA", "SRV"):
        reply = lookup(port, name, rdtype)
        assert reply.rcode() == dns.rcode.NXDOMAIN and not reply.answer, f"{name} {rdtype}:\n{reply}"
