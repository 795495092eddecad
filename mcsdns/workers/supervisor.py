"""--workers N: one process watches and compiles, N forked workers answer DNS from the same table.

The supervisor is a whole App without DNS listeners: its source holds the
one watch (or manifest reader) of the pod, its store and table are the ones
the admin port (/ready, /metrics, /imports, /explain) reads. After the initial
sync it forks the workers: each starts with the supervisor's store and
compiled table as they are at that moment, shared copy-on-write (so an extra
worker costs the pages it writes, not a second table), binds the --listen ports
with SO_REUSEPORT and answers. From then on every change the store reports is
compiled here and sent to each worker over its own socketpair (updates.py): the
new state of the services and namespaces it touched, for the worker's store
copy, and the answers just compiled for them, which the worker's table puts in
place instead of rendering them again (the same `Table.on_change` as in one
process decides what changes, so the same answers; the SOA serial is the
supervisor's).

With --notify a worker reports each update applied, and the NOTIFY waits until every serving worker
has (Supervisor._caught_up): a secondary's SOA query after it may land on any worker.

A worker that dies is forked again from the supervisor's current state (so it
needs no catch-up) and serves within a fork and a bind; the others are not
touched. A worker whose supervisor is gone (its socket reads EOF) stops.

/ready is 200 only when the supervisor is synced and every worker has bound
its listeners; /metrics is the supervisor's families plus each worker's
query-path families with a `worker` label (asked at scrape time).

Memory: before the first fork the supervisor lays the compiled answers out for
sharing (sharing.py), and before every fork it collects and freezes the cyclic
collector's generations (gc.freeze), as the worker does again first thing: no
collection in either process scans the shared objects again, so none writes
their headers and copies their pages.

Forking while the kube source's watch threads run (Python 3.12 warns about
any fork of a threaded process): only the forking thread goes on in the child,
so a lock another thread held at that instant stays held there for ever, and
what such a thread was half-way through changing stays half changed. That is
safe here because the worker never uses what the watch threads use: the
threads only read their HTTP connections (the child points those descriptors
at /dev/null and never calls the source, its connection pool or TLS), hand
events to the supervisor's loop (which the child never runs: it starts its own, and with it its
own executor: the supervisor's, whose threads look up `--notify` host names, is never used there),
and the store, the table and every metric are written by the loop thread alone,
which is the thread that forks, between two callbacks. Two shared things
remain, both handled at the fork: the logging module's and handlers' locks
(logging re-creates them in the child itself; the supervisor also holds every
handler across the fork, so no thread is half-way through writing a line to
stderr, whose buffer lock logging cannot re-create), and the import lock
(CPython re-creates the global one; a module's own import lock could stay held
only if a watch thread were importing at that instant, and by the first fork,
after the initial lists, the threads have imported all they use). So the 3.12
DeprecationWarning for this one os.fork is filtered.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import pickle
import signal
import socket
import struct
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Iterable
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from ..admin.server import Admin, Response
from ..app import App
from ..config import Config, ConfigError
from ..store import Changes
from .sharing import compact
from .updates import apply_update, update_of

log = logging.getLogger(__name__)

RESTART_LIMIT = 5  # restarts of failed workers within RESTART_WINDOW before giving up
RESTART_WINDOW = 60.0
STARTUP_GRACE = 10.0  # a worker failing this soon after it started is a configuration error: stop all
SCRAPE_TIMEOUT = 2.0  # seconds a worker has to send its metrics for one /metrics request
CATCH_UP_WAIT = 10.0  # --notify: seconds a NOTIFY waits for every serving worker to apply the change
MAX_BACKLOG = 256 << 20  # bytes of updates a worker may leave unread before it is killed (and forked afresh)
# The families a worker reports (its query path, its forwarder, the transfers it answers, its process); the
# rest is the supervisor's (the supervisor answers no DNS, so its transfer counters stay empty).
WORKER_FAMILIES = ("coredns_dns_", "coredns_proxy_", "coredns_forward_", "coredns_panics", "coredns_plugin_enabled",
                   "mcsdns_forward_", "mcsdns_dropped", "mcsdns_table_generation", "mcsdns_tcp_", "process_",
                   "mcsdns_transfers", "mcsdns_ixfr_fallbacks")
HEADER = struct.Struct(">I")
UPDATE_FAILED = 3  # a worker's exit code when it could not apply an update (restarted, never a startup error)

Runner = Callable[[Coroutine[Any, Any, None]], None]


def supervise(config: Config, run: Runner) -> int:
    """Run the supervisor and its workers until SIGTERM/SIGINT; the process exit code.

    Raises ConfigError or OSError when it cannot start (the CLI turns them into exit codes)."""
    if any(port == 0 for _, port in config.listen):
        raise ConfigError("--workers needs fixed --listen ports (port 0 would give each worker its own)")
    # Python 3.12+: os.fork in a process with threads warns; why this fork is safe: the module docstring.
    warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded, use of fork\(\)",
                            category=DeprecationWarning, module=__name__)
    sup = Supervisor(config, run)
    run(sup.main())
    return sup.code


# ------------------------------------------------------------------- framing


def _frame(message: tuple) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(data)) + data


async def _read(reader: asyncio.StreamReader) -> tuple | None:
    """The next message, or None at EOF."""
    try:
        head = await reader.readexactly(HEADER.size)
        return pickle.loads(await reader.readexactly(HEADER.unpack(head)[0]))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


# ------------------------------------------------------------------- the supervisor


@dataclass(eq=False)
class Worker:
    """The supervisor's end of one worker."""

    index: int
    pid: int
    sock: socket.socket
    started: float
    ready: bool = False
    writer: asyncio.StreamWriter | None = None
    pending: list[bytes] = field(default_factory=list)  # updates sent before the connection was set up
    scrapes: dict[int, asyncio.Future] = field(default_factory=dict)
    applied: int = 0  # --notify: the serial of the last update it reported applied (forked at: the table's)

    def send(self, frame: bytes) -> None:
        if self.writer is None:
            self.pending.append(frame)
            return
        if self.writer.transport.is_closing():
            return
        self.writer.write(frame)
        if self.writer.transport.get_write_buffer_size() > MAX_BACKLOG:
            log.error("worker %d left %d bytes of updates unread: killing it (it is forked again up to date)",
                      self.index, self.writer.transport.get_write_buffer_size())
            self.kill()

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Supervisor:
    def __init__(self, config: Config, run: Runner) -> None:
        self.config = config
        self.run = run
        self.code = 0
        self.stopping = False
        self.workers: dict[int, Worker] = {}  # pid -> worker
        self.restarts: list[float] = []
        self.exited = asyncio.Event()
        self._scrape_id = 0
        self.app: App | None = None
        self._applied = asyncio.Event()  # --notify: a worker reported an update applied

    async def main(self) -> None:
        app = self.app = App(self.config)
        app.store.listener = self._relay
        app.admin = WorkersAdmin(app.registry, self.readiness, app.discovery.routes(), scrape=self.metrics)
        if app.notifier is not None:
            app.notifier.caught_up = self._caught_up
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, app.reload)
        loop.add_signal_handler(signal.SIGCHLD, self._reap)
        await app.start(dns=False)
        if not self.stopping:
            compact(app.table)  # once: later it would unshare what the workers already share
            for k in range(self.config.workers):
                self.spawn(k)
        await app.stop_event.wait()
        self.stop()
        await app.shutdown()
        deadline = self.config.lameduck + max(2.0, self.config.upstream_timeout + 0.5) + 5.0
        if self.workers:
            try:
                await asyncio.wait_for(self.exited.wait(), deadline)
            except asyncio.TimeoutError:
                log.error("workers %s did not stop: killing them", sorted(w.index for w in self.workers.values()))
                for worker in list(self.workers.values()):
                    worker.kill()
        if app.failure is not None:
            log.error("stopped after a failure: %s: %s", type(app.failure).__name__, app.failure)
            self.code = self.code or 1

    def stop(self) -> None:
        """SIGTERM/SIGINT (or a fatal worker failure): every worker gets SIGTERM, the supervisor stops."""
        if self.stopping:
            return
        self.stopping = True
        for worker in self.workers.values():
            try:
                os.kill(worker.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        if self.app is not None:
            self.app.stop_event.set()

    # ----------------------------------------------------------------- workers

    def spawn(self, k: int) -> None:
        """Fork worker `k` from the current state; no await between the fork and registering it, so
        every change after the fork reaches it."""
        ours, theirs = socket.socketpair()
        # Everything alive now moves to the collector's permanent generation, here and in the child: no
        # collection in either process scans it again, so none writes the shared pages' object headers.
        # (Only objects that are cyclic garbage later would leak; the store and table make no cycles.)
        gc.collect()
        gc.freeze()
        handlers = _log_handlers()
        for handler in handlers:  # no thread is writing a log line while the process is copied
            handler.acquire()
        try:
            pid = os.fork()
        except BaseException:
            _release(handlers)
            raise
        if pid != 0:  # (the child's handler locks are new ones already: logging's own fork hook)
            _release(handlers)
        if pid == 0:
            _worker_process(self.app, theirs, k, self.run)  # never returns
        theirs.close()
        worker = Worker(k, pid, ours, time.monotonic(), applied=self.app.table.serial)
        self.workers[pid] = worker
        log.info("worker %d started (pid %d)", k, pid)
        asyncio.get_running_loop().create_task(self._talk(worker))

    async def _talk(self, worker: Worker) -> None:
        """Set up the connection, flush what was queued, then read the worker's messages."""
        reader, writer = await asyncio.open_connection(sock=worker.sock, limit=1 << 24)
        worker.writer = writer
        for frame in worker.pending:
            writer.write(frame)
        worker.pending.clear()
        while (message := await _read(reader)) is not None:
            if message[0] == "ready":
                worker.ready = True
                log.info("worker %d serving", worker.index)
            elif message[0] == "applied":
                worker.applied = message[1]
                self._applied.set()
            elif message[0] == "metrics":
                future = worker.scrapes.pop(message[1], None)
                if future is not None and not future.done():
                    future.set_result(message[2])
        writer.close()

    def _reap(self) -> None:
        """SIGCHLD: collect exited workers; restart them (bounded) unless stopping."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            if worker.writer is not None:
                worker.writer.close()
            else:
                worker.sock.close()
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                self.code = max(self.code, code if code > 0 else 0)
            else:
                self._restart(worker, code)
        if not self.workers:
            self.exited.set()

    def _restart(self, worker: Worker, code: int) -> None:
        now = time.monotonic()
        self.restarts[:] = [t for t in self.restarts if now - t < RESTART_WINDOW]
        if code in (1, 2) and now - worker.started < STARTUP_GRACE or len(self.restarts) >= RESTART_LIMIT:
            log.error("worker %d exited with %d; stopping every worker", worker.index, code)
            self.code = code if code > 0 else 1
            self.stop()
            return
        log.warning("worker %d exited with %d; starting it again", worker.index, code)
        self.restarts.append(now)
        self.spawn(worker.index)

    # ----------------------------------------------------------------- updates

    def _relay(self, changes: Changes) -> None:
        """Store listener: compile here, then send each worker what changed, compiled (updates.py)."""
        table = self.app.table
        serial = table.serial
        table.on_change(changes)
        if not self.workers:
            return
        frame = _frame(("update", update_of(table, changes, serial)))
        for worker in self.workers.values():
            worker.send(frame)

    async def _caught_up(self) -> None:
        """--notify: return once every serving worker has applied the supervisor's serial, or after
        CATCH_UP_WAIT. A secondary told of a change asks its SOA and transfer of any worker (SO_REUSEPORT);
        one that has not applied the change yet would answer the old serial, and the secondary would
        keep its copy until the next change. A worker stuck longer delays no NOTIFY past the wait."""
        target = self.app.table.serial
        deadline = asyncio.get_running_loop().time() + CATCH_UP_WAIT
        while behind := [w.index for w in self.workers.values() if w.ready and w.applied < target]:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                log.warning("NOTIFY sent before workers %s applied serial %d", behind, target & 0xFFFFFFFF)
                return
            self._applied.clear()
            try:
                await asyncio.wait_for(self._applied.wait(), left)
            except asyncio.TimeoutError:
                pass

    # ----------------------------------------------------------------- admin

    def readiness(self) -> tuple[bool, str]:
        ready, reason = self.app.readiness()
        if not ready:
            return ready, reason
        serving = {w.index for w in self.workers.values() if w.ready}
        missing = [k for k in range(self.config.workers) if k not in serving]
        if missing:
            return False, "workers not serving yet: " + ", ".join(map(str, missing))
        return True, ""

    async def metrics(self) -> Response:
        """/metrics: the supervisor's families and every worker's query-path families, labelled `worker`."""
        self._scrape_id += 1
        asked: dict[int, asyncio.Future] = {}
        for worker in self.workers.values():
            if worker.ready and worker.writer is not None:
                future = asyncio.get_running_loop().create_future()
                worker.scrapes[self._scrape_id] = future
                worker.send(_frame(("scrape", self._scrape_id)))
                asked[worker.index] = future
        if asked:
            await asyncio.wait(asked.values(), timeout=SCRAPE_TIMEOUT)
        for worker in self.workers.values():
            worker.scrapes.pop(self._scrape_id, None)
        snapshots = {k: f.result() for k, f in asked.items() if f.done() and not f.cancelled()}
        return 200, CONTENT_TYPE_LATEST, generate_latest(_Merged(self.app.registry.collect(), snapshots))


class WorkersAdmin(Admin):
    """The supervisor's admin port: /metrics asks the workers (the other paths as in one process)."""

    def __init__(self, *args, scrape: Callable[[], Coroutine[Any, Any, Response]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.scrape = scrape

    def respond(self, target: str):
        if urlsplit(target).path == "/metrics":
            return self.scrape()
        return super().respond(target)


class _Merged:
    """A registry-like view for generate_latest: one family per name, worker samples labelled."""

    def __init__(self, own: Iterable[Metric], workers: dict[int, list[Metric]]) -> None:
        self.own = list(own)
        self.workers = workers

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for fam in self.own:
            merged = families[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            merged.samples = list(fam.samples)
        for k in sorted(self.workers):
            for fam in self.workers[k]:
                merged = families.get(fam.name)
                if merged is None:
                    merged = families[fam.name] = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                label = str(k)
                merged.samples.extend(s._replace(labels={**s.labels, "worker": label}) for s in fam.samples)
        return families.values()


def _log_handlers() -> list[logging.Handler]:
    """Every handler of every logger, once each."""
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    return list({id(h): h for lg in loggers for h in lg.handlers}.values())


def _release(handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        handler.release()


# ------------------------------------------------------------------- a worker (after the fork)


def _worker_process(app: App, sock: socket.socket, k: int, run: Runner) -> None:
    """The forked child: drop the supervisor's descriptors and loop, serve, exit (never returns)."""
    code = 0
    try:
        gc.freeze()  # what this worker allocates from here on is its own; see Supervisor.spawn
        _drop_inherited({0, 1, 2, sock.fileno()})
        asyncio.events._set_running_loop(None)  # the supervisor's loop, mid-callback in this copy
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the supervisor re-reads manifests
        run(_serve(app, sock, k))
    except OSError as exc:
        log.error("worker %d cannot start: %s", k, exc)
        code = 1
    except BaseException:  # noqa: BLE001 - a worker reports and exits; the supervisor decides
        log.exception("worker %d failed", k)
        code = 1
    logging.shutdown()
    os._exit(code)


def _drop_inherited(keep: set[int]) -> None:
    """Point every inherited descriptor but `keep` at /dev/null.

    Closing the supervisor's sockets here matters (a watch connection held open
    by a worker would outlive the supervisor's reconnect); dup2 rather than
    close keeps the numbers taken, so a copied Python object that still names one
    can never close a descriptor this worker opens later.
    """
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in fds:
        if fd not in keep and fd != null:
            try:
                os.dup2(null, fd)
            except OSError:
                pass  # the descriptor listdir itself used, already closed


async def _serve(app: App, sock: socket.socket, k: int) -> None:
    """Bind the DNS listeners, follow the supervisor's updates, stop on SIGTERM (after the lameduck)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = {"count": 0}

    def on_stop() -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            os._exit(1)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop)
    # The supervisor records programming latency; this copy's source, admin and tasks belong to it.
    app.table.on_programmed = None
    app.table.on_stamped = None
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 24)
    for host, port in app.config.listen:
        await app.server.listen(host, port)
    writer.write(_frame(("ready",)))
    follow = loop.create_task(_follow(app, reader, writer, stop))
    follow.add_done_callback(lambda _: stop.set())
    await stop.wait()
    if follow.done() and not follow.cancelled() and follow.exception() is not None:
        # Serving on without the updates would answer stale data: exit, the supervisor forks afresh.
        log.error("worker %d could not apply an update: %r; exiting", k, follow.exception(), exc_info=follow.exception())
        logging.shutdown()
        os._exit(UPDATE_FAILED)
    if not follow.done():
        app.leave()  # this copy refuses transfers (the journal's IXFRs aside); the supervisor's /ready says 503
        await asyncio.sleep(app.config.lameduck)
    app.server.stop_accepting()
    await app.server.drain(timeout=max(2.0, app.config.upstream_timeout + 0.5))
    follow.cancel()
    if app.forwarder is not None:
        app.forwarder.close()


async def _follow(app: App, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
    """Apply the supervisor's updates and answer its scrapes until it goes away."""
    while (message := await _read(reader)) is not None:
        if message[0] == "update":
            apply_update(app.table, message[1])
            if app.notifier is not None:  # the supervisor's NOTIFY waits for this (Supervisor._caught_up)
                writer.write(_frame(("applied", message[1]["serial"][1])))
        elif message[0] == "scrape":
            families = [m for m in app.registry.collect() if m.name.startswith(WORKER_FAMILIES)]
            writer.write(_frame(("metrics", message[1], families)))
    log.warning("worker: the supervisor is gone; stopping")
