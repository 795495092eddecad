"""The Kubernetes API source: ServiceImports, MCS EndpointSlices and Namespaces, watched.

Each resource's list-then-watch (watching.py) blocks on HTTP, so it runs on its
own daemon thread; its events come back to the event loop through
`call_soon_threadsafe`, in order, and only the loop touches the store (and so
the record table). That split keeps the DNS path free of blocking I/O and of
locks.

A list is applied page by page by a relist.Relist (mark and sweep): the
kind's keys are taken when its first page arrives, each page's objects go into
the store as it arrives and strike their keys off, and the end of the list
deletes the keys left. Until then objects not re-listed yet stay in service, so
a relist never takes an answer away that it does not end up removing. The
thread waits for a page to be applied before handing over the next, so at
most two pages of new objects exist besides the store's own: a relist of 50k
objects never holds a second copy of them.

Failure policy, resource by resource:
  * not listed yet (missing CRD, RBAC forbids it, API down): not ready, the
    reason in /ready and in one log line per change of state, retried with
    backoff; serving starts as soon as the list succeeds, without a restart;
  * listed once: an API outage never empties the table; answers come from
    the last known state while `mcsdns_watch_up` is 0;
  * an object DNS cannot represent is logged, counted and skipped, and its
    last good version stays in service;
  * with --delete-grace, a deleted ServiceImport keeps its answers for that
    long and a re-creation within it takes over without a gap (relist.DeleteGrace).

What the source reads of the configuration is a `KubeSettings`, built once from
the `Config` by `config.kube_settings` (the sources never import the DNS side).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..objects import ClusterProperty, EndpointSlice, Namespace, Object, ServiceImport, report_omitted, report_status_notes
from ..store import Store
from .kubeapi import ApiConnection, load_configuration
from .relist import DeleteGrace, Relist
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
from .watching import Resource, Watcher, resources

if TYPE_CHECKING:  # asyncio is imported by `run`: `begin` runs before anything else needs it (cli)
    import asyncio

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 2.0  # seconds to wait for watch threads after interrupting them (they are daemons anyway)


@dataclass(frozen=True)
class KubeSettings:
    """What the Kubernetes source reads of the configuration (built once by `config.kube_settings`)."""

    kubeconfig: Path | None = None  # --kubeconfig
    context: str | None = None  # --context
    in_cluster: bool = False  # the pod's service account (no --kubeconfig in a pod)
    labels: str | None = None  # --labels: ANDed onto the MCS EndpointSlice selector
    cluster_properties: bool = False  # --local-cluster auto: watch the KEP-2149 ClusterProperties too
    resync: float = 600.0  # --resync: seconds between full relists; 0 disables
    delete_grace: float = 0.0  # --delete-grace: seconds a deleted ServiceImport keeps answering; 0: at once


class SourceCrashed(RuntimeError):
    """A watch thread died of an unexpected error (a bug): the app stops rather than go stale silently."""


@dataclass
class ResourceState:
    """What the loop knows about one resource, for /ready, logs and metrics."""

    resource: Resource
    watcher: Watcher | None = None
    thread: threading.Thread | None = None
    synced: bool = False
    up: bool = False
    problem: Problem | None = None
    down_since: float | None = None
    api_version: str = ""
    streams: int = 0
    # Rejections already logged, by object: a resync re-reads the same invalid version
    # every few minutes, and that is not news.
    rejections: dict[tuple[str, str], str] = field(default_factory=dict)
    # Objects served without a part DNS cannot represent (decision 12), by object: reported once per version.
    omissions: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    # A list read in pages is in progress: pages applied, its end (the sweep) not seen yet.
    relist: Relist | None = None
    # Taken by the thread before it hands over a page, released once the loop applied it.
    page_slot: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(1))

    def describe(self) -> str:
        if self.problem is not None:
            return self.problem.detail
        if not self.synced:
            return "waiting for the initial list"
        return "watching" if self.up else "reconnecting"


class KubeSource:
    """Feeds the store from the API server; `run(stop)` returns promptly once `stop` is set."""

    def __init__(self, settings: KubeSettings, store: Store | None = None, metrics: Any = None) -> None:
        self.settings = settings
        # Only the loop's handlers read these: a source begun before the App exists has them attached later.
        self.store: Store = store  # type: ignore[assignment]
        self.metrics = metrics
        self.states = {r.kind: ResourceState(r) for r in resources(settings.labels, settings.cluster_properties)}
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: ApiConnection | None = None
        self._begin_error: Exception | None = None  # the kubeconfig could not be loaded: raised by run()
        # Events the threads posted before run() had the loop (a source begun early), in order.
        self._early: list[tuple[ResourceState, Event]] = []
        self._early_lock = threading.Lock()
        self._crashed: BaseException | None = None
        self._crash: asyncio.Event | None = None  # made by run(), on the loop
        # --delete-grace: ServiceImports deleted by the API but still served; timers run on the loop.
        self.grace = DeleteGrace(settings.delete_grace, self._call_later)
        self._status_notes: dict[tuple[str, str], tuple[str, ...]] = {}  # per import: what its status lacked, logged

    # ----------------------------------------------------------------- lifecycle

    def attach(self, store: Store, metrics: Any) -> KubeSource:
        """Give a source made before the App (`begin`) the App's store and metrics."""
        self.store, self.metrics = store, metrics
        return self

    def begin(self) -> None:
        """Connect and start the watch threads now, before `run` (which does it if not done).

        `cli._begin_source` calls this before the rest of the server is imported and built: an API
        server that answers lists whole encodes a large one before its first byte, and that wait then
        overlaps the start-up still to come instead of following it. The threads' events wait in `_early` until `run` has
        the loop. A kubeconfig that cannot be loaded is raised by `run`, as when nothing began early.
        """
        if self._conn is not None or self._begin_error is not None:
            return
        settings = self.settings
        try:
            configuration = load_configuration(settings.kubeconfig, settings.context, settings.in_cluster)
            conn = ApiConnection(configuration)
        except Exception as exc:  # noqa: BLE001 - raised by run(), where the App handles a source's failure
            self._begin_error = exc
            return
        self._conn = conn
        log.info("watching the Kubernetes API at %s", conn.host)
        for state in self.states.values():
            self._start(state, conn)

    async def run(self, stop: asyncio.Event) -> None:
        import asyncio

        self._crash = asyncio.Event()
        self.begin()
        if self._begin_error is not None:
            raise self._begin_error
        conn = self._conn
        assert conn is not None
        loop = asyncio.get_running_loop()
        with self._early_lock:  # what was posted before is queued first; then `_post` queues directly
            for state, event in self._early:
                loop.call_soon_threadsafe(self._handle, state, event)
            self._early.clear()
            self._loop = loop
        if self._crashed is not None:
            self._crash.set()  # a thread died before the loop was there to hear it
        try:
            stopping = asyncio.ensure_future(stop.wait())
            crashed = asyncio.ensure_future(self._crash.wait())
            try:
                await asyncio.wait({stopping, crashed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                crashed.cancel()
            if self._crashed is not None:
                raise SourceCrashed(f"watch thread failed: {self._crashed!r}") from self._crashed
        finally:
            await self._shutdown(conn)

    def _start(self, state: ResourceState, conn: ApiConnection) -> None:
        state.watcher = Watcher(conn, state.resource, self._stop, resync=self.settings.resync, watch_list=True)
        state.thread = threading.Thread(
            target=self._pump, args=(state,), name=f"watch-{state.resource.plural}", daemon=True
        )
        state.thread.start()

    async def _shutdown(self, conn: ApiConnection) -> None:
        """Interrupt every blocking read, then give the threads a moment to notice."""
        import asyncio

        self._stop.set()
        for state in self.states.values():
            if state.watcher is not None:
                state.watcher.interrupt()
        deadline = time.monotonic() + SHUTDOWN_GRACE
        while any(s.thread is not None and s.thread.is_alive() for s in self.states.values()):
            if time.monotonic() > deadline:
                log.debug("watch threads still blocked at shutdown; leaving them (daemon threads)")
                break
            await asyncio.sleep(0.02)
        conn.close()

    def rejections(self) -> list[tuple[str, str, str, str]]:
        """(kind, namespace, name, reason) of every object the API holds that was rejected."""
        return [
            (state.resource.kind, namespace, name, message)
            for state in self.states.values()
            for (namespace, name), message in state.rejections.items()
        ]

    # ----------------------------------------------------------------- worker threads

    def _pump(self, state: ResourceState) -> None:
        """Thread body: hand each event of the watch to the loop, in order."""
        assert state.watcher is not None
        try:
            for event in state.watcher.forever():
                if type(event) is ListedPage and not self._take_page_slot(state):
                    return
                if self._stop.is_set() or not self._post(state, event):
                    return
        except BaseException as exc:  # a bug: stop the app loudly instead of going stale
            if not self._stop.is_set():
                self._crashed = exc
                self._post_crash()

    def _take_page_slot(self, state: ResourceState) -> bool:
        """Wait until the loop has applied the previous page (False: stopping)."""
        while not state.page_slot.acquire(timeout=0.1):
            if self._stop.is_set():
                return False
        return True

    def _post(self, state: ResourceState, event: Event) -> bool:
        loop = self._loop
        if loop is None:  # begun early: run() has not taken over yet
            with self._early_lock:
                loop = self._loop
                if loop is None:
                    self._early.append((state, event))
                    return True
        try:
            loop.call_soon_threadsafe(self._handle, state, event)
        except RuntimeError:  # the loop is closed: the app has gone
            self._stop.set()
            return False
        return True

    def _post_crash(self) -> None:
        with self._early_lock:
            loop, crash = self._loop, self._crash
        if loop is None or crash is None:
            return  # run() sets the crash event when it takes over
        try:
            loop.call_soon_threadsafe(crash.set)
        except RuntimeError:
            pass

    # ----------------------------------------------------------------- events (loop thread)

    def _handle(self, state: ResourceState, event: Event) -> None:
        if type(event) is ListedPage:
            try:
                if not self._stop.is_set():
                    self._page(state, event)
            finally:
                state.page_slot.release()
            return
        if self._stop.is_set():
            return
        match event:
            case Upserted():
                self._upserted(state, event)
            case Deleted():
                self._deleted(state, event)
            case Listed():
                self._listed(state, event)
            case Rejected():
                self._rejected(state, event)
            case Watching():
                self._watching(state)
            case Bookmark():
                self.metrics.last_sync = time.monotonic()
            case Problem():
                state.relist = None  # a list cut short never sweeps: what it upserted stays
                self._problem(state, event)
            case Expired():
                state.relist = None
                log.info("%s: watch expired (410 Gone: %s); relisting", state.resource.kind, event.message)
            case UsingVersion():
                if event.api_version != state.api_version:
                    state.api_version = event.api_version
                    log.info("%s: using %s", state.resource.kind, event.api_version)

    def _page(self, state: ResourceState, event: ListedPage) -> None:
        """One page of a longer list: upsert it, striking its keys off; the end of the list sweeps."""
        if event.first or state.relist is None:  # a page whose list start was not seen: applied, never swept
            state.relist = Relist(self.store, state.resource.kind, sweep=event.first, grace=self.grace)
        self._omitted(state, event.objects)
        state.relist.page(event.objects, event.keep)

    def _listed(self, state: ResourceState, event: Listed) -> None:
        """The end of a list (its last page, or the whole of a list of one page): the sweep."""
        kind = state.resource.kind
        relist = state.relist
        if relist is None or event.whole:  # a list of one page: its own list, whatever one was cut short before
            relist = Relist(self.store, kind, grace=self.grace)
        state.relist = None
        self._omitted(state, event.objects)
        relist.finish(event.objects, event.keep)
        keep, count = relist.rejected, relist.count
        state.rejections = {k: v for k, v in state.rejections.items() if k in keep}
        self.metrics.relists[state.resource.plural] += 1
        self.metrics.last_sync = time.monotonic()
        self._recovered(state)
        if not state.synced:
            state.synced = True
            log.info("%s: initial list done: %d objects (%d rejected)", kind, count, len(keep))
            self.store.mark_synced(kind)
            if self.store.synced_all:
                log.info("every watched resource is listed: synced")
        else:
            log.info("%s: relisted: %d objects", kind, count)

    def _upserted(self, state: ResourceState, event: Upserted) -> None:
        obj = event.obj
        state.rejections.pop(("" if isinstance(obj, Namespace) else obj.namespace, obj.name), None)
        self._omitted(state, (obj,))
        self.grace.seen((obj,))
        visible = self._changes_answers(obj)
        self.store.apply(obj)
        # Slices carrying the trigger-time annotation are measured by the table from that time.
        if visible and not (isinstance(obj, EndpointSlice) and obj.trigger_time):
            self._programmed(obj, event.arrived)

    def _deleted(self, state: ResourceState, event: Deleted) -> None:
        kind = state.resource.kind
        state.rejections.pop(event.key, None)
        state.omissions.pop(event.key, None)
        if kind == DeleteGrace.KIND and self.grace.seconds > 0 and event.key in self.store.imports:
            self.grace.defer(event.key, lambda: self._grace_over(event))
        else:
            self._delete(kind, event)

    def _delete(self, kind: str, event: Deleted) -> None:
        namespace, name = event.key
        old = self._current(kind, namespace, name)
        self.store.delete(kind, namespace, name)
        if kind == "ServiceImport":
            self._status_notes.pop((namespace, name), None)
        if old is not None:
            self._programmed(old, event.arrived)

    def _omitted(self, state: ResourceState, objects) -> None:
        """Warn and count, once per version, each object served without a part DNS cannot represent."""
        for obj in objects:
            omitted = getattr(obj, "omitted", ())
            key = (obj.namespace, obj.name) if omitted or state.omissions else None
            if key is None or state.omissions.get(key, ()) == omitted:
                continue
            if omitted:
                state.omissions[key] = omitted
                report_omitted(f"{state.resource.kind} {key[0]}/{key[1]}", omitted, self.metrics.rejected)
            else:
                state.omissions.pop(key, None)
        for obj in objects:
            if isinstance(obj, ServiceImport) and (obj.status.notes or self._status_notes):
                key = (obj.namespace, obj.name)
                if self._status_notes.get(key, ()) != obj.status.notes:
                    report_status_notes(f"ServiceImport {key[0]}/{key[1]}", obj.status.notes)
                    self._status_notes[key] = obj.status.notes

    # ----------------------------------------------------------------- --delete-grace (loop thread)

    def _call_later(self, seconds: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        assert self._loop is not None
        return self._loop.call_later(seconds, callback)

    def _grace_over(self, event: Deleted) -> None:
        if not self._stop.is_set():
            self._delete(DeleteGrace.KIND, event)

    def _rejected(self, state: ResourceState, event: Rejected) -> None:
        if state.rejections.get(event.key) == event.message:
            return  # this very version was reported already (a relist read it again)
        state.rejections[event.key] = event.message
        namespace, name = event.key
        kept = self._current(state.resource.kind, namespace, name) is not None
        log.error(
            "%s rejected: %s; %s",
            event.ref,
            event.message,
            "its last good version stays in service" if kept else "skipped",
        )
        self.metrics.rejected(event.reason)

    def _watching(self, state: ResourceState) -> None:
        state.streams += 1
        if state.streams > 1:
            self.metrics.watch_restarts[state.resource.plural] += 1
        state.up = True
        self.metrics.watch_up[state.resource.plural] = True
        self.metrics.last_sync = time.monotonic()
        self._recovered(state)

    def _problem(self, state: ResourceState, event: Problem) -> None:
        kind = state.resource.kind
        state.up = False
        self.metrics.watch_up[state.resource.plural] = False
        changed = state.problem is None or state.problem.category != event.category
        state.problem = event
        if not changed:
            log.debug("%s: still %s; retrying in %.1fs", kind, event.detail, event.retry_in)
            return
        if state.synced:
            state.down_since = time.monotonic()
            log.warning("%s: watch down: %s; answering from the last known state, retrying", kind, event.detail)
        elif kind not in self.store.required:  # ClusterProperty (--local-cluster auto): never holds readiness
            log.warning("%s: cannot list: %s; answers are not ordered by locality until it can, retrying", kind, event.detail)
        else:
            log.warning("%s: cannot list: %s; not ready, retrying", kind, event.detail)

    def _recovered(self, state: ResourceState) -> None:
        if state.problem is None:
            return
        if state.down_since is not None:
            log.info("%s: watch up again after %.1fs", state.resource.kind, time.monotonic() - state.down_since)
        else:
            log.info("%s: recovered (was: %s)", state.resource.kind, state.problem.detail)
        state.problem = None
        state.down_since = None

    # ----------------------------------------------------------------- helpers

    def _current(self, kind: str, namespace: str, name: str) -> Object | None:
        if kind == "ServiceImport":
            return self.store.imports.get((namespace, name))
        if kind == "EndpointSlice":
            return self.store.slices.get((namespace, name))
        if kind == "ClusterProperty":
            value = self.store.properties.get(name)
            return ClusterProperty(name, value) if value is not None else None
        return Namespace(name) if name in self.store.namespaces else None

    def _changes_answers(self, obj: Object) -> bool:
        """Whether applying `obj` changes what DNS answers (so a recompile will follow)."""
        if isinstance(obj, EndpointSlice):
            return not obj.dns_equivalent(self.store.slices.get((obj.namespace, obj.name)))
        if isinstance(obj, ServiceImport):
            return self.store.imports.get((obj.namespace, obj.name)) != obj
        return False

    def _programmed(self, obj: Object, arrived: float) -> None:
        """Programming latency for changes without a trigger time: event arrival -> answer live.

        The table recompiles synchronously inside store.apply/delete, so "now" is when
        the new answers became visible to queries.
        """
        if isinstance(obj, ServiceImport):
            headless = obj.headless
        elif isinstance(obj, EndpointSlice):
            imp = self.store.imports.get((obj.namespace, obj.service))
            headless = bool(imp and imp.headless)
        else:
            return
        self.metrics.programmed_since(arrived, headless)

    # ----------------------------------------------------------------- status

    def status(self) -> str:
        """Why the source is not synced, resource by resource (the /ready body)."""
        parts = [
            f"{s.resource.kind}: {s.describe()}"
            for s in self.states.values()
            if not s.synced or s.problem is not None
        ]
        return "; ".join(parts) if parts else "synced"
