"""A change's compile answers the waiting queries between its steps (`Table.interleave`), and
every one of them sees each service whole: as it was before the change, never part of the new.

In process: the interleave hook asks the real resolver (a new one each time, so no reply comes
from its cache) while the table is between two steps of compiling a large headless service.
"""

from __future__ import annotations

import dns.message
import dns.rcode
import pytest

from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.zone import table as table_module
from testsupport.inprocess import ask, build_table
from testsupport.objects import endpoint, endpoint_slice, namespace, service_import

ENDPOINTS = 300
PORTS = [{"name": f"p{i}", "protocol": "TCP", "port": 8000 + i} for i in range(3)]
NAME = "big.ns.svc.clusterset.local."
QUESTIONS = [(NAME, "A"), (NAME, "SRV"), ("_p1._tcp." + NAME, "SRV"), ("_p2._tcp." + NAME, "A"),
             ("other.ns.svc.clusterset.local.", "A")]


def big_slice(ready: list[bool]) -> dict:
    return endpoint_slice("ns", "big-c1", "big", "c1",
                          [endpoint([f"10.1.{j // 250}.{j % 250 + 1}"], f"pod-{j}", ready=r) for j, r in enumerate(ready)],
                          ports=PORTS)


def objects() -> list[dict]:
    return [namespace("ns"), service_import("ns", "big", headless=True, ports=PORTS), big_slice([True] * ENDPOINTS),
            service_import("ns", "other", ["10.9.0.1"])]


def replies(table: table_module.Table) -> dict[tuple[str, str], tuple[str, list[str]]]:
    """Each question's rcode and answer records, from a resolver with an empty cache."""
    resolver = Resolver(table)
    out = {}
    for name, qtype in QUESTIONS:
        reply: dns.message.Message = ask(resolver, name, qtype, tcp=True)
        out[(name, qtype)] = (dns.rcode.to_text(reply.rcode()), sorted(str(rr) for rrset in reply.answer for rr in rrset))
    return out


@pytest.fixture
def every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_module, "STEP_SECONDS", 0.0)  # every step point answers, not one per 0.2 ms


def test_queries_between_a_change_s_steps_see_the_service_as_it_was(every_step: None) -> None:
    table = build_table(objects=objects(), synced=True)
    before = replies(table)
    seen: list[dict] = []
    table.interleave = lambda: seen.append(replies(table))
    ready = [True] * ENDPOINTS
    ready[7] = False
    table.store.apply(convert(big_slice(ready)))
    after = replies(table)
    # each address answer and each SRV answer rendered ends a step, and so does the service
    assert sum(s == before for s in seen) >= 4, len(seen)
    assert all(s in (before, after) for s in seen)  # whole, old or new: never part of each
    assert after != before
    gone = "10.1.0.8"
    assert gone in before[(NAME, "A")][1] and gone not in after[(NAME, "A")][1]
    assert len(after[(NAME, "A")][1]) == ENDPOINTS - 1 and after[(NAME, "SRV")][0] == "NOERROR"


def test_a_deleted_service_is_answered_whole_until_its_removal(every_step: None) -> None:
    """Deleting the import removes every name at once; the other service's steps see it whole too."""
    table = build_table(objects=objects(), synced=True)
    before = replies(table)
    seen: list[dict] = []
    table.interleave = lambda: seen.append(replies(table))
    table.store.delete("ServiceImport", "ns", "big")
    after = replies(table)
    assert seen and all(s in (before, after) for s in seen)
    assert after[(NAME, "A")][0] == after[(NAME, "SRV")][0] == "NXDOMAIN"


def test_the_initial_sync_compiles_without_stepping(every_step: None) -> None:
    """Before and during the initial sync's compile nothing is answered from between its steps: until
    every service is compiled, the table would call a missing one NXDOMAIN."""
    table = build_table(objects=objects())
    calls: list[int] = []
    table.interleave = lambda: calls.append(1)
    for kind in ("Namespace", "ServiceImport", "EndpointSlice"):
        table.store.mark_synced(kind)
    assert table.settled and not calls
    assert replies(table)[(NAME, "A")][0] == "NOERROR"


def test_a_kept_name_cache_renders_what_a_new_one_renders() -> None:
    """A headless service's compile reuses the bytes its last compile derived: after flips and a
    changed address, its answers are byte for byte those of a table compiling it for the first time."""
    table = build_table(objects=objects(), synced=True)
    ready = [True] * ENDPOINTS
    for j in (3, 3, 40, 299):
        ready[j] = not ready[j]
        table.store.apply(convert(big_slice(ready)))
    moved = big_slice(ready)
    moved["endpoints"][5]["addresses"] = ["10.2.0.1"]
    table.store.apply(convert(moved))
    fresh = build_table(objects=[*objects()[:2], moved, objects()[3]], synced=True)
    key = ("ns", "big")
    assert table.owned[key] == fresh.owned[key]
    assert [table.answers[k] for k in table.owned[key]] == [fresh.answers[k] for k in fresh.owned[key]]
