"""Lists applied page by page (mark and sweep), and the initial sync compiled once.

In process, through KubeSource's event handler: a relist's pages go into the store as they
arrive, nothing is deleted before its end, a list cut short deletes nothing, and the initial
lists compile every service exactly once. On the test bed: a relist of several pages that
finds objects deleted while mcsdns could not watch removes exactly those, and the others keep
answering throughout.
"""

from __future__ import annotations

import base64
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dns.message
import dns.rcode
import pytest
from prometheus_client import CollectorRegistry

from kube_server import ES_API, MCS, NXDOMAIN, KubeServer, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from mcsdns.metrics import Metrics
from mcsdns.objects import Address, EndpointSlice, Namespace, Port, ServiceImport
from mcsdns.serve.resolve import Resolver
from mcsdns.sources.kube import KubeSettings, KubeSource
from mcsdns.sources.events import Listed, ListedPage, Problem, Upserted
from mcsdns.sources.watching import PAGE_SIZE
from mcsdns.store import Store
from mcsdns.zone.table import Table
from testsupport.inprocess import ask, build_table
from testsupport.testbed import Testbed

Z = "clusterset.local"


def pipeline() -> tuple[KubeSource, Store, Table, Resolver]:
    table = build_table(zones=(Z,))
    return KubeSource(KubeSettings(), table.store, Metrics(CollectorRegistry())), table.store, table, Resolver(table)


def imp(name: str, ip: str) -> ServiceImport:
    return ServiceImport("ns", name, False, (ip,), (Port(80, "http", "TCP"),))


def answer(resolver: Resolver, name: str) -> tuple[str, list[str]]:
    reply = ask(resolver, f"{name}.ns.svc.{Z}", "A")
    return dns.rcode.to_text(reply.rcode()), sorted(rd.to_text() for rrset in reply.answer for rd in rrset)


def sync(source: KubeSource, pages: list[list[ServiceImport]]) -> None:
    """The initial lists: Namespaces, ServiceImports in `pages`, no EndpointSlices."""
    states = source.states
    source._handle(states["Namespace"], Listed([Namespace("ns")], frozenset(), "1"))
    for i, page in enumerate(pages[:-1]):
        source._handle(states["ServiceImport"], ListedPage(page, frozenset(), i == 0))
    source._handle(states["ServiceImport"], Listed(pages[-1], frozenset(), "2"))
    source._handle(states["EndpointSlice"], Listed([], frozenset(), "3"))


# --------------------------------------------------------------------------- in process


def test_a_relist_in_pages_deletes_only_at_its_end() -> None:
    source, store, _, resolver = pipeline()
    sync(source, [[imp("a", "10.0.0.1"), imp("b", "10.0.0.2")], [imp("c", "10.0.0.3")]])
    assert answer(resolver, "b") == a("10.0.0.2")
    state = source.states["ServiceImport"]

    # A relist: `a` changed, `b` deleted, `c` unchanged, `d` new.
    source._handle(state, ListedPage([imp("a", "10.0.1.1")], frozenset(), True))
    assert answer(resolver, "a") == a("10.0.1.1")  # applied as its page arrives
    assert answer(resolver, "b") == a("10.0.0.2")  # not listed yet: still answers
    unchanged = store.imports[("ns", "c")]
    source._handle(state, ListedPage([imp("c", "10.0.0.3"), imp("d", "10.0.0.4")], frozenset(), False))
    assert store.imports[("ns", "c")] is unchanged  # an unchanged object keeps the stored copy
    assert answer(resolver, "b") == a("10.0.0.2")
    source._handle(state, Listed([], frozenset(), "4"))
    assert set(store.imports) == {("ns", "a"), ("ns", "c"), ("ns", "d")}
    assert answer(resolver, "b") == NXDOMAIN
    assert answer(resolver, "d") == a("10.0.0.4")
    assert state.relist is None


def test_rejected_objects_of_a_paged_relist_keep_their_last_good_version() -> None:
    source, store, _, resolver = pipeline()
    sync(source, [[imp("a", "10.0.0.1")], [imp("b", "10.0.0.2")]])
    state = source.states["ServiceImport"]
    source._handle(state, ListedPage([], frozenset({("ns", "a")}), True))  # `a` is invalid now
    source._handle(state, Listed([], frozenset(), "5"))
    assert set(store.imports) == {("ns", "a")}
    assert answer(resolver, "a") == a("10.0.0.1")


def test_a_list_cut_short_deletes_nothing() -> None:
    source, store, _, resolver = pipeline()
    sync(source, [[imp("a", "10.0.0.1"), imp("b", "10.0.0.2")], [imp("c", "10.0.0.3")]])
    state = source.states["ServiceImport"]
    source._handle(state, ListedPage([imp("a", "10.0.1.1")], frozenset(), True))
    source._handle(state, Problem("unreachable", "API server unreachable (refused)", 1.0))
    assert answer(resolver, "a") == a("10.0.1.1") and answer(resolver, "b") == a("10.0.0.2")
    # The retry is a list of one page: a plain Listed, whose own content is the whole kind.
    source._handle(state, Listed([imp("a", "10.0.1.1"), imp("b", "10.0.0.2")], frozenset(), "6"))
    assert set(store.imports) == {("ns", "a"), ("ns", "b")}
    # A page whose list start was never seen is applied, but its list never sweeps.
    source._handle(state, ListedPage([imp("e", "10.0.0.5")], frozenset(), False))
    source._handle(state, Listed([], frozenset(), "7"))
    assert set(store.imports) == {("ns", "a"), ("ns", "b"), ("ns", "e")}


def test_a_whole_list_after_a_streamed_list_ended_early_sweeps_by_itself() -> None:
    """A streamed list the server ended before its end marker leaves a started list behind (no Problem
    follows: the list is simply read again in pages); a list of one page then is the whole kind."""
    source, store, _, resolver = pipeline()
    sync(source, [[imp("a", "10.0.0.1"), imp("b", "10.0.0.2")], [imp("c", "10.0.0.3")]])
    state = source.states["ServiceImport"]
    source._handle(state, ListedPage([imp("a", "10.0.1.1"), imp("b", "10.0.0.2")], frozenset(), True))  # then cut
    source._handle(state, Listed([imp("a", "10.0.1.1"), imp("c", "10.0.0.3")], frozenset(), "8", whole=True))
    assert set(store.imports) == {("ns", "a"), ("ns", "c")}, "the page of the list ended early kept `b` alive"
    assert answer(resolver, "b") == NXDOMAIN and answer(resolver, "a") == a("10.0.1.1")
    assert state.relist is None


def counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The services Table.compile is called for, in order."""
    compiled: list[tuple[str, str]] = []
    real = Table.compile
    monkeypatch.setattr(Table, "compile", lambda self, key: (compiled.append(key), real(self, key))[1])
    return compiled


def one_slice(service: str, ip: str, host: str) -> EndpointSlice:
    return EndpointSlice("ns", f"{service}-east", service, "east", (Address(ip, False, host),), (Port(80, "http", "TCP"),))


def test_the_initial_lists_compile_each_service_once(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = counting_compiles(monkeypatch)
    source, store, table, resolver = pipeline()
    states = source.states
    names = [f"s{i}" for i in range(6)]
    source._handle(states["Namespace"], Listed([Namespace("ns")], frozenset(), "1"))
    source._handle(states["ServiceImport"], ListedPage([imp(n, f"10.0.0.{i + 1}") for i, n in enumerate(names[:3])],
                                                       frozenset(), True))
    source._handle(states["ServiceImport"], Listed([imp(n, f"10.0.0.{i + 4}") for i, n in enumerate(names[3:])],
                                                   frozenset(), "2"))
    slices = [one_slice(n, f"10.1.0.{i + 1}", f"h{i}") for i, n in enumerate(names)]
    source._handle(states["EndpointSlice"], ListedPage(slices[:4], frozenset(), True))
    assert compiled == [] and not table.owned  # not synced yet (EndpointSlices): nothing compiled...
    assert answer(resolver, "s0") == a("10.0.0.1")  # ...but positive answers come from the zone logic
    source._handle(states["EndpointSlice"], Listed(slices[4:], frozenset(), "3"))
    assert sorted(compiled) == sorted(("ns", n) for n in names)  # once each, at the sync
    assert set(table.owned) == {("ns", n) for n in names}

    # After the sync a change is compiled at once.
    compiled.clear()
    source._handle(states["ServiceImport"], Upserted(imp("s0", "10.0.9.9"), time.monotonic()))
    assert compiled == [("ns", "s0")] and answer(resolver, "s0") == a("10.0.9.9")


def test_services_are_compiled_while_the_lists_run_once_they_look_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page compiles the services the page before touched (the list is past them); once only imports
    are still listed, an arriving service is complete and compiled at once; the sync compiles the rest.
    Each service once, and the table is the one a compile after the sync makes."""
    compiled = counting_compiles(monkeypatch)
    source, store, table, resolver = pipeline()
    states = source.states
    names = [f"s{i}" for i in range(8)]
    slices = [one_slice(n, f"10.1.0.{i + 1}", f"h{i}") for i, n in enumerate(names)]
    imports = [imp(n, f"10.0.0.{i + 1}") for i, n in enumerate(names)]
    source._handle(states["Namespace"], Listed([Namespace("ns")], frozenset(), "1"))
    source._handle(states["ServiceImport"], ListedPage(imports[:3], frozenset(), True))
    source._handle(states["EndpointSlice"], ListedPage(slices[:2], frozenset(), True))
    assert compiled == []  # s0-s2 were touched by the page before, but had no slice then
    source._handle(states["EndpointSlice"], ListedPage(slices[2:4], frozenset(), False))
    assert sorted(compiled) == [("ns", "s0"), ("ns", "s1")]  # the page before's, now with import and slice
    source._handle(states["EndpointSlice"], Listed(slices[4:], frozenset(), "3"))
    assert sorted(compiled) == [("ns", "s0"), ("ns", "s1"), ("ns", "s2")]  # s3: no import yet
    compiled.clear()
    # Only imports are still listed: each arriving service is complete (and those pending are compiled).
    source._handle(states["ServiceImport"], ListedPage(imports[3:6], frozenset(), False))
    assert sorted(compiled) == [("ns", "s3"), ("ns", "s4"), ("ns", "s5")] and not store.synced_all
    # A change to an early one before the sync is compiled at once as well: it stays current.
    source._handle(states["EndpointSlice"], Upserted(one_slice("s4", "10.1.9.9", "h9"), time.monotonic()))
    assert compiled[-1] == ("ns", "s4")
    compiled.clear()
    source._handle(states["ServiceImport"], Listed(imports[6:], frozenset(), "2"))
    assert store.synced_all
    assert sorted(compiled) == [("ns", "s6"), ("ns", "s7")]  # the sync: only the others
    assert set(table.owned) == {("ns", n) for n in names}
    assert [answer(resolver, n) for n in names] == [a(f"10.0.0.{i + 1}") for i in range(8)]
    fresh = build_table(zones=(Z,), objects=[Namespace("ns"), *store.imports.values(), *store.slices.values()],
                        synced=True)  # the same objects compiled after the sync, in one go
    owned = {key: {k: table.answers[k] for k in keys} for key, keys in table.owned.items()}
    assert owned == {key: {k: fresh.answers[k] for k in keys} for key, keys in fresh.owned.items()}


# --------------------------------------------------------------------------- on the test bed

SERVICES = 2 * PAGE_SIZE + 200  # a ServiceImport list of three pages
GONE = set(range(0, SERVICES, 10)) | {SERVICES - 1}  # on every page, first and last included


def vip(i: int) -> str:
    return f"10.77.{i // 250}.{i % 250 + 1}"


def etcd_delete(testbed: Testbed, key: str) -> int:
    """Delete one object behind the API server's back (it is down); the number of keys deleted."""
    data = testbed._etcd_post("/v3/kv/deleterange", {"key": base64.b64encode(key.encode()).decode()})
    return int(data.get("deleted", 0))


@pytest.mark.kube
def test_a_relist_removes_exactly_what_was_deleted(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: testbed.create(service_import(ns, f"svc-{i}", [vip(i)])), range(SERVICES)))
    testbed.create(service_import(ns, "web", headless=True))
    for s in range(3):
        testbed.create(endpoint_slice(ns, f"web-{s}", "web", "east", [(f"10.78.0.{s + 1}", True)]))
    web_before, web_after = a("10.78.0.1", "10.78.0.2", "10.78.0.3"), a("10.78.0.1", "10.78.0.3")
    kept = [i for i in range(SERVICES) if i not in GONE]
    watched = kept[:: len(kept) // 40]  # queried over and over while the API server restarts and the relist runs

    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        assert server.answer(fqdn("svc-0", ns)) == a(vip(0))
        assert server.answer(fqdn("web", ns)) == web_before

        wrong: list[str] = []
        asked = 0
        done = threading.Event()

        def ask(name: str) -> tuple[str, list[str]]:
            try:
                return server.answer(name)
            except Exception as exc:  # noqa: BLE001 - no reply (a timeout) is a wrong answer too
                return (type(exc).__name__, [])

        def poll() -> None:
            nonlocal asked
            while not done.is_set():
                for i in watched:
                    got = ask(fqdn(f"svc-{i}", ns))
                    if got != a(vip(i)):
                        wrong.append(f"svc-{i}: {got}")
                    got = ask(fqdn("web", ns))
                    if got not in (web_before, web_after):  # the previous state or the new one, nothing else
                        wrong.append(f"web: {got}")
                    asked += 2

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            # With the API server down, delete objects straight from etcd: no watch can see
            # that, only the relist forced by the restart (every resourceVersion is too old).
            testbed.stop_apiserver()
            try:
                for i in GONE:
                    assert etcd_delete(testbed, f"/registry/{MCS}/serviceimports/{ns}/svc-{i}") == 1
                assert etcd_delete(testbed, f"/registry/endpointslices/{ns}/web-1") == 1
                testbed.compact_etcd(restart_apiserver=False)
            finally:
                testbed.start_apiserver()
            eventually(lambda: (server.metric("mcsdns_relists_total", resource="serviceimports") or 0) >= 2, 60,
                       what=lambda: f"a ServiceImport relist\n{server.tail()}")
            server.wait_answer(fqdn("web", ns), "A", web_after, timeout=30)
        finally:
            done.set()
            poller.join(10)
        assert not wrong, f"{len(wrong)} wrong answers during the relist, e.g. {wrong[:5]}"
        assert asked > len(watched), "the poller kept asking during the relist"
        assert "ServiceImport: relisted" in server.log()

        for i in range(SERVICES):
            assert server.answer(fqdn(f"svc-{i}", ns)) == (NXDOMAIN if i in GONE else a(vip(i))), f"svc-{i}"
        assert server.answer(f"10-78-0-2.east.web.{ns}.svc.{Z}") == NXDOMAIN
        testbed.create(service_import(ns, "late", ["10.77.9.9"]))  # and the watch after the relist works
        server.wait_answer(fqdn("late", ns), "A", a("10.77.9.9"))
        testbed.delete(ES_API, "EndpointSlice", ns, "web-0")
        server.wait_answer(fqdn("web", ns), "A", a("10.78.0.3"))
