"""fastpath.py writes a ClusterSetIP service's answers in one pass: byte for byte what the general compile writes.

The general path (compiler.compile_service -> wire.Renderer) decides and lays out every answer; the
one-pass writer only repeats it for the common shape. These tests compile the same generated
services both ways (`Table.use_fastpath` on and off) and compare every compiled key and body, the owned
keys and the `children` index, over IPv4, IPv6 and IPv4-mapped IPs with
duplicates, named, unnamed and sentinel ports, port names and protocols in any case, one zone or two, and sizes on
both sides of fastpath.py's limits. They also check the one pass is what compiled most of them, so the
comparison cannot pass by both sides taking the general path.
"""

from __future__ import annotations

import random
import string

import pytest

from mcsdns.zone import fastpath
from mcsdns.objects import Address, EndpointSlice, Namespace, Port, ServiceImport
from mcsdns.zone.table import Table
from testsupport.inprocess import build_table

IPS = ["10.0.0.1", "10.0.0.2", "10.0.0.1", "192.168.255.254", "0.0.0.0", "fd00::1", "FD00::2", "2001:db8::",
       "::ffff:10.1.2.3", "::1", "fe80::1:2:3:4"]
PORT_NAMES = ["http", "HTTP", "dns", "a-b", "", "grpc-web", "p" * 62, "x"]
PROTOCOLS = ["TCP", "tcp", "UDP", "udp", "SCTP", "Sctp", ""]
NUMBERS = [0, 53, 80, 80, 443, 8080, 65535]


def _label(rng: random.Random) -> str:
    n = rng.choice([1, 2, 5, 12, 63])
    body = "".join(rng.choice(string.ascii_letters + string.digits + "-") for _ in range(n))
    return (rng.choice(string.ascii_letters) + body[1:-1] + rng.choice(string.digits + "abcXYZ"))[:n] if n > 1 else rng.choice("aZ9")


def _service(rng: random.Random, i: int, namespace: str) -> ServiceImport:
    ips = tuple(rng.choice(IPS) for _ in range(rng.choice([0, 1, 1, 1, 2, 3, 4, fastpath.MAX_IPS + 1])))
    ports = []
    for _ in range(rng.choice([0, 1, 1, 2, 3, 5, fastpath.MAX_PORTS + 1])):
        if rng.random() < 0.05:
            ports.append(Port(-1))  # what a port with an unknown protocol becomes (objects._port)
        else:
            ports.append(Port(rng.choice(NUMBERS), rng.choice(PORT_NAMES), rng.choice(PROTOCOLS)))
    headless = rng.random() < 0.1
    name = f"{_label(rng)}{i}"[-63:]
    if rng.random() < 0.9:
        name = name.lower()  # what the converters let through (objects._DNS_LABEL); the rest takes the general path
    return ServiceImport(namespace, name, headless, ips, tuple(ports))


def _objects(seed: int, count: int) -> list:
    rng = random.Random(seed)
    namespaces = [_label(rng).lower() for _ in range(4)]
    objs: list = [Namespace(ns) for ns in namespaces]
    for i in range(count):
        imp = _service(rng, i, rng.choice(namespaces))
        objs.append(imp)
        if rng.random() < 0.7:  # a slice: the general path reads it (longest_name); answers must not change
            addresses = tuple(Address(f"10.9.{k}.{i % 250}", False, f"10-9-{k}-{i % 250}") for k in range(rng.choice([1, 3])))
            objs.append(EndpointSlice(imp.namespace, f"{imp.name}-x"[-63:], imp.name, rng.choice(["east", "a.b", None]),
                                      addresses, (Port(80, "http", "TCP"),)))
    return objs


def _both(objs: list, zones: tuple[str, ...], ttl: int, local: str | None = None) -> tuple[Table, Table, int]:
    """The tables compiled with the one pass and without it, and how many services took the one pass."""
    fast = build_table(objects=objs, zones=zones, ttl=ttl, synced=True, local_cluster=local)
    general = build_table(objects=objs, zones=zones, ttl=ttl, synced=True, compile_changes=False, local_cluster=local)
    general.use_fastpath = False
    for key in general.store.imports:
        general.compile(key)
    general.set_serial(fast.serial)  # the apex SOA carries the serial: the same in both
    taken = sum(fastpath.answers(imp, fast.zones, fast.ttl, fast.negative) is not None for imp in fast.store.imports.values())
    return fast, general, taken


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("zones,local", [(("clusterset.local",), None), (("clusterset.local", "mcs.example.org"), None),
                                         (("clusterset.local",), "east")], ids=["one-zone", "two-zones", "local-cluster"])
def test_the_one_pass_writes_what_the_general_compile_writes(seed: int, zones: tuple[str, ...], local: str | None) -> None:
    objs = _objects(seed, 400)
    fast, general, taken = _both(objs, zones, random.Random(seed).choice([0, 5, 30, 3600]), local)
    assert taken >= 100, f"only {taken} of 400 services took the one pass: the comparison would prove little"
    assert fast.answers.keys() == general.answers.keys()
    for k, body in general.answers.items():
        assert fast.answers[k] == body, k
    assert fast.owned == general.owned
    assert fast.children == general.children


def test_a_recompiled_service_is_replaced_whole() -> None:
    """A plain service that changes shape (ports gone, headless, back) leaves no key of its old answers."""
    ns = Namespace("ns")
    shapes = [
        ServiceImport("ns", "web", False, ("10.0.0.1",), (Port(80, "http", "TCP"), Port(53, "dns", "UDP"))),
        ServiceImport("ns", "web", False, ("10.0.0.1", "fd00::1"), (Port(80, "HTTP", "tcp"),)),
        ServiceImport("ns", "web", True, (), (Port(80, "http", "TCP"),)),
        ServiceImport("ns", "web", False, ("10.0.0.2",), ()),
        ServiceImport("ns", "web", False, ("10.0.0.3",), (Port(8080),)),
    ]
    fast = build_table(objects=[ns], synced=True)
    general = build_table(objects=[ns], synced=True)
    general.use_fastpath = False
    for imp in shapes:
        fast.store.apply(imp)
        general.store.apply(imp)
        general.set_serial(fast.serial)
        assert fast.answers == general.answers and fast.owned == general.owned and fast.children == general.children


@pytest.mark.parametrize("imp", [
    ServiceImport("ns", "h", True, (), (Port(80, "http", "TCP"),)),
    ServiceImport("ns", "c", False, (), (Port(80, "http", "TCP"),)),
    ServiceImport("ns", "c", False, ("10.0.0.1",), ()),
    ServiceImport("ns", "c", False, ("10.0.0.1",), (Port(-1),)),
    ServiceImport("ns", "c", False, ("10.0.0.1",), (Port(80, "a.b", "TCP"),)),
    ServiceImport("ns", "c", False, ("10.0.0.1",) * (fastpath.MAX_IPS + 1), (Port(80),)),
], ids=["headless", "no-ips", "no-ports", "sentinel-port", "dotted-port-name", "many-ips"])
def test_what_the_one_pass_leaves_to_the_general_compile(imp: ServiceImport) -> None:
    assert fastpath.answers(imp, (b"\x0aclusterset\x05local\x00",), 5, lambda rcode, at: None) is None
