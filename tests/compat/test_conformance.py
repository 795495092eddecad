"""Every DNS expectation of the mcs-api conformance suite, on the testbed, against both servers.

The suite (kubernetes-sigs/mcs-api, conformance/; contract section 7) has 11
specs that exercise DNS: 6 DNS specs (clusterip_service_dns.go,
headless_service_dns.go) and 5 connectivity specs (connectivity.go) that reach
`<svc>.<ns>.svc.<domain>` through `nc` (A for -4) or `nslookup -type=AAAA` (the
last address, for IPv6). It runs for IPv4, IPv6-only and dual-stack clusters and
with a custom domain (`--dns-domain`); so do these checks, as four set-ups: the
objects carry IPv4, IPv6 or both families, and the custom domain is served by a
CoreDNS with `multicluster mcs.example` and an mcsdns with `--zone mcs.example`.

The objects are what the suite's environment leaves in the API after its setup
(Service `hello` with ports tcp/42 and udp/42, its export imported as a
ServiceImport, the MCS EndpointSlices an MCS controller copies from cluster 0,
cluster "cluster-b" exporting too in the two-cluster specs), each spec in its
own namespace as the suite does. The checks ask the way its `nslookup` does (UDP,
TCP on truncation, a trailing-dot name), apply its pass conditions, and poll for
up to 20 s like its `Eventually`. They run against mcsdns, and against the
CoreDNS of the differential suite as well, which shows the checks hold for the
reference.

One expectation is not about the multicluster zone: "DNS lookups of
`<service>.<ns>.svc.cluster.local` ... should only resolve local services" is
asked of CoreDNS (which also serves cluster.local); mcsdns serves only its zones
and must not answer that name from MCS objects (with `--upstream none` it
refuses it).
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from testsupport.objects import endpoint, endpoint_slice, namespace, service_import
from testsupport.polling import eventually

from .coredns import Block, CoreDNS
from .harness import CompatServer, World

pytestmark = pytest.mark.kube

CUSTOM_DOMAIN = "mcs.example"
CLUSTER = "cluster-a"  # source-cluster of cluster 0, the exporting cluster
CLUSTER_B = "cluster-b"
EVENTUALLY = 20.0
PORTS = [{"name": "tcp", "port": 42, "protocol": "TCP"}, {"name": "udp", "port": 42, "protocol": "UDP"}]
SETUPS = {  # name -> (IP families of the cluster set, DNS domain)
    "ipv4": (["IPv4"], "clusterset.local"),
    "ipv6": (["IPv6"], "clusterset.local"),
    "dual-stack": (["IPv4", "IPv6"], "clusterset.local"),
    "custom-domain": (["IPv4", "IPv6"], CUSTOM_DOMAIN),
}


# --------------------------------------------------------------------------- the objects


def local_service(ns: str, *, headless: bool) -> dict:
    """The plain Service `hello` of the conformance suite (its own cluster's view)."""
    spec = {"ports": [dict(p) for p in PORTS], "selector": {"app": "hello"}, "sessionAffinity": "ClientIP",
            "ipFamilyPolicy": "PreferDualStack"}
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hello", "namespace": ns}, "spec": spec}


def local_slice(ns: str, name: str, family: str, endpoints: list[dict]) -> dict:
    """Cluster 0's own EndpointSlice for `hello` (what the headless specs compare against)."""
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"kubernetes.io/service-name": "hello",
                                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
            "addressType": family, "endpoints": endpoints, "ports": PORTS}


def mcs_copy(local: dict, name: str, cluster: str = CLUSTER) -> dict:
    """The MCS EndpointSlice an MCS controller derives from a local one."""
    return endpoint_slice(local["metadata"]["namespace"], name, "hello", cluster, local["endpoints"], address_type=local["addressType"], ports=local["ports"])


class Addresses:
    """Distinct addresses per set-up and family."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.n = 0

    def pod(self, family: str) -> str:
        self.n += 1
        if family == "IPv4":
            return f"10.{40 + self.index}.{self.n // 250}.{self.n % 250 + 1}"
        return f"fd00:{40 + self.index}::{self.n:x}"

    def vip(self, family: str, k: int) -> str:
        return f"10.96.{40 + self.index}.{k}" if family == "IPv4" else f"fd00:96:{40 + self.index}::{k}"


@dataclass
class Exported:
    """A ClusterSetIP export: the namespace and the ServiceImport's IPs."""

    ns: str
    ips: list[str]


@dataclass
class Setup:
    name: str
    families: list[str]
    domain: str
    port_mcsdns: int
    port_coredns: int
    clusterip: Exported
    headless_ns: str
    headless_local: list[dict]
    sts_ns: str
    sts_slices: list[dict]
    unexported_ns: str
    connectivity: dict[str, Exported] = field(default_factory=dict)  # spec -> export

    def fqdn(self, ns: str) -> str:
        return f"hello.{ns}.svc.{self.domain}."


def _export(world: World, ns: str, families: list[str], addrs: Addresses, ports: list[dict],
            clusters: dict[str, int]) -> Exported:
    """Service + ServiceImport (a VIP per family) + MCS slices of each exporting cluster (cluster -> port)."""
    world.apply(namespace(ns))
    world.apply(local_service(ns, headless=False))
    ips = [addrs.vip(f, 1) for f in families]
    world.apply(service_import(ns, "hello", ips, ports=ports, families=families))
    for cluster, number in clusters.items():
        for family in families:
            world.apply(endpoint_slice(ns, f"hello-{cluster}-{family.lower()}", "hello", cluster, [endpoint([addrs.pod(family)])], address_type=family, ports=[{"name": "tcp" if number == 42 else "tcp2", "port": number, "protocol": "TCP"}]))
    return Exported(ns, ips)


def build(world: World, name: str, families: list[str], domain: str, index: int, ports: tuple[int, int]) -> Setup:
    rng = random.Random(1645 + index)
    suffix = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(5))

    def ns_for(kind: str) -> str:
        return f"mcs-conformance-{kind}-{suffix}"

    addrs = Addresses(index)
    clusterip = _export(world, ns_for("clusterip"), families, addrs, PORTS, {CLUSTER: 42})

    # Headless: 2 ready replicas per family, no hostnames.
    hl = ns_for("headless")
    world.apply(namespace(hl))
    world.apply(local_service(hl, headless=True))
    world.apply(service_import(hl, "hello", headless=True, ports=PORTS, families=families))
    locals_ = []
    for family in families:
        local = local_slice(hl, f"hello-{family.lower()}", family,
                            [endpoint([addrs.pod(family)], ready=True), endpoint([addrs.pod(family)], ready=None)])
        world.apply(local)
        world.apply(mcs_copy(local, f"hello-{CLUSTER}-{family.lower()}"))
        locals_.append(local)

    # StatefulSet hello-ss behind the headless service: endpoints with hostnames.
    sts = ns_for("sts")
    world.apply(namespace(sts))
    world.apply(local_service(sts, headless=True))
    world.apply(service_import(sts, "hello", headless=True, ports=PORTS, families=families))
    sts_slices = []
    for family in families:
        sl = endpoint_slice(sts, f"hello-{CLUSTER}-{family.lower()}", "hello", CLUSTER, [endpoint([addrs.pod(family)], "hello-ss-0"), endpoint([addrs.pod(family)], "hello-ss-1", ready=None)], address_type=family, ports=PORTS)
        world.apply(sl)
        sts_slices.append(sl)

    # Not exported: a plain Service `hello`, no ServiceImport.
    unexported = ns_for("unexported")
    world.apply(namespace(unexported))
    world.apply(local_service(unexported, headless=False))

    conn = {
        "exported": _export(world, ns_for("conn-exported"), families, addrs, PORTS, {CLUSTER: 42}),
        # Exported from cluster 0 only; cluster 1 has the Service but exports nothing: no slice of it.
        "exported-from-one": _export(world, ns_for("conn-one"), families, addrs, PORTS, {CLUSTER: 42}),
        # Port `tcp` is 42 in cluster 0, 4242 in cluster 1: the conflict keeps cluster 0's ports.
        "same-port-name": _export(world, ns_for("conn-samename"), families, addrs, PORTS, {CLUSTER: 42, CLUSTER_B: 4242}),
        # `tcp`/42 in cluster 0, `tcp2`/4242 in cluster 1: the import has both.
        "different-port-names": _export(world, ns_for("conn-diffname"), families, addrs,
                                        PORTS + [{"name": "tcp2", "port": 4242, "protocol": "TCP"}],
                                        {CLUSTER: 42, CLUSTER_B: 4242}),
    }
    return Setup(name, families, domain, ports[0], ports[1], clusterip, hl, locals_, sts, sts_slices, unexported, conn)


@pytest.fixture(scope="module")
def custom_domain_servers(world: World, workdir: Path) -> Iterator[tuple[int, int]]:
    """(mcsdns, CoreDNS) ports of the custom-domain pair, same API as the others."""
    core = CoreDNS(world.testbed.kubeconfig_path, workdir, [Block()], name="coredns-custom-domain", zone=CUSTOM_DOMAIN)
    mine = CompatServer(world.testbed, workdir, "mcsdns-custom-domain", "--zone", CUSTOM_DOMAIN, "--startup-timeout", "30s")
    try:
        core.start()
        mine.start()
        yield mine.dns_port, core.port
    finally:
        core.stop()
        mine.stop()


@pytest.fixture(scope="module")
def setups(world: World, custom_domain_servers: tuple[int, int]) -> dict[str, Setup]:
    out = {}
    for index, (name, (families, domain)) in enumerate(SETUPS.items()):
        ports = custom_domain_servers if domain == CUSTOM_DOMAIN else (world.mcsdns_all.dns_port, world.coredns.port)
        out[name] = build(world, name, families, domain, index, ports)
    world.refresh()
    return out


@pytest.fixture(params=[(s, server) for s in SETUPS for server in ("mcsdns", "coredns")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def case(request: pytest.FixtureRequest, setups: dict[str, Setup]) -> tuple[Setup, int, str]:
    """(set-up, DNS port of the server under test, server name)."""
    name, server = request.param
    setup = setups[name]
    return setup, setup.port_mcsdns if server == "mcsdns" else setup.port_coredns, server


# --------------------------------------------------------------------------- how the suite asks


def lookup(port: int, name: str, rdtype: str) -> dns.message.Message:
    """Like `nslookup -type=T name.`: UDP, then TCP if the reply is truncated."""
    q = dns.message.make_query(name, rdtype)
    reply, _ = dns.query.udp_with_fallback(q, "127.0.0.1", port=port, timeout=2)
    return reply


def records(reply: dns.message.Message, rdtype: str) -> list:
    return [rd for rrset in reply.answer if rrset.rdtype == dns.rdatatype.from_text(rdtype) for rd in rrset]


def addresses(port: int, name: str, rdtype: str) -> list[str]:
    return [rd.address for rd in records(lookup(port, name, rdtype), rdtype)]


def settles(check, what: str):
    """The suite's Eventually(..., 20s, 1s) on the shared poller, polling faster; `check` returns (ok, detail),
    detail is returned and shown on failure."""
    last: list = [None]

    def ok() -> bool:
        done, last[0] = check()
        return done

    eventually(ok, EVENTUALLY, 0.2, what=lambda: f"{what} (last detail: {last[0]})")
    return last[0]


def rdtype_of(family: str) -> str:
    return "AAAA" if family == "IPv6" else "A"


def family_of(ip: str) -> str:
    return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"


def ready(local: dict) -> list[str]:
    return sorted(a for ep in local["endpoints"] if (ep.get("conditions") or {}).get("ready") is not False
                  for a in ep["addresses"])


# --------------------------------------------------------------------------- clusterip_service_dns.go


def test_clusterip_name_resolves_to_each_clusterset_ip(case) -> None:
    """For each ServiceImport IP: `nslookup -type=A|AAAA hello.<ns>.svc.<domain>.` output contains it."""
    setup, port, _ = case
    name = setup.fqdn(setup.clusterip.ns)
    for ip in setup.clusterip.ips:
        rdtype = rdtype_of(family_of(ip))
        settles(lambda ip=ip, rdtype=rdtype: (ip in (got := addresses(port, name, rdtype)), got),
                   f"{name} {rdtype} contains {ip}")


def test_clusterip_srv_returns_exactly_one_record(case) -> None:
    """Ports tcp/42 and udp/42: exactly one SRV, port 42, target the service name (any family count)."""
    setup, port, _ = case
    name = setup.fqdn(setup.clusterip.ns)

    def check():
        found = [(rd.port, rd.target.to_text().rstrip(".").lower()) for rd in records(lookup(port, name, "SRV"), "SRV")]
        return found == [(42, name.rstrip("."))], found
    settles(check, f"{name} SRV has exactly one record")


def test_cluster_local_name_resolves_only_the_local_service(case, world: World) -> None:
    """`hello.<ns>.svc.cluster.local.` gives the local Service's cluster IP (CoreDNS serves cluster.local);
    mcsdns serves only its multicluster zones and never answers that name from MCS objects."""
    setup, port, server = case
    ns = setup.clusterip.ns
    name = f"hello.{ns}.svc.cluster.local."
    if server == "mcsdns":
        reply = lookup(port, name, "A")
        assert reply.rcode() == dns.rcode.REFUSED and not reply.answer, reply  # --upstream none
        return
    cluster_ip = world.testbed.get("v1", "Service", ns, "hello")["spec"]["clusterIP"]
    rdtype = rdtype_of(family_of(cluster_ip))
    settles(lambda: (cluster_ip in (got := addresses(port, name, rdtype)), got), f"{name} {rdtype} contains {cluster_ip}")


# --------------------------------------------------------------------------- headless_service_dns.go


def test_headless_name_returns_exactly_the_ready_addresses(case) -> None:
    """Per family of the ServiceImport: the sorted addresses equal cluster 0's ready ones."""
    setup, port, _ = case
    name = setup.fqdn(setup.headless_ns)
    for local in setup.headless_local:
        rdtype, want = rdtype_of(local["addressType"]), ready(local)
        settles(lambda rdtype=rdtype, want=want: ((got := sorted(addresses(port, name, rdtype))) == want, got),
                   f"{name} {rdtype} == {want}")


def test_statefulset_hostname_names_resolve_to_their_endpoint(case) -> None:
    """<hostname>.<clusterid>.hello.<ns>.svc.<domain>, per family: exactly that endpoint's addresses."""
    setup, port, _ = case
    for sl in setup.sts_slices:
        cluster = sl["metadata"]["labels"]["multicluster.kubernetes.io/source-cluster"]
        rdtype = rdtype_of(sl["addressType"])
        for ep in sl["endpoints"]:
            name = f"{ep['hostname']}.{cluster}.hello.{setup.sts_ns}.svc.{setup.domain}."
            want = sorted(ep["addresses"])
            settles(lambda name=name, want=want: ((got := sorted(addresses(port, name, rdtype))) == want, got),
                       f"{name} {rdtype} == {want}")


def test_headless_srv_has_one_record_per_endpoint_and_family(case) -> None:
    """Exactly #endpoints x #families SRV records; each endpoint's host name starts a target; port 42."""
    setup, port, _ = case
    name = setup.fqdn(setup.headless_ns)
    hosts = [a.replace(".", "-") if "." in a else a.replace(":", "-") for local in setup.headless_local for a in ready(local)]

    def check():
        srv = records(lookup(port, name, "SRV"), "SRV")
        targets = [rd.target.to_text().lower() for rd in srv]
        ok = (len(srv) == len(hosts)
              and all(any(t.startswith(h) and rd.port == 42 for rd, t in zip(srv, targets)) for h in hosts))
        return ok, [(rd.port, t) for rd, t in zip(srv, targets)]
    settles(check, f"{name} SRV: one per endpoint and family ({len(hosts)})")


# --------------------------------------------------------------------------- connectivity.go


def test_service_that_is_not_exported_does_not_resolve(case) -> None:
    """"should be inaccessible": `nc -4|-6 hello.<ns>.svc.<domain> 42` never reaches a pod: the name
    does not exist, for each family (its namespace does, so this is not a missing namespace)."""
    setup, port, _ = case
    ns = setup.unexported_ns
    settles(lambda: (lookup(port, f"{ns}.svc.{setup.domain}.", "A").rcode() == dns.rcode.NOERROR, None),
               f"{ns}.svc.{setup.domain} exists")
    for family in setup.families:
        reply = lookup(port, setup.fqdn(ns), rdtype_of(family))
        assert reply.rcode() == dns.rcode.NXDOMAIN and not reply.answer, f"{setup.fqdn(ns)} {family}:\n{reply}"


@pytest.mark.parametrize("spec", ["exported", "exported-from-one", "same-port-name", "different-port-names"])
def test_exported_service_is_reached_through_dns(case, spec: str) -> None:
    """Per family of the ServiceImport, what `nc` connects to: `nc -4 <fqdn>` takes the first A record,
    the IPv6 script the last `Address:` of `nslookup -type=AAAA`; both must be the clusterset IP of
    that family (it routes to the exporting cluster's pods), so the answer is exactly that IP."""
    setup, port, _ = case
    export = setup.connectivity[spec]
    name = setup.fqdn(export.ns)
    for ip in export.ips:
        rdtype = rdtype_of(family_of(ip))
        settles(lambda ip=ip, rdtype=rdtype: ((got := addresses(port, name, rdtype)) == [ip], got),
                   f"{name} {rdtype} == [{ip}]")
