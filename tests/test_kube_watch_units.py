"""The watch generators and the source's event handling, against a scripted fake API.

The real-API scenarios (test_kube_*.py with the testbed) prove the whole path;
these pin the details that are hard to provoke there: pagination, a bookmark
moving the resourceVersion, an ERROR event, discovery fallbacks, backoff bounds.
The stall tests at the end use a real HTTP server on a local socket that stops
answering, with the real ApiConnection (urllib3) in front of it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.parse
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import Configuration

from mcsdns.objects import ServiceImport
from mcsdns.sources import kubeapi, watching
from mcsdns.sources.kube import KubeSettings, KubeSource, SourceCrashed
from mcsdns.sources.events import (
    Bookmark,
    Deleted,
    Expired,
    Listed,
    ListedPage,
    Problem,
    Rejected,
    Upserted,
    UsingVersion,
    Watching,
)
from mcsdns.sources.watching import Backoff, Watcher, resources
from mcsdns.store import Store

MCS = "multicluster.x-k8s.io"
SI, SLICE, NS = resources("team=dns")[1], resources("team=dns")[2], resources(None)[0]


def si(name: str, ips: list[str], rv: str = "1", namespace: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "spec": {"type": "ClusterSetIP", "ips": ips, "ports": [{"port": 80, "protocol": "TCP"}]}}


class FakeSocket:
    def __init__(self) -> None:
        self.timeout: float | None = None

    def settimeout(self, seconds: float) -> None:
        self.timeout = seconds


class FakeResponse:
    """A watch body: the events as NDJSON, split at awkward places like real chunks."""

    def __init__(self, events: list[dict]) -> None:
        body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        self.chunks = [body[i:i + 7] for i in range(0, len(body), 7)]
        self.closed = False
        self.connection = SimpleNamespace(sock=FakeSocket())  # urllib3's: the streamed list sets its read timeout

    def stream(self, amt: Any = None, decode_content: bool = True):
        yield from self.chunks

    def close(self) -> None:
        self.closed = True


class FakeConn:
    """Scripted answers: GET by path (in order), watches in order; exceptions are raised."""

    def __init__(self) -> None:
        self.gets: dict[str, list[Any]] = defaultdict(list)
        self.watches: list[Any] = []
        self.log: list[tuple[str, str, dict]] = []

    def get(self, path: str, query: dict | None = None, accept: str = kubeapi.JSON,
            timeout: float = kubeapi.REQUEST_TIMEOUT, parse: Any = None) -> dict:
        """The scripted page, already a dict (`parse` is the real connection's JSON decoder)."""
        self.log.append(("GET", path, dict(query or {})))
        answer = self.gets[path].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def drop_idle(self) -> int:
        return 0

    def open(self, path: str, query: dict, accept: str, read_timeout: float) -> FakeResponse:
        self.log.append(("WATCH", path, dict(query)))
        if not self.watches:
            raise kubeapi.Unreachable("script exhausted")
        answer = self.watches.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return FakeResponse(answer)


def discovery(conn: FakeConn, *versions: str) -> None:
    conn.gets[f"/apis/{MCS}"].append({"versions": [{"version": v} for v in versions]})
    for v in versions:
        conn.gets[f"/apis/{MCS}/{v}"].append({"resources": [{"name": "serviceimports"}]})


def take(events, n: int) -> list:
    out = []
    for event in events:
        out.append(event)
        if len(out) == n:
            break
    return out


def test_paginated_list_converts_items_and_keeps_invalid_ones() -> None:
    conn = FakeConn()
    discovery(conn, "v1alpha1", "v1beta1")
    path = f"/apis/{MCS}/v1beta1/serviceimports"
    conn.gets[path] += [
        {"metadata": {"continue": "tok", "resourceVersion": "10"}, "items": [si("a", ["10.0.0.1"])]},
        {"metadata": {"resourceVersion": "10"}, "items": [si("b.x", ["10.0.0.2"]), si("c", ["10.0.0.3"])]},
    ]
    watcher = Watcher(conn, SI, threading.Event())
    events = take(watcher.list_then_watch(), 4)
    assert events[0] == UsingVersion(f"{MCS}/v1beta1")  # preferred over v1alpha1
    first = events[1]  # each page but the last is handed over as soon as it is read
    assert first == ListedPage([first.objects[0]], frozenset(), True) and first.objects[0].name == "a"
    # A name that cannot be a DNS label (a valid object name) is the one reason to refuse an import.
    assert isinstance(events[2], Rejected) and events[2].key == ("ns", "b.x") and events[2].reason == "metadata.name"
    listed = events[3]  # the last page ends the list
    assert isinstance(listed, Listed) and listed.keep == {("ns", "b.x")} and listed.resource_version == "10"
    assert [o.name for o in listed.objects] == ["c"]
    pages = [q for verb, p, q in conn.log if p == path]
    assert pages[0]["limit"] == 500 and pages[0]["continue"] is None and pages[1]["continue"] == "tok"


def test_bookmarks_advance_the_resource_version_and_410_relists() -> None:
    conn = FakeConn()
    path = "/apis/discovery.k8s.io/v1/endpointslices"
    empty = {"metadata": {"resourceVersion": "5"}, "items": []}
    conn.gets[path] += [empty, {"metadata": {"resourceVersion": "50"}, "items": []}]
    slice_ = {"metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7",
                           "labels": {"multicluster.kubernetes.io/service-name": "web"}},
              "endpoints": [{"addresses": ["10.1.0.1"]}]}
    conn.watches = [
        [{"type": "ADDED", "object": slice_}, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}],
        [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version: 9 (20)"}}],
    ]
    watcher = Watcher(conn, SLICE, threading.Event())
    events = take(watcher.forever(), 7)
    kinds = [type(e) for e in events]
    assert kinds == [Listed, Watching, Upserted, Bookmark, Watching, Expired, Listed]
    assert events[3] == Bookmark("9")
    watches = [q for verb, p, q in conn.log if verb == "WATCH"]
    assert [w["resourceVersion"] for w in watches] == ["5", "9"]  # the second stream resumes at the bookmark
    assert watches[0]["allowWatchBookmarks"] == "true"
    assert watches[0]["labelSelector"] == "multicluster.kubernetes.io/service-name,team=dns"
    assert events[-1].resource_version == "50"


# --------------------------------------------------------------------------- streamed lists (KEP-3157)

END = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20",
                                                    "annotations": {watching.INITIAL_EVENTS_END: "true"}}}}


def added(name: str, rv: str = "1") -> dict:
    return {"type": "ADDED", "object": si(name, ["10.0.0.1"], rv)}


def test_a_streamed_list_is_handed_over_in_pages_and_its_stream_goes_on_as_the_watch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watching, "PAGE_SIZE", 2)
    conn = FakeConn()
    discovery(conn, "v1beta1")
    changed = {"type": "MODIFIED", "object": si("a", ["10.0.0.9"], "21")}
    gone = {"type": "DELETED", "object": si("c", ["10.0.0.1"], "22")}
    conn.watches = [[added("a"), added("b.x"), added("c"), added("d"), END, changed, gone]]
    watcher = Watcher(conn, SI, threading.Event(), watch_list=True)
    events = take(watcher.list_then_watch(), 8)
    assert [type(e) for e in events] == [UsingVersion, Rejected, ListedPage, Listed, Watching, Upserted, Deleted, Problem]
    page, listed = events[2], events[3]
    assert [o.name for o in page.objects] == ["a", "c"] and page.keep == {("ns", "b.x")} and page.first
    assert [o.name for o in listed.objects] == ["d"] and listed.resource_version == "20" and not listed.whole
    assert events[4] == Watching("20") and events[5].obj.ips == ("10.0.0.9",) and events[6].key == ("ns", "c")
    assert watcher.resource_version == "22" and watcher.watch_list
    path = f"/apis/{MCS}/v1beta1/serviceimports"
    sent = [(verb, q) for verb, p, q in conn.log if p == path]
    assert sent[0] == ("WATCH", sent[0][1]) and not [v for v, _ in sent if v == "GET"], "a list request was sent"
    assert sent[0][1]["sendInitialEvents"] == "true" and sent[0][1]["resourceVersionMatch"] == "NotOlderThan"
    assert sent[0][1]["resourceVersion"] == "" and sent[0][1]["allowWatchBookmarks"] == "true"
    assert sent[1][1]["resourceVersion"] == "22" and "sendInitialEvents" not in sent[1][1]  # the next stream resumes


def test_a_streamed_list_of_one_page_is_whole() -> None:
    conn = FakeConn()
    conn.watches = [[{"type": "ADDED", "object": {"metadata": {"name": "ns1", "resourceVersion": "3"}}}, END]]
    watcher = Watcher(conn, NS, threading.Event(), watch_list=True)
    listed = take(watcher.list_then_watch(), 1)[0]
    assert isinstance(listed, Listed) and listed.whole and [o.name for o in listed.objects] == ["ns1"]


@pytest.mark.parametrize("answer", [
    kubeapi.error_for(422, {"message": "sendInitialEvents is forbidden for watch unless the WatchList feature gate "
                                       "is enabled", "code": 422}),
    kubeapi.error_for(400, {"message": "unknown parameter", "code": 400}),
    [added("a"), {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}],  # ignored: a plain watch
    [added("a"), {"type": "MODIFIED", "object": si("a", ["10.0.0.2"], "9")}],
], ids=["422", "400", "bookmark-before-the-end", "change-before-the-end"])
def test_an_api_server_that_does_not_stream_lists_is_listed_in_pages_from_then_on(answer: Any) -> None:
    conn = FakeConn()
    discovery(conn, "v1beta1")
    discovery(conn, "v1beta1")
    path = f"/apis/{MCS}/v1beta1/serviceimports"
    conn.gets[path] += [{"metadata": {"resourceVersion": "10"}, "items": [si("a", ["10.0.0.1"])]}] * 2
    conn.watches = [answer]
    watcher = Watcher(conn, SI, threading.Event(), watch_list=True)
    events = take(watcher.list_then_watch(), 2)
    assert [type(e) for e in events] == [UsingVersion, Listed] and events[1].resource_version == "10"
    assert [o.name for o in events[1].objects] == ["a"] and events[1].whole
    assert not watcher.watch_list
    assert isinstance(take(watcher.list_then_watch(), 2)[1], Listed)
    sent = [(verb, q.get("sendInitialEvents")) for verb, p, q in conn.log if p == path]
    assert sent == [("WATCH", "true"), ("GET", None), ("GET", None)], "a refused streamed list was tried again"


def test_a_streamed_list_forbidden_is_tried_as_pages_that_time() -> None:
    """RBAC may grant list without watch: the paginated list then works as it did before streamed lists
    (and the watch after it is the one that fails), or fails with the reason for the list."""
    conn = FakeConn()
    path = NS.path("v1")
    forbidden = kubeapi.error_for(403, {"message": 'namespaces is forbidden: User "bob" cannot watch resource'})
    conn.watches = [forbidden, forbidden]
    conn.gets[path] += [{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "ns1"}}]}]
    watcher = Watcher(conn, NS, threading.Event(), watch_list=True)
    events = take(watcher.forever(), 2)
    assert isinstance(events[0], Listed) and isinstance(events[1], Problem) and events[1].category == "forbidden"
    assert watcher.watch_list, "a 403 is no refusal of streamed lists"
    assert [verb for verb, p, q in conn.log if p == path] == ["WATCH", "GET", "WATCH"]


CUT = [{"type": "ADDED", "object": {"metadata": {"name": "ns1", "resourceVersion": "3"}}}]
SERVER_ERROR = kubeapi.error_for(500, {"message": "Internal error occurred: streaming is broken", "code": 500})
ERROR_EVENT = [*CUT, {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "etcd leader changed"}}]


@pytest.mark.parametrize("failure", [CUT, SERVER_ERROR, ERROR_EVENT],
                         ids=["ended-before-the-end", "500-at-the-start", "error-event-500-before-the-end"])
def test_a_streamed_list_cut_or_failed_is_listed_in_pages_that_time(failure: Any) -> None:
    """The server ended the stream early (its timeoutSeconds, a shutdown), or failed it with a 5xx before
    the end marker (a server or proxy that breaks streamed lists; client-go falls back to a list too):
    pages this time, a stream next time, never the same failing stream forever; after STREAM_LIST_CUTS
    such ends in a row, pages from then on."""
    conn = FakeConn()
    path = NS.path("v1")
    conn.gets[path] += [{"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "ns1"}}]}] * 4
    conn.watches = [failure] * watching.STREAM_LIST_CUTS
    watcher = Watcher(conn, NS, threading.Event(), watch_list=True)
    for attempt in range(1, watching.STREAM_LIST_CUTS + 1):
        listed = take(watcher.list_then_watch(), 1)[0]
        assert isinstance(listed, Listed) and listed.resource_version == "5" and listed.whole
        assert [o.name for o in listed.objects] == ["ns1"]
        assert watcher.stream_list_cuts == attempt and watcher.watch_list == (attempt < watching.STREAM_LIST_CUTS)
    assert isinstance(take(watcher.list_then_watch(), 1)[0], Listed)
    assert [verb for verb, p, q in conn.log if p == path] == ["WATCH", "GET"] * watching.STREAM_LIST_CUTS + ["GET"]


@pytest.mark.parametrize("failure", [SERVER_ERROR, ERROR_EVENT], ids=["500-at-the-start", "error-event-500"])
def test_pages_that_fail_after_a_failed_streamed_list_are_a_failed_list(failure: Any) -> None:
    """A failing page after the fallback is a failed list, as before: a problem, the backoff, another try."""
    path = NS.path("v1")
    conn = FakeConn()  # the pages fail too: a failed list, retried after the backoff
    conn.gets[path] += [kubeapi.error_for(503, {"message": "unavailable", "code": 503}),
                        {"metadata": {"resourceVersion": "6"}, "items": [{"metadata": {"name": "ns1"}}]}]
    conn.watches = [failure, failure]
    watcher = Watcher(conn, NS, threading.Event(), watch_list=True)
    watcher.backoff = Backoff(first=0.001, cap=0.001)
    events = take(watcher.forever(), 2)
    assert isinstance(events[0], Problem) and isinstance(events[1], Listed) and events[1].resource_version == "6"
    assert [verb for verb, p, q in conn.log if p == path] == ["WATCH", "GET", "WATCH", "GET"]


def test_missing_crd_is_a_problem_and_discovery_is_retried() -> None:
    conn = FakeConn()
    conn.gets[f"/apis/{MCS}"] += [kubeapi.NotFound("the server could not find the requested resource", 404)]
    discovery(conn, "v1alpha1")  # the CRD appears (v0.4.1: v1alpha1 only)
    conn.gets[f"/apis/{MCS}/v1alpha1/serviceimports"].append({"metadata": {"resourceVersion": "3"}, "items": []})
    stop = threading.Event()
    watcher = Watcher(conn, SI, stop)
    watcher.backoff = Backoff(first=0.001)
    events = take(watcher.forever(), 3)
    problem = events[0]
    assert isinstance(problem, Problem) and problem.category == "not-installed"
    assert problem.detail.startswith(f"the CRD serviceimports.{MCS} is not installed")
    assert events[1] == UsingVersion(f"{MCS}/v1alpha1")
    assert isinstance(events[2], Listed)


def test_forbidden_problem_names_the_user() -> None:
    exc = kubeapi.error_for(403, {"kind": "Status", "code": 403, "message":
                                  'endpointslices.discovery.k8s.io is forbidden: User "bob" cannot list resource'})
    assert isinstance(exc, kubeapi.Forbidden)
    problem = watching.problem_for(SLICE, exc, 1.0)
    assert problem.category == "forbidden" and 'User "bob"' in problem.detail
    assert isinstance(kubeapi.error_for(410, {}), kubeapi.Gone)
    assert isinstance(kubeapi.error_for(503, b"busy"), kubeapi.ServerError)


def test_watch_timeout_is_jittered_and_ends_at_the_resync() -> None:
    watcher = Watcher(FakeConn(), NS, threading.Event())
    assert all(300 <= watcher.watch_timeout(None) <= 600 for _ in range(50))
    now = watching.time.monotonic()
    assert watcher.watch_timeout(now + 42) in (41, 42)
    assert watcher.watch_timeout(now) is None  # resync due: relist


def test_backoff_doubles_to_a_cap_with_jitter() -> None:
    backoff = Backoff()
    delays = [backoff.next() for _ in range(12)]
    assert 0.4 <= delays[0] <= 0.6
    assert all(d <= 30 * 1.2 for d in delays) and delays[-1] >= 30 * 0.8
    assert backoff.next(cap=10) <= 12
    backoff.reset()
    assert backoff.next() <= 0.6


class FakeMetrics:
    def __init__(self) -> None:
        self.watch_restarts: dict[str, int] = defaultdict(int)
        self.relists: dict[str, int] = defaultdict(int)
        self.watch_up: dict[str, bool] = {}
        self.last_sync: float | None = None
        self.rejects: dict[str, int] = defaultdict(int)
        self.latencies: list[bool] = []

    def rejected(self, reason: str) -> None:
        self.rejects[reason] += 1

    def programmed_since(self, started: float, headless: bool) -> None:
        self.latencies.append(headless)


def test_source_keeps_the_last_good_version_and_reports_problems(caplog: pytest.LogCaptureFixture) -> None:
    store, metrics = Store(), FakeMetrics()
    source = KubeSource(KubeSettings(), store, metrics)
    state = source.states["ServiceImport"]
    good = ServiceImport("ns", "a", False, ("10.0.0.1",), ())
    source._handle(state, Problem("forbidden", 'forbidden (User "x" cannot list)', 1.0))
    assert source.status().startswith('Namespace: waiting for the initial list; ServiceImport: forbidden (User "x"')
    source._handle(state, Listed([good], frozenset(), "1"))
    assert "ServiceImport" in store.synced and state.problem is None
    source._handle(state, Upserted(ServiceImport("ns", "a", False, ("10.0.0.2",), ()), 0.0))
    assert metrics.latencies == [False]

    bad = Rejected("ServiceImport ns/a", ("ns", "a"), "spec.ips", "spec.ips[0]: 'x' is not an IP address")
    source._handle(state, bad)
    source._handle(state, Listed([], frozenset({("ns", "a")}), "2"))  # a relist reads it again
    source._handle(state, bad)
    assert store.imports[("ns", "a")].ips == ("10.0.0.2",)  # the last good version stays
    assert metrics.rejects == {"spec.ips": 1}  # reported once, not on every relist
    assert "its last good version stays in service" in caplog.text

    source._handle(state, Problem("unreachable", "API server unreachable (refused)", 1.0))
    assert metrics.watch_up["serviceimports"] is False and store.imports  # nothing forgotten
    assert "watch down" in caplog.text


def test_run_returns_promptly_when_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Watch threads blocked on the API do not hold up shutdown."""
    blocked = threading.Event()

    class Blocking(FakeConn):
        def get(self, path, query=None, accept=kubeapi.JSON, timeout=kubeapi.REQUEST_TIMEOUT, parse=None):
            blocked.wait(5)  # a read that never answers (interrupt() cannot reach a fake)
            raise kubeapi.Unreachable("gone")

    monkeypatch.setattr("mcsdns.sources.kube.load_configuration", lambda *a: None)
    monkeypatch.setattr("mcsdns.sources.kube.ApiConnection", lambda cfg: Blocking())
    Blocking.host, Blocking.close = "https://fake", lambda self: None
    monkeypatch.setattr("mcsdns.sources.kube.SHUTDOWN_GRACE", 0.2)

    async def main() -> float:
        source = KubeSource(KubeSettings(), Store(), FakeMetrics())
        stop = asyncio.Event()
        task = asyncio.create_task(source.run(stop))
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        stop.set()
        await asyncio.wait_for(task, 2)
        return asyncio.get_running_loop().time() - started

    try:
        assert asyncio.run(main()) < 1.0
    finally:
        blocked.set()


def test_a_watch_thread_that_dies_before_run_stops_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source begun early (cli) whose thread dies of a bug before the loop exists: run() raises it."""

    class Broken(FakeConn):
        def open(self, path, query, accept, read_timeout):
            raise RuntimeError("a bug in the watch")

    monkeypatch.setattr("mcsdns.sources.kube.load_configuration", lambda *a: None)
    monkeypatch.setattr("mcsdns.sources.kube.ApiConnection", lambda cfg: Broken())
    Broken.host, Broken.close = "https://fake", lambda self: None
    source = KubeSource(KubeSettings(), Store(), FakeMetrics())
    source.begin()
    deadline = time.monotonic() + 5
    while source._crashed is None:  # died with no loop to tell
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(SourceCrashed, match="a bug in the watch"):
        asyncio.run(asyncio.wait_for(source.run(asyncio.Event()), 5))


# =========================================================================== stalls, on a real socket


class StallingApi:
    """A real HTTP/1.1 server on localhost (urllib3 and the sockets are the real ones).

    Lists of Namespaces are answered (keep-alive) until `stall_lists`; after that the
    server reads a request and never answers it, keeping the connection open.
    `stall_open_connections()`: the same, but only on the connections open now (a link
    that stalled while they sat idle in the pool); new ones are answered. A watch
    sends its headers and `events`, then either ends at its timeoutSeconds (`healthy`)
    or stays open and silent (a stalled link). `stall_headers`: a watch gets nothing.
    """

    def __init__(self, healthy: bool = False, stall_headers: bool = False) -> None:
        self.healthy, self.stall_headers, self.stall_lists = healthy, stall_headers, False
        self.events: list[dict] = []
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._stalled: set[socket.socket] = set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.host = f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def __enter__(self) -> "StallingApi":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for sock in [self.listener, *self._sockets]:
            sock.close()

    def connection(self) -> kubeapi.ApiConnection:
        configuration = Configuration()
        configuration.host = self.host
        return kubeapi.ApiConnection(configuration)

    def stall_open_connections(self) -> None:
        self._stalled.update(self._sockets)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self._sockets.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        try:
            while not self._stop.is_set():
                request = reader.readline().decode()
                if not request:
                    return
                while reader.readline() not in (b"\r\n", b"\n", b""):
                    pass  # headers
                target = request.split()[1]
                self.requests.append(target)
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
                if "watch" in query:
                    self._watch(sock, float(query["timeoutSeconds"][0]))
                    return
                if self.stall_lists or sock in self._stalled:
                    self._stop.wait()
                    return
                body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": [{"metadata": {"name": "ns1"}}]})
                sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                             f"{body}".encode())
        except OSError:
            return

    def _watch(self, sock: socket.socket, timeout: float) -> None:
        started = time.monotonic()
        if self.stall_headers:
            self._stop.wait()
            return
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in self.events:
            line = json.dumps(event).encode() + b"\n"
            sock.sendall(b"%x\r\n%s\r\n" % (len(line), line))
        if self.healthy:  # the API server ends the stream at its timeoutSeconds
            self._stop.wait(max(0.0, started + timeout - time.monotonic()))
            sock.sendall(b"0\r\n\r\n")
        else:
            self._stop.wait()


def test_a_stalled_watch_stream_is_cut_its_slack_after_its_timeout() -> None:
    with StallingApi() as api:
        api.events = [{"type": "ADDED", "object": {"metadata": {"name": "ns2", "resourceVersion": "2"}}}]
        watcher = Watcher(api.connection(), NS, threading.Event(), stream_slack=0.5, resource_version="1")
        started = time.monotonic()
        events = []
        stalled = "watch stream stalled: still open 0.5s after its timeoutSeconds=1"
        with pytest.raises(kubeapi.Unreachable, match=stalled):
            for event in watcher.stream(NS.path("v1"), 1):
                events.append(event)
        took = time.monotonic() - started
        assert [type(e) for e in events] == [Watching, Upserted] and watcher.resource_version == "2"
        assert 1.45 <= took < 2.5, f"cut after {took:.2f}s"
        assert watcher._response is None


def test_a_healthy_stream_ends_at_its_timeout_and_is_not_cut() -> None:
    with StallingApi(healthy=True) as api:
        watcher = Watcher(api.connection(), NS, threading.Event(), stream_slack=0.5, resource_version="1")
        started = time.monotonic()
        events = list(watcher.stream(NS.path("v1"), 1))
        assert events == [Watching("1")] and 0.9 <= time.monotonic() - started < 1.45


def test_a_stream_still_being_read_past_its_timeout_is_not_cut() -> None:
    """Overdue is not enough: events the server sent before it ended the stream are still being read."""
    with StallingApi(healthy=True) as api:
        api.events = [{"type": "ADDED", "object": {"metadata": {"name": f"ns{i}", "resourceVersion": str(i)}}}
                      for i in range(2, 12)]
        watcher = Watcher(api.connection(), NS, threading.Event(), stream_slack=0.5, resource_version="1")
        started = time.monotonic()
        events = []
        for event in watcher.stream(NS.path("v1"), 1):
            events.append(event)
            time.sleep(0.25)  # a slow consumer: the last event is read 2.5 s in, past the 1.5 s due
        assert len(events) == 11 and watcher.resource_version == "11" and time.monotonic() - started > 2.5


def test_a_watch_whose_headers_never_come_fails_within_its_timeout_plus_the_slack() -> None:
    with StallingApi(stall_headers=True) as api:
        watcher = Watcher(api.connection(), NS, threading.Event(), stream_slack=0.5, resource_version="1")
        started = time.monotonic()
        with pytest.raises(kubeapi.Unreachable, match="timed out"):
            list(watcher.stream(NS.path("v1"), 1))
        assert 1.45 <= time.monotonic() - started < 2.5


def test_a_stalled_watch_is_healed_by_the_resync_within_the_period_plus_the_slack() -> None:
    """forever() with --resync 1s over a watch that stalls every time: the watch is asked to end at the
    resync (timeoutSeconds=1), the watchdog cuts it `stream_slack` after that, and the next thing is
    the relist (not another watch): one relist every period plus slack, ~1.5 s.

    What heals is read from the events and the requests the API server got, not from the clock; the
    clock only bounds it: never sooner than period plus slack (the watchdog does not cut early), and
    within a few seconds, the delay a user is promised (module docstring of watching.py)."""
    with StallingApi() as api:
        stop = threading.Event()
        watcher = Watcher(api.connection(), NS, stop, resync=1.0, stream_slack=0.5)
        watcher.backoff = Backoff(first=0.05)
        started = time.monotonic()
        events, lists = [], []
        for event in watcher.forever():
            events.append(event)
            if isinstance(event, Listed):
                lists.append(time.monotonic() - started)
                if len(lists) == 3:
                    break
        assert [type(e) for e in events] == [Listed, Watching, Problem] * 2 + [Listed]
        # Each stall is cut at timeoutSeconds + slack: by the watchdog, or by the socket's read timeout, which
        # stream() sets to the same instant, so either may fire first (the cut itself: the test above).
        cuts = ("still open 0.5s after its timeoutSeconds=1", "Read timed out")
        stalls = [e for e in events if isinstance(e, Problem)]
        assert all(p.category == "unreachable" and any(c in p.detail for c in cuts) for p in stalls), stalls
        kinds = ["watch" if "watch=true" in r else "list" for r in api.requests[:5]]
        assert kinds == ["list", "watch"] * 2 + ["list"], api.requests
        assert all("timeoutSeconds=1&" in r or r.endswith("timeoutSeconds=1") for r in api.requests[:5] if "watch=true" in r)
        gaps = [b - a for a, b in zip(lists, lists[1:])]
        assert all(1.4 <= gap < 4.5 for gap in gaps), f"relists {gaps} apart with --resync 1s, slack 0.5s"


def test_a_list_whose_answer_stalls_is_given_up_after_its_timeout_and_the_next_waits_twice_as_long() -> None:
    with StallingApi() as api:
        watcher = Watcher(api.connection(), NS, threading.Event())
        assert take(watcher.list(NS.path("v1")), 1)[0].objects  # one connection, back in the pool, open
        api.stall_lists = True
        watcher.list_timeout = 0.5  # LIST_TIMEOUT, shortened
        started = time.monotonic()
        with pytest.raises(kubeapi.TimedOut, match="timed out"):
            list(watcher.list(NS.path("v1")))
        assert 0.45 <= time.monotonic() - started < 1.5
        assert watcher.list_timeout == 1.0, "a busy API server gets a longer wait on the retry"
        api.stall_lists = False
        assert take(watcher.list(NS.path("v1")), 1)[0].objects
        assert watcher.list_timeout == watching.LIST_TIMEOUT, "a complete list resets the limit"


def test_a_relist_never_reuses_an_idle_pooled_connection() -> None:
    """The link under idle keep-alive connections stalls: the next relist and watch open new ones at once."""
    with StallingApi(healthy=True) as api:
        conn = api.connection()
        watcher = Watcher(conn, NS, threading.Event())
        assert isinstance(take(watcher.list_then_watch(), 1)[0], Listed)
        conn.get(NS.path("v1"))  # an idle connection in the pool (the watch's was dropped with it, or closed)
        idle_before = len(api._sockets)
        api.stall_open_connections()
        started = time.monotonic()
        events = take(watcher.list_then_watch(), 2)
        assert [type(e) for e in events] == [Listed, Watching]
        assert time.monotonic() - started < 0.5, "the relist waited on a stalled pooled connection"
        assert len(api._sockets) > idle_before


def _given_up_after_the_list_timeout(api: "StallingApi") -> None:
    """A streamed list from `api` with a 0.5 s list timeout: cut after it, and the next allowed twice as long."""
    watcher = Watcher(api.connection(), NS, threading.Event(), stream_slack=0.5, watch_list=True)
    watcher.list_timeout = 0.5
    started = time.monotonic()
    with pytest.raises(kubeapi.TimedOut, match="streamed list stalled: timed out after 0.5s"):
        list(watcher.stream_list(NS.path("v1")))
    assert 0.45 <= time.monotonic() - started < 1.5
    assert watcher.list_timeout == 1.0 and watcher.watch_list


def test_a_streamed_list_silent_before_its_end_is_given_up_after_the_list_timeout() -> None:
    """A stall during the initial events heals as fast as a stalled page: cut after `list_timeout` of
    silence (not at the stream's timeoutSeconds), and the next list is allowed twice as long."""
    with StallingApi() as api:
        api.events = [{"type": "ADDED", "object": {"metadata": {"name": "ns2", "resourceVersion": "2"}}}]
        _given_up_after_the_list_timeout(api)
        assert "sendInitialEvents=true" in api.requests[0] and "timeoutSeconds=" in api.requests[0]


def test_after_its_end_a_streamed_list_is_held_to_the_watch_rules() -> None:
    """Past the end marker the stream is a watch: silence is normal until its timeoutSeconds; and a
    consumer slower than the list timeout (the source applying pages) is not a silent server."""
    with StallingApi(healthy=True) as api:
        api.events = [{"type": "ADDED", "object": {"metadata": {"name": f"ns{i}", "resourceVersion": str(i)}}}
                      for i in range(2, 5)]
        api.events.append({"type": "BOOKMARK", "object": {"metadata": {
            "resourceVersion": "7", "annotations": {watching.INITIAL_EVENTS_END: "true"}}}})
        watcher = Watcher(api.connection(), NS, threading.Event(), resync=1.0, stream_slack=0.5, watch_list=True)
        watcher.list_timeout = 0.3
        events = []
        for event in watcher.stream_list(NS.path("v1")):
            events.append(event)
            time.sleep(0.4)  # slower than the list timeout, event after event
        assert [type(e) for e in events] == [Listed, Watching]
        assert [o.name for o in events[0].objects] == ["ns2", "ns3", "ns4"] and events[0].resource_version == "7"
        assert watcher.list_timeout == watching.LIST_TIMEOUT and watcher.watch_list
        assert "timeoutSeconds=1&" in api.requests[0] or api.requests[0].endswith("timeoutSeconds=1")


def test_a_streamed_list_whose_headers_never_come_is_given_up_after_the_list_timeout() -> None:
    """A page's limit, not the watch's: a stalled request heals in LIST_TIMEOUT whichever way the list is read."""
    with StallingApi(stall_headers=True) as api:
        _given_up_after_the_list_timeout(api)
