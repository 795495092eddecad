"""Streaming lists (KEP-3157, "WatchList") against the real etcd + kube-apiserver test bed.

In process, through the real Watcher and KubeSource's event handler: a list read as one
watch stream (sendInitialEvents) leaves the store exactly as the paginated list does
(Namespaces, ServiceImports with a rejected one, EndpointSlices, several pages each), and a
relist read that way keeps what it has not re-read yet in service and sweeps, at its end,
what the API no longer holds. With the real server: against the test bed's API server
(v1.37, WatchList on by default) the sync makes no LIST request at all (the API server's
own request counter says so); against one started with `--feature-gates=WatchList=false`,
the streamed list is refused once per resource and mcsdns lists in pages from then on,
with the same answers. Whatever the API server (tests/test_versions.py runs it against every
version of the matrix), the list strategy logged is the one its answers called for, the
requests sent are that strategy's, and a list and a relist leave the API's state.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import dns.message
import dns.rcode
import pytest
from prometheus_client import CollectorRegistry

from kube_server import ES_API, MCS, NXDOMAIN, KubeServer, a, endpoint_slice, ensure_crd, eventually, fqdn, service_import
from mcsdns.metrics import Metrics
from mcsdns.serve.resolve import Resolver
from mcsdns.sources import watching
from mcsdns.sources.kube import KubeSettings, KubeSource
from mcsdns.sources.kubeapi import ApiConnection, load_configuration
from mcsdns.sources.events import Listed, ListedPage
from mcsdns.sources.watching import Watcher, resources
from mcsdns.store import Store
from testsupport.inprocess import ask, build_table
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

Z = "clusterset.local"
SI_API = f"{MCS}/v1beta1"
LISTED = ("serviceimports", "endpointslices", "namespaces")


class RecordingConnection(ApiConnection):
    """The real connection, noting each request it sends: which were lists, which were watches."""

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        self.sent: list[tuple[str, str, dict]] = []

    def open(self, path: str, query: dict[str, Any] | None, accept: str, read_timeout: float) -> Any:
        self.sent.append(("watch" if (query or {}).get("watch") else "get", path, dict(query or {})))
        return super().open(path, query, accept, read_timeout)


def pipeline() -> tuple[KubeSource, Store, Resolver]:
    table = build_table(zones=(Z,))
    return KubeSource(KubeSettings(), table.store, Metrics(CollectorRegistry())), table.store, Resolver(table)


def answer(resolver: Resolver, name: str, ns: str) -> tuple[str, list[str]]:
    reply = ask(resolver, f"{name}.{ns}.svc.{Z}", "A")
    return dns.rcode.to_text(reply.rcode()), sorted(rd.to_text() for rrset in reply.answer for rd in rrset)


def read_list(watcher: Watcher, source: KubeSource, until: Any = None) -> list[str]:
    """One list of `watcher`'s resource applied as the source's thread applies it; the kinds of its events.

    `until(event)`, if given, is called after each event is applied (to look at the store mid-list).
    """
    state = source.states[watcher.resource.kind]
    kinds = []
    events = watcher.list_then_watch()
    try:
        for event in events:
            kinds.append(type(event).__name__)
            source._handle(state, event)
            if until is not None:
                until(event)
            if isinstance(event, Listed):
                break
    finally:
        events.close()
    return kinds


def seed(testbed: Testbed, ns: str, count: int) -> None:
    for i in range(count):
        testbed.create(service_import(ns, f"svc-{i}", [f"10.61.0.{i + 1}"]))
    testbed.create(service_import(ns, "bad.name", ["10.61.1.1"]))  # a name DNS cannot use: rejected, counted as listed
    testbed.create(service_import(ns, "web", headless=True))
    for s in range(3):
        testbed.create(endpoint_slice(ns, f"web-{s}", "web", "east", [(f"10.62.0.{s + 1}", True)]))


def lists_served(testbed: Testbed) -> dict[str, float]:
    """LIST requests the API server has served so far, by resource (its own apiserver_request_total)."""
    text = testbed.api.request("GET", "/metrics")
    assert isinstance(text, str) and "apiserver_request_total" in text
    served = {resource: 0.0 for resource in LISTED}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{") or 'verb="LIST"' not in line:
            continue
        for resource in LISTED:
            if f'resource="{resource}"' in line:
                served[resource] += float(line.rsplit(" ", 1)[1])
    return served


# =========================================================================== in process, real API


def test_a_streamed_list_fills_the_store_as_the_paginated_list_does(
        testbed: Testbed, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    seed(testbed, ns, 23)
    monkeypatch.setattr(watching, "PAGE_SIZE", 4)  # several pages of each list, both ways
    configuration = load_configuration(testbed.kubeconfig_path, None, False)
    stop = threading.Event()
    streamed, streamed_store, streamed_resolver = pipeline()
    paged, paged_store, _ = pipeline()
    for resource in resources(None):
        conn = RecordingConnection(configuration)
        by_stream = Watcher(conn, resource, stop, watch_list=True)
        kinds = read_list(by_stream, streamed)
        assert by_stream.watch_list, f"{resource.kind}: the API server refused the streamed list"
        assert kinds[-1] == "Listed", kinds
        if resource.kind == "ServiceImport":  # 25 in this namespace alone: pages of 4
            assert kinds.count("ListedPage") >= 6, kinds
        sent = [(verb, q) for verb, path, q in conn.sent if path.endswith(f"/{resource.plural}")]
        assert [verb for verb, _ in sent] == ["watch"], f"{resource.kind}: {sent}"  # no list request: one watch
        assert sent[0][1]["sendInitialEvents"] == "true" and sent[0][1]["resourceVersionMatch"] == "NotOlderThan"
        assert sent[0][1]["labelSelector"] == resource.label_selector
        assert by_stream.resource_version, "the end marker's resourceVersion is the list's"

        conn = RecordingConnection(configuration)
        by_pages = Watcher(conn, resource, stop)
        read_list(by_pages, paged)
        verbs = [verb for verb, path, _ in conn.sent if path.endswith(f"/{resource.plural}")]
        assert verbs and set(verbs) == {"get"}, f"{resource.kind}: {verbs}"

    assert streamed_store.imports == paged_store.imports
    assert streamed_store.slices == paged_store.slices
    assert streamed_store.namespaces == paged_store.namespaces
    assert streamed.rejections() == paged.rejections()
    assert ("ServiceImport", ns, "bad.name") in {r[:3] for r in streamed.rejections()}
    assert {name for (n, name) in streamed_store.imports if n == ns} == {f"svc-{i}" for i in range(23)} | {"web"}
    assert streamed_store.synced_all
    assert answer(streamed_resolver, "svc-22", ns) == a("10.61.0.23")
    assert answer(streamed_resolver, "web", ns) == a("10.62.0.1", "10.62.0.2", "10.62.0.3")


def test_a_streamed_relist_keeps_serving_until_its_end_then_sweeps(
        testbed: Testbed, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    seed(testbed, ns, 12)
    monkeypatch.setattr(watching, "PAGE_SIZE", 4)
    conn = ApiConnection(load_configuration(testbed.kubeconfig_path, None, False))
    stop = threading.Event()
    source, store, resolver = pipeline()
    watchers = {r.kind: Watcher(conn, r, stop, watch_list=True) for r in resources(None)}
    for watcher in watchers.values():
        read_list(watcher, source)
    assert answer(resolver, "svc-1", ns) == a("10.61.0.2")

    # Changed while no stream is open: only the relist can see them.
    testbed.delete(SI_API, "ServiceImport", ns, "svc-1")
    testbed.delete(SI_API, "ServiceImport", ns, "svc-11")
    testbed.patch(SI_API, "ServiceImport", ns, "svc-5", {"spec": {"ips": ["10.61.2.6"]}})
    testbed.delete(ES_API, "EndpointSlice", ns, "web-1")

    seen: list[tuple[str, tuple, tuple, tuple]] = []

    def look(event: Any) -> None:  # what a client asking between two pages gets
        seen.append((type(event).__name__, answer(resolver, "svc-1", ns), answer(resolver, "svc-11", ns),
                     answer(resolver, "svc-5", ns)))

    kinds = read_list(watchers["ServiceImport"], source, look)
    assert kinds.count("ListedPage") >= 2, kinds
    for kind, svc1, svc11, svc5 in seen:
        if kind != "Listed":  # before the sweep: the previous state, or for a re-read object the new one
            assert svc1 == a("10.61.0.2") and svc11 == a("10.61.0.12"), (kind, svc1, svc11)
            assert svc5 in (a("10.61.0.6"), a("10.61.2.6")), svc5
    assert seen[-1][1:] == (NXDOMAIN, NXDOMAIN, a("10.61.2.6"))
    read_list(watchers["EndpointSlice"], source)
    assert answer(resolver, "web", ns) == a("10.62.0.1", "10.62.0.3")
    assert (ns, "svc-1") not in store.imports and (ns, "svc-0") in store.imports
    assert source.metrics.relists["serviceimports"] == 2
    assert all(w.watch_list for w in watchers.values())


# =========================================================================== the server


def test_the_sync_makes_no_list_request(testbed: Testbed, fresh_namespace: str, tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    seed(testbed, ns, 5)
    before = lists_served(testbed)
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        assert server.answer(fqdn("svc-4", ns)) == a("10.61.0.5")
        assert server.answer(fqdn("web", ns)) == a("10.62.0.1", "10.62.0.2", "10.62.0.3")
        assert {r: server.metric("mcsdns_relists_total", resource=r) for r in LISTED} == {r: 1.0 for r in LISTED}
        # Namespaces left out: the API server's own informers may list them (after another test's compaction).
        after = lists_served(testbed)
        for resource in ("serviceimports", "endpointslices"):
            assert after[resource] == before[resource], f"{resource} listed although the API server streams lists"
        testbed.create(service_import(ns, "late", ["10.61.3.1"]))  # the stream that listed goes on as the watch
        server.wait_answer(fqdn("late", ns), "A", a("10.61.3.1"))
        assert "listing in pages" not in server.log()


def test_an_api_server_without_streaming_lists_is_listed_in_pages(testbin: Path, tmp_path: Path) -> None:
    with Testbed(testbin, extra_apiserver_args=("--feature-gates=WatchList=false",)) as bed:
        ensure_crd(bed)
        ns = "plain"
        bed.create_namespace(ns)
        seed(bed, ns, 5)
        before = lists_served(bed)
        with KubeServer(bed.kubeconfig_path, tmp_path / "mcsdns.log", "--resync", "2s") as server:
            server.wait_until_ready()
            assert server.answer(fqdn("svc-4", ns)) == a("10.61.0.5")
            assert server.answer(fqdn("web", ns)) == a("10.62.0.1", "10.62.0.2", "10.62.0.3")
            eventually(lambda: (server.metric("mcsdns_relists_total", resource="serviceimports") or 0) >= 3, 30,
                       what=lambda: f"relists in pages\n{server.tail()}")
            after = lists_served(bed)
            assert all(after[r] > before[r] for r in LISTED), (before, after)
            log = server.log()
            for kind in ("Namespace", "ServiceImport", "EndpointSlice"):  # refused once, then list requests for good
                chosen = [line for line in log.splitlines() if f"{kind}: listing by " in line]
                assert len(chosen) == 1 and "the API server does not stream lists" in chosen[0], log
            assert "WatchList feature gate" in log  # the API server's reason, as it gave it
            bed.delete(SI_API, "ServiceImport", ns, "svc-4")
            server.wait_answer(fqdn("svc-4", ns), "A", NXDOMAIN)


def test_the_list_strategy_is_the_one_the_server_answers_with(
        testbed: Testbed, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    seed(testbed, ns, 12)
    monkeypatch.setattr(watching, "PAGE_SIZE", 4)  # more than a page, whichever way it is listed
    caplog.set_level(logging.INFO, logger=watching.__name__)
    source, store, resolver = pipeline()
    configuration = load_configuration(testbed.kubeconfig_path, None, False)
    conn = RecordingConnection(configuration)
    for resource in resources(None):  # every kind, so the store is synced and answers
        if resource.kind == "ServiceImport":
            watcher = Watcher(conn, resource, threading.Event(), watch_list=True)
            read_list(watcher, source)
        else:
            read_list(Watcher(ApiConnection(configuration), resource, threading.Event(), watch_list=True), source)
    testbed.delete(SI_API, "ServiceImport", ns, "svc-1")  # seen by the relist alone: no watch is read
    read_list(watcher, source)

    sent = [(verb, q) for verb, path, q in conn.sent if path.endswith("/serviceimports")]
    chosen = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ServiceImport: listing by ")]
    assert len(chosen) == 1, chosen  # one line for the resource, though it was listed twice
    print(f"{testbed.api.request('GET', '/version')['gitVersion']}: {chosen[0]}")
    assert chosen[0].startswith(f"ServiceImport: listing by {watcher.strategy} (")
    if watcher.strategy == "streamed list":
        assert [verb for verb, _ in sent] == ["watch", "watch"], sent  # no list request at all
        assert all(q["sendInitialEvents"] == "true" for _, q in sent)
    else:
        assert not watcher.watch_list and "the API server does not stream lists" in chosen[0]
        assert sent[0][0] == "watch" and sent[0][1]["sendInitialEvents"] == "true", sent
        first = sent[1][1]
        assert sent[1][0] == "get" and first["resourceVersion"] == "0" and first["limit"] == 4, sent
        if watcher.strategy == "whole list from the watch cache":
            assert [verb for verb, _ in sent] == ["watch", "get", "get"], sent  # one response each
            relist = sent[2][1]
            assert relist["resourceVersionMatch"] == "NotOlderThan" and relist["resourceVersion"], relist
            assert "limit" not in relist, relist  # a limit would send it to etcd
        else:
            assert watcher.strategy == "pages", watcher.strategy
            relist = [q for verb, q in sent[2:] if q.get("continue") is None]
            assert len(relist) == 1 and len(sent) > 4, sent  # relisted in pages, at the latest state
            assert relist[0]["limit"] == 4 and "resourceVersion" not in relist[0], relist
    assert {name for (n, name) in store.imports if n == ns} == {f"svc-{i}" for i in range(12) if i != 1} | {"web"}
    assert answer(resolver, "svc-1", ns) == NXDOMAIN
    assert answer(resolver, "svc-11", ns) == a("10.61.0.12")
