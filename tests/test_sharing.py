"""sharing.compact: the table laid out for --workers answers exactly as before and keeps following changes.

The layout itself (what a forked worker copies) is measured by `python3 -m benchmarks.workers_memory`;
these tests hold what a user sees: every reply byte for byte the same after the rebuild, and a
service changed or removed afterwards leaves none of its old answers behind.
"""

from __future__ import annotations

import dns.message
import dns.rcode

from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.workers.sharing import compact
from testsupport.inprocess import build_table
from testsupport.objects import endpoint, endpoint_slice, namespace, service_import
from testsupport.mcsdnsserver import FIXTURES

Z = "clusterset.local."


def questions(table) -> list[bytes]:
    """A query packet (ID 0x1234, RD) for every compiled question of `table`."""
    return [b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + key for key in table.answers]


def replies(resolver: Resolver, packets: list[bytes]) -> list[bytes]:
    resolver.flush()
    return [resolver.handle(p) for p in packets]


def test_compacted_table_gives_every_reply_byte_for_byte(tmp_path):
    table = build_table([FIXTURES / "contract.yaml"], reverse_cidrs=("10.0.0.0/8", "fd00::/8"))
    resolver = Resolver(table)
    packets = questions(table)
    types = {p[-4:-2] for p in packets}
    assert {b"\x00\x01", b"\x00\x1c", b"\x00\x21", b"\x00\x0c", b"\x00\x06"} <= types  # A AAAA SRV PTR SOA
    before = replies(resolver, packets)
    compact(table)
    assert sorted(table.answers) == sorted(p[12:] for p in packets)
    assert replies(resolver, packets) == before
    owned = {k for keys in table.owned.values() for k in keys}
    assert owned <= set(table.answers), "owned names a key the table does not serve"


def test_a_service_changed_or_removed_after_the_rebuild_leaves_no_old_answer():
    table = build_table(objects=[
        namespace("ns"),
        service_import("ns", "web", ["10.1.0.1"]),
        endpoint_slice("ns", "web-east", "web", "east", [endpoint(["10.2.0.1"])]),
        service_import("ns", "db", ["10.1.0.2"]),
        endpoint_slice("ns", "db-east", "db", "east", [endpoint(["10.2.0.2"], hostname="db-0")]),
    ], synced=True)
    resolver = Resolver(table)

    def ask(name: str, rdtype: str = "A") -> dns.message.Message:
        return dns.message.from_wire(resolver.handle(dns.message.make_query(name, rdtype).to_wire()))

    # A per-endpoint name is compiled on its first query (Table.remember): asked before the rebuild.
    assert ask(f"db-0.east.db.ns.svc.{Z}").answer[0][0].address == "10.2.0.2"
    compact(table)
    table.store.apply(convert(service_import("ns", "web", ["10.1.0.9"])))
    assert [r.address for r in ask(f"web.ns.svc.{Z}").answer[0]] == ["10.1.0.9"]
    table.store.delete("ServiceImport", "ns", "db")
    for name in (f"db.ns.svc.{Z}", f"_http._tcp.db.ns.svc.{Z}", f"db-0.east.db.ns.svc.{Z}"):
        reply = ask(name, "SRV" if name.startswith("_") else "A")
        assert reply.rcode() == dns.rcode.NXDOMAIN, (name, reply)
    assert not [k for k in table.answers if b"\x02db\x02ns" in k]
    assert ask(Z, "SOA").answer[0][0].serial == table.serial & 0xFFFFFFFF
