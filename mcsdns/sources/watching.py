"""List-then-watch of one resource, as small blocking generators (kopf's shape).

    forever()          retries with capped, jittered backoff; 410 means "list again"
      list_then_watch() discovery (ServiceImport), a list, then watches
        stream_list()   the list as one watch stream (KEP-3157), which then watches on
        list()          or the paginated list, when the API server does not stream lists
        stream()        one watch stream from a resourceVersion

Each runs on a worker thread and yields events (events.py); the source hands
them to the event loop, which alone touches the store. Raw JSON is converted to
the small records of objects.py here, item by item, so a relist never holds
more than a few pages of raw objects (the next is read while one is converted). The resourceVersion advances on every event,
bookmarks included, so a reconnect resumes where the last stream stopped.

A stream is asked to end at its timeoutSeconds, which never runs past the next
resync; one still open STREAM_SLACK later, with nothing read for as long, is
stalled (the connection stays open and silent), so a watchdog cuts it then: a
stall delays the relist that heals it by a few seconds, not by a read timeout.
Every list and every stream starts on a new connection (the pool's idle ones,
which may have stalled unnoticed, are dropped first, and again when a stall was
detected), and a list or discovery request silent for LIST_TIMEOUT is given up
and retried, so a stall that catches a list heals as fast as one that catches
a watch.

Streaming lists (KEP-3157, "WatchList"): a watch with sendInitialEvents=true is
served from the API server's watch cache as one ADDED event per object, then a
BOOKMARK annotated `k8s.io/initial-events-end`, whose resourceVersion is the
list's, and then goes on as a normal watch. That is a list without pagination
and without reading etcd (a paginated list of a custom resource is read from
etcd page by page), read event by event like a watch, so it holds no more at
once than a page. `stream_list` turns the initial events into the same
ListedPage/Listed events as `list`, PAGE_SIZE objects each, and keeps reading
the stream as the watch. While the initial events last, the stream is held to
the list's limit on silence (LIST_TIMEOUT), not the watch's, so a stall there
heals as fast as a stalled page. An API server that refuses it (400/422: the
WatchList feature gate off, or a server older than 1.27) or that ignores it (a
bookmark or a change before the end marker) is listed in pages from then on;
one that ends the stream before the marker (its timeoutSeconds, a shutdown) is
listed in pages this time.

List requests, where lists are not streamed (a server older than 1.32 has the WatchList
feature gate off: it refuses sendInitialEvents with a 422): a paginated list with no
resourceVersion is a consistent read from etcd, page by page, slower than client-go's
reflector, which starts with resourceVersion=0, which the watch cache serves whole and at
once (ignoring the limit). So the first list asks for resourceVersion=0 too, still with
the limit: what the server answers decides the relists. A list of more than PAGE_SIZE objects answered in one
response came from the watch cache, which pages nothing: relists then ask it for the
whole list again, not older than what was seen (resourceVersion=<last>, NotOlderThan,
no limit: a limit would send them to etcd), as client-go does; the response holds no
more than the first list's did. A server that answers in pages is listed in pages,
consistent reads. The strategy in use is logged once per resource, and
again when the server's answers change it (`chose`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..objects import (
    ABOUT_GROUP,
    LABEL_SERVICE_NAME,
    MCS_GROUP,
    InvalidObject,
    Object,
    ObjectKey,
    reason_of,
    to_cluster_property,
    to_endpoint_slice,
    to_namespace,
    to_service_import,
)
from . import decode
from .ahead import ahead
from .events import (
    Bookmark,
    Deleted,
    Event,
    Expired,
    Listed,
    ListedPage,
    Problem,
    Rejected,
    Upserted,
    UsingVersion,
    Watching,
)
from .kubeapi import (
    JSON,
    LIST_TIMEOUT,
    METADATA_LIST,
    METADATA_WATCH,
    REQUEST_TIMEOUT,
    ApiConnection,
    ApiError,
    Forbidden,
    Gone,
    NotFound,
    NotInstalled,
    ServerError,
    Throttled,
    TimedOut,
    Unauthorized,
    Unreachable,
    error_for,
    interrupt,
    set_read_timeout,
    stream_lines,
)

log = logging.getLogger(__name__)

PAGE_SIZE = 500  # objects per list page: bounds the raw JSON held at once
WATCH_TIMEOUT = 300.0  # streams last 300-600 s (client-go's spread), so they recycle and rebalance
STREAM_SLACK = 5.0  # the server ends a stream at timeoutSeconds; still open this much later, it is stalled
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 30.0  # API server down: retry at least every 30 s
ABSENT_CAP = 10.0  # missing CRD or permission: a fix (kubectl apply) is picked up within 10 s
SERVICE_IMPORT_VERSIONS = ("v1beta1", "v1alpha1")  # preference order (project decision 2)
CLUSTER_PROPERTY_VERSIONS = ("v1", "v1beta1", "v1alpha1")  # KEP-2149's target first; about-api serves the others


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    """How one watched kind is addressed and converted."""

    kind: str  # the store's kind
    plural: str  # also the metrics label
    group: str  # "" = core
    versions: tuple[str, ...]  # more than one: discover which is served, first preferred
    convert: Callable[[dict], Object]
    label_selector: str | None = None
    list_accept: str = JSON
    watch_accept: str = JSON

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}"

    def path(self, version: str) -> str:
        prefix = f"/apis/{self.group}/{version}" if self.group else f"/api/{version}"
        return f"{prefix}/{self.plural}"


def resources(labels: str | None, cluster_properties: bool = False) -> tuple[Resource, ...]:
    """The watched resources; `labels` is ANDed onto the MCS slice selector (CoreDNS `labels`).

    `cluster_properties` (--local-cluster auto) adds the KEP-2149 ClusterProperties, the one
    place the cluster id lives; without the flag they are never read (nor need RBAC).
    """
    selector = LABEL_SERVICE_NAME + (f",{labels}" if labels else "")
    watched = (
        Resource("Namespace", "namespaces", "", ("v1",), to_namespace,
                 list_accept=METADATA_LIST, watch_accept=METADATA_WATCH),
        Resource("ServiceImport", "serviceimports", MCS_GROUP, SERVICE_IMPORT_VERSIONS, to_service_import),
        Resource("EndpointSlice", "endpointslices", "discovery.k8s.io", ("v1",), to_endpoint_slice,
                 label_selector=selector),
    )  # fmt: skip
    if cluster_properties:
        watched += (Resource("ClusterProperty", "clusterproperties", ABOUT_GROUP, CLUSTER_PROPERTY_VERSIONS,
                             to_cluster_property),)  # fmt: skip
    return watched


INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the annotation of the bookmark ending a streamed list
STREAM_LIST_CUTS = 3  # streamed lists cut or failed (5xx) before their end marker in a row: pages from then on


def problem_for(resource: Resource, exc: ApiError, retry_in: float) -> Problem:
    """The human-readable state for /ready and the logs."""
    if isinstance(exc, NotInstalled) or (isinstance(exc, NotFound) and resource.group in (MCS_GROUP, ABOUT_GROUP)):
        return Problem("not-installed", f"the CRD {resource.crd} is not installed ({exc})", retry_in)
    categories: list[tuple[type[ApiError], str, str]] = [
        (Forbidden, "forbidden", "forbidden"),
        (Unauthorized, "unauthorized", "unauthorized (the API server rejected the credentials)"),
        (NotFound, "not-found", "not served by the API server"),
        (Unreachable, "unreachable", "API server unreachable"),
        (Throttled, "throttled", "API server busy"),
        (ServerError, "server-error", "API server error"),
    ]
    for cls, category, text in categories:
        if isinstance(exc, cls):
            return Problem(category, f"{text} ({exc})", retry_in)
    return Problem("error", f"HTTP {exc.status} ({exc})", retry_in)


# --------------------------------------------------------------------------- backoff


@dataclass
class Backoff:
    """0.5 s doubling up to a cap, each delay jittered by +-20% so clients do not retry in step."""

    first: float = BACKOFF_FIRST
    cap: float = BACKOFF_CAP
    attempt: int = 0

    def next(self, cap: float | None = None) -> float:
        delay = min(cap or self.cap, self.first * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 16)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.attempt = 0


# --------------------------------------------------------------------------- the watchdog


class Watchdog:
    """Cuts a stream's connection, from its own thread, once it is both overdue and silent.

    Overdue: `seconds` have passed. Silent: nothing was read for `quiet` seconds
    (`alive()` is called for each line), so a stream still working through what
    the server sent before it ended is never cut. `interrupt` shuts the socket
    down and the blocked read returns at once; `fired` tells the reader why.

    `listing` (a streamed list, until its end marker: `listed()`): silent for that
    long is enough, overdue or not, as for a list page (`listing_fired` says so).
    `hold()`: the reader is handing an event over, not waiting for the server (the
    source applies a page before it takes the next): not silence, until `alive()`.
    """

    def __init__(self, seconds: float, quiet: float, resp: Any, listing: float | None = None) -> None:
        self.fired = False
        self.listing_fired = False
        self._due = time.monotonic() + seconds
        self._quiet = quiet
        self._last = float("-inf")
        self._listing = listing
        self._listing_from = time.monotonic()
        self._resp = resp
        self._cancelled = threading.Event()
        threading.Thread(target=self._run, name="watch-watchdog", daemon=True).start()

    def alive(self) -> None:
        self._last = self._listing_from = time.monotonic()

    def hold(self) -> None:
        self._last = self._listing_from = float("inf")

    def listed(self) -> None:
        self._listing = None

    def _run(self) -> None:
        # At most a second at a time: a held reader has no deadline until it reads again.
        while not self._cancelled.wait(min(max(0.0, self._cut_at() - time.monotonic()), 1.0)):
            if time.monotonic() >= self._cut_at():
                self.listing_fired = self._listing is not None
                self.fired = True
                interrupt(self._resp)
                return

    def _cut_at(self) -> float:
        at = max(self._due, self._last + self._quiet)
        if self._listing is not None:
            at = min(at, self._listing_from + self._listing)
        return at

    def cancel(self) -> None:
        self._cancelled.set()


# --------------------------------------------------------------------------- the watch


def rejection_reason(exc: InvalidObject) -> str:
    """`spec.ips[0]: ...` -> `spec.ips`: a bounded label for the rejected-objects metric."""
    return reason_of(str(exc))


def object_key(raw: Any) -> ObjectKey | None:
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    return (str(meta.get("namespace") or ""), meta["name"])


class NotStreamed(ApiError):
    """The API server answered a streamed list as an ordinary watch: it ignores sendInitialEvents."""


def refuses_streaming(exc: ApiError) -> bool:
    """The API server cannot stream lists: 400/422 (the request is invalid to it) or it ignored the request."""
    return isinstance(exc, NotStreamed) or (type(exc) is ApiError and exc.status in (400, 422))


@dataclass
class Initial:
    """The initial events of a streamed list read so far: the objects of the page being gathered."""

    objects: list[Object] = field(default_factory=list)
    keep: set[ObjectKey] = field(default_factory=set)  # rejected on this page: their last good version stays
    first: bool = True  # no page handed over yet


@dataclass
class Watcher:
    """One resource's list-then-watch loop; runs on its own thread until `stop` is set."""

    conn: ApiConnection
    resource: Resource
    stop: threading.Event
    resync: float = 0.0  # seconds between full relists; 0 disables
    resource_version: str = ""
    backoff: Backoff = field(default_factory=Backoff)
    listed_at: float = float("-inf")  # time.monotonic() of the last complete list
    stream_slack: float = STREAM_SLACK
    list_timeout: float = LIST_TIMEOUT  # silence allowed to the next list or discovery request (see get())
    watch_list: bool = False  # list by a streamed list (KEP-3157) first; False once the server refused one
    list_took: float = 0.0  # seconds the last complete list took (a streamed list's timeoutSeconds covers it)
    stream_list_cuts: int = 0  # streamed lists in a row that ended before their end marker
    whole_from_cache: bool = False  # the server answered a list whole from its watch cache: relists ask for that
    strategy: str = ""  # the list strategy last logged (`chose`)
    refused: str = ""  # why the server does not stream lists, when it refused one
    _initial: Initial | None = field(default=None, init=False, repr=False)  # a streamed list is being read
    _response: Any = field(default=None, init=False, repr=False)  # the open stream, for interrupt()

    # -- level 1: forever ----------------------------------------------------

    def forever(self) -> Iterator[Event]:
        """List-then-watch again and again; only `stop` ends it."""
        while not self.stop.is_set():
            try:
                yield from self.list_then_watch()
            except Gone as exc:
                yield Expired(str(exc))  # routine: the relist below heals it
                if time.monotonic() - self.listed_at < 1.0:
                    self.stop.wait(self.backoff.next())  # expired right after a list: do not spin
            except ApiError as exc:
                if self.stop.is_set():
                    return
                absent = isinstance(exc, (NotFound, Forbidden, Unauthorized))
                delay = self.backoff.next(ABSENT_CAP if absent else None)
                yield problem_for(self.resource, exc, delay)
                self.stop.wait(delay)

    # -- level 2: list, then watch ---------------------------------------------

    def list_then_watch(self) -> Iterator[Event]:
        """Discover, list (streamed, else paginated), then watch until a relist is due or needed."""
        self.conn.drop_idle()  # a relist never starts on a pooled connection that may have stalled
        version = yield from self.discover()
        path = self.resource.path(version)
        listed = self.watch_list and (yield from self.stream_list(path))
        if not listed:
            if self.stop.is_set():
                return
            started = time.monotonic()
            yield from self.list(path)
            self.list_took = time.monotonic() - started
        self.backoff.reset()
        resync_at = self.listed_at + self.resync if self.resync > 0 else None
        while not self.stop.is_set():
            timeout = self.watch_timeout(resync_at)
            if timeout is None:
                return  # periodic resync: forever() lists again
            try:
                yield from self.stream(path, timeout)
            except (Unreachable, Throttled, ServerError) as exc:
                yield from self.stream_failed(exc)  # then watch again from the last resourceVersion

    def stream_failed(self, exc: ApiError) -> Iterator[Event]:
        """A watch stream broke: say so, and wait out the backoff before the next one."""
        if self.stop.is_set():
            return
        delay = self.backoff.next()
        yield problem_for(self.resource, exc, delay)
        self.stop.wait(delay)

    def stream_list(self, path: str) -> Iterator[Event]:
        """The list as one watch stream that then goes on watching; False: list in pages instead.

        Its timeoutSeconds runs to the resync after the list, the list taking as long as the
        last one did. True once the list is complete, when the stream ends or breaks (the
        watch goes on from its resourceVersion). Before the end marker, what a failed list
        raises is raised, but for a refusal (`watch_list` off from then on), a 403 (pages this
        time: the list may be allowed where the watch is not), and an end before the marker or a
        server error (5xx, an answer that is not JSON) before it: pages this time, as client-go
        falls back to a list when its streamed list fails, so a server (or a proxy in front of
        it) that fails every streamed list still gets listed; after STREAM_LIST_CUTS such
        failures in a row, pages from then on.
        """
        started = time.monotonic()
        resync_at = started + self.list_took + self.resync if self.resync > 0 else None
        self._initial = Initial()
        why = "the streamed list ended before its end marker"
        try:
            yield from self.stream(path, self.watch_timeout(resync_at) or 1, listing=True)
        except ServerError as exc:
            if self._initial is None:
                yield from self.stream_failed(exc)
            else:
                why = f"the streamed list failed ({exc})"
        except (Unreachable, Throttled) as exc:
            if self._initial is not None:
                raise  # the list failed, as a failed page does (its backoff applies to pages too)
            yield from self.stream_failed(exc)
        except ApiError as exc:
            if self._initial is not None and isinstance(exc, Forbidden):
                return False  # RBAC may grant the list without the watch: the paginated list says
            if self._initial is None or not refuses_streaming(exc):
                raise
            self.watch_list = False
            self.refused = f"the API server does not stream lists: {exc}"
            return False
        finally:
            cut = self._initial is not None
            self._initial = None
        if cut:
            if not self.stop.is_set():
                self.stream_list_cuts += 1
                self.watch_list = self.stream_list_cuts < STREAM_LIST_CUTS
                log.info("%s: %s; listing in pages", self.resource.kind, why)
            return False
        self.stream_list_cuts = 0
        self.list_took = self.listed_at - started
        return True

    def discover(self) -> Iterator[Event]:
        """The API version to use; for ServiceImport, the preferred one that discovery serves."""
        if len(self.resource.versions) == 1:
            return self.resource.versions[0]
        group = self.resource.group
        try:
            served = {v.get("version") for v in self.get(f"/apis/{group}").get("versions") or []}
        except NotFound as exc:
            raise NotInstalled(f"API group {group} is not served") from exc
        for version in self.resource.versions:
            if version not in served:
                continue
            try:
                listing = self.get(f"/apis/{group}/{version}")
            except NotFound:
                continue
            if any(r.get("name") == self.resource.plural for r in listing.get("resources") or []):
                yield UsingVersion(f"{group}/{version}")
                return version
        raise NotInstalled(f"{group} serves no {self.resource.plural} in {', '.join(self.resource.versions)}")

    def list(self, path: str) -> Iterator[Event]:
        """Every object, converted as read: a ListedPage per page but the last, which is the Listed.

        Each page is handed over as soon as it is read and its raw JSON dropped, so a relist of
        50k objects never sits in memory whole beside the store (the source applies pages as
        they come and sweeps at the Listed). A list of one page is one Listed. The next page
        is requested while this one is converted (`ahead`): the round trips overlap the work.
        """
        first = True
        cached = self.whole_from_cache or not self.resource_version  # asked of the watch cache (pages())
        for page in ahead(self.pages(path), self.stop, f"list-{self.resource.plural}"):
            objects: list[Object] = []
            keep: set[ObjectKey] = set()
            items = len(page.get("items") or [])
            for raw in page.get("items") or []:
                obj = self.convert(raw)
                if isinstance(obj, Rejected):
                    keep.add(obj.key)
                    yield obj
                elif obj is not None:
                    objects.append(obj)
            meta = page.get("metadata") or {}
            del page  # the raw JSON of this page: not kept while the next ones are read
            if not meta.get("continue"):
                self.resource_version = str(meta.get("resourceVersion") or "")
                self.listed_at = time.monotonic()
                self.list_timeout = LIST_TIMEOUT
                if cached:
                    self.choose_relist(first, items)
                yield Listed(objects, frozenset(keep), self.resource_version, whole=first)
                return
            yield ListedPage(objects, frozenset(keep), first)
            first = False
            del objects
            if self.stop.is_set():
                return
        # Ended before its last page: stopping (a list cut short never sweeps).

    def choose_relist(self, first: bool, items: int) -> None:
        """What a list request's answer says about the server's lists (module docstring): relist whole or in pages."""
        refused = f"{self.refused}; " if self.refused else ""
        if not first:
            self.whole_from_cache = False
            self.chose("pages", f"{refused}it answers lists in pages of {PAGE_SIZE}")
        elif items > PAGE_SIZE or self.whole_from_cache:
            self.whole_from_cache = True
            self.chose("whole list from the watch cache",
                       f"{refused}it answered a list of {items} with a limit of {PAGE_SIZE} in one response")
        else:
            self.chose("pages", f"{refused}{items} objects fit one page")

    def chose(self, strategy: str, why: str) -> None:
        """Log the list strategy once per resource, and again when the server's answers change it."""
        if strategy != self.strategy:
            self.strategy = strategy
            log.info("%s: listing by %s (%s)", self.resource.kind, strategy, why)

    def pages(self, path: str) -> Iterator[dict]:
        """The decoded pages of one list, each requested with the previous one's continue token.

        The first list asks the watch cache (resourceVersion=0, the limit kept: a server that
        pages from its cache pages); relists ask it for the whole list when it answered that
        way before, or read pages from etcd (module docstring).
        """
        token: str | None = None
        base: dict[str, Any] = {"limit": PAGE_SIZE}
        if self.whole_from_cache and self.resource_version:
            base = {"resourceVersion": self.resource_version, "resourceVersionMatch": "NotOlderThan"}
        elif not self.resource_version:
            base = {"limit": PAGE_SIZE, "resourceVersion": "0"}
        while True:
            query = {**base, "labelSelector": self.resource.label_selector, "continue": token}
            if token is not None:
                query.pop("resourceVersion", None)  # a continue token carries the list's own
            page = self.get(path, query, self.resource.list_accept, decode.page)
            token = (page.get("metadata") or {}).get("continue") or None
            yield page
            del page  # not held while the next page is read
            if token is None:
                return

    def get(self, path: str, query: dict[str, Any] | None = None, accept: str = JSON,
            parse: Callable[[bytes], Any] = decode.loads) -> dict:
        """A list page or discovery document, given up after `list_timeout` of silence.

        A timeout is taken for a stall: the pool's idle connections (which went through the
        same link) are dropped and the retry gets twice the limit (up to REQUEST_TIMEOUT), in
        case the API server was only queueing the request; a complete list resets it.
        """
        try:
            return self.conn.get(path, query, accept, self.list_timeout, parse)
        except TimedOut:
            self.list_timeout = min(2 * self.list_timeout, REQUEST_TIMEOUT)
            self.conn.drop_idle()
            raise

    def watch_timeout(self, resync_at: float | None) -> int | None:
        """timeoutSeconds for the next stream: jittered, and ending when the resync is due."""
        timeout = random.uniform(WATCH_TIMEOUT, 2 * WATCH_TIMEOUT)
        if resync_at is not None:
            remaining = resync_at - time.monotonic()
            if remaining < 0.5:
                return None
            timeout = min(timeout, remaining)
        return max(1, round(timeout))

    # -- level 3: one stream -------------------------------------------------

    def stream(self, path: str, timeout: int, listing: bool = False) -> Iterator[Event]:
        """Events of one watch stream from the current resourceVersion, until the server ends it.

        The server ends the stream at `timeout`; if it has not `stream_slack` later and
        nothing arrived for as long, the link is stalled (a dead peer, a proxy that
        stopped forwarding) and the watchdog cuts it: the stream fails as Unreachable,
        like any broken stream. Waiting for the headers is bounded by the read
        timeout, which the watchdog cannot reach.

        `listing`: a streamed list (`stream_list`, its `Initial` set): the current state
        first, up to its end marker, during which a silence of `list_timeout` is cut as
        a stalled list (TimedOut, the next one allowed twice as long, as in `get`).
        """
        query = {
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout,
            "labelSelector": self.resource.label_selector,
        }
        if listing:  # the state "not older than" the latest: served from the watch cache
            query.update(resourceVersion="", sendInitialEvents="true", resourceVersionMatch="NotOlderThan")
        limit = timeout + self.stream_slack
        self.conn.drop_idle()  # the stream starts on a new connection, not on one that may have stalled idle
        opened = time.monotonic()
        if listing:  # its headers are waited for as long as a list page's, then it reads on as a watch
            try:
                resp = self.conn.open(path, query, self.resource.watch_accept, self.list_timeout)
            except TimedOut as exc:
                self.conn.drop_idle()
                raise self.list_stalled() from exc
            if not set_read_timeout(resp, limit):  # no socket to reach: its reads would stay this short
                resp.close()
                raise NotStreamed("the streamed list's connection has no socket to set the watch's read timeout on")
        else:
            resp = self.conn.open(path, query, self.resource.watch_accept, limit)
        # Counted from the headers: the server started its timeoutSeconds before it sent them.
        watchdog = Watchdog(limit, self.stream_slack, resp, self.list_timeout if listing else None)
        self._response = resp
        try:
            if self.stop.is_set():
                return
            if not listing:
                yield Watching(self.resource_version)
            for line in stream_lines(resp):
                watchdog.alive()
                try:
                    event = decode.event(line)
                except ValueError as exc:
                    raise ServerError("a watch event is not JSON") from exc
                for out in self.event(event):
                    watchdog.hold()
                    yield out
                    watchdog.alive()
                if listing and self._initial is None:
                    watchdog.listed()
                    listing = False
        except (Unreachable, ServerError) as exc:
            # The cut read fails one way or another: report why it was cut. The socket's read timeout
            # (also `limit`, counted from the last byte) can beat the watchdog's thread to the same
            # stall: silent for `limit`, past the stream's end.
            if watchdog.listing_fired:
                raise self.list_stalled() from exc
            if watchdog.fired or (isinstance(exc, Unreachable) and time.monotonic() >= opened + limit):
                raise self.stalled(timeout) from exc
            raise
        finally:
            watchdog.cancel()
            self._response = None
            resp.close()
            if watchdog.fired:
                self.conn.drop_idle()  # a stall detected: idle connections over the same link are suspect too
        if watchdog.listing_fired:
            raise self.list_stalled()
        if watchdog.fired:
            raise self.stalled(timeout)

    def stalled(self, timeout: int) -> Unreachable:
        slack = self.stream_slack
        return Unreachable(f"watch stream stalled: still open {slack:g}s after its timeoutSeconds={timeout}")

    def list_stalled(self) -> TimedOut:
        """A streamed list silent for `list_timeout`: given up like a page (get), the next waits twice as long."""
        silent, self.list_timeout = self.list_timeout, min(2 * self.list_timeout, REQUEST_TIMEOUT)
        return TimedOut(f"streamed list stalled: timed out after {silent:g}s without an event")

    def event(self, event: Any) -> Iterator[Event]:
        """One watch event -> store events; ERROR events raise their mapped ApiError."""
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise ServerError("a watch event has no object")
        kind, raw = event.get("type"), event["object"]
        if kind == "ERROR":
            raise error_for(int(raw.get("code") or 500), raw)
        if self._initial is not None:
            yield from self.initial_event(self._initial, kind, raw)
            return
        version = (raw.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        arrived = time.monotonic()
        if kind == "BOOKMARK":
            yield Bookmark(self.resource_version)
        elif kind in ("ADDED", "MODIFIED"):
            self.backoff.reset()
            obj = self.convert(raw)
            if isinstance(obj, Rejected):
                yield obj
            elif obj is not None:
                yield Upserted(obj, arrived)
        elif kind == "DELETED":
            self.backoff.reset()
            key = object_key(raw)
            if key is not None:
                yield Deleted(key, arrived)

    def initial_event(self, initial: Initial, kind: Any, raw: dict) -> Iterator[Event]:
        """An event of a streamed list before its end marker: gathered into pages as `list` hands them over.

        Every PAGE_SIZE objects are a ListedPage; the marker (its resourceVersion is the
        list's) ends the list with a Listed of the rest, and the stream is a watch from then
        on (Watching). Anything else before the marker means the server does not stream lists.
        """
        if kind == "ADDED":
            obj = self.convert(raw)
            if isinstance(obj, Rejected):
                initial.keep.add(obj.key)
                yield obj
            elif obj is not None:
                initial.objects.append(obj)
                if len(initial.objects) >= PAGE_SIZE:
                    page = ListedPage(initial.objects, frozenset(initial.keep), initial.first)
                    initial.objects, initial.keep, initial.first = [], set(), False
                    yield page
            return
        meta = raw.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        annotations = meta.get("annotations")
        if kind != "BOOKMARK" or not isinstance(annotations, dict) or annotations.get(INITIAL_EVENTS_END) != "true":
            raise NotStreamed(f"a {kind} event before the end of the initial events")
        self._initial = None
        self.chose("streamed list", f"the API server sent the initial events and the {INITIAL_EVENTS_END} bookmark")
        self.resource_version = str(meta.get("resourceVersion") or "")
        self.listed_at = time.monotonic()
        self.list_timeout = LIST_TIMEOUT
        yield Listed(initial.objects, frozenset(initial.keep), self.resource_version, whole=initial.first)
        yield Watching(self.resource_version)

    def convert(self, raw: Any) -> Object | Rejected | None:
        """The record for a raw object, or why DNS cannot use it (None: not even a name).

        Anything a converter raises counts as a rejection of that one object: the
        API validates what it stores, so a surprise here is one odd object, and
        it must not stop the watch of all the others.
        """
        try:
            return self.resource.convert(raw)
        except Exception as exc:  # noqa: BLE001 - see docstring
            key = object_key(raw)
            if key is None:
                log.error("%s without a usable name skipped: %s", self.resource.kind, exc)
                return None
            ref = f"{self.resource.kind} {key[0]}/{key[1]}" if key[0] else f"{self.resource.kind} {key[1]}"
            if isinstance(exc, InvalidObject):
                return Rejected(ref, key, rejection_reason(exc), str(exc))
            return Rejected(ref, key, "invalid", f"cannot read it ({type(exc).__name__}: {exc})")

    def interrupt(self) -> None:
        """Called from another thread at shutdown: unblock a pending read at once."""
        resp = self._response
        if resp is not None:
            interrupt(resp)
