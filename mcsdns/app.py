"""Builds the pipeline and owns its lifecycle.

sources -> store -> table -> resolver -> DNS listeners (-> forwarder), with
metrics and the admin endpoints around them. `App.run()` starts everything,
waits for the stop event, then shuts down in order: /ready turns 503, DNS
keeps answering for the lameduck period, listeners stop, in-flight queries
drain, sources stop. The sources run until the last answer is given: a pod in
its lameduck still gets queries (kube-proxy and conntrack take time to move
them), and its answers follow the API until then.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import sys
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from .admin.discovery import Discovery, Rejection
from .admin.orphans import Orphans
from .admin.server import Admin
from .config import Config, advertised_addresses, transfer_networks
from .metrics import Metrics, Views
from .serve import selector
from .serve.loadbalance import RoundRobinResolver
from .serve.querylog import QueryLog, chain, errors
from .serve.resolve import Resolver
from .serve.transport import DnsServer, TcpLimits, server_label
from .sources.manifests import ManifestSource, default_paths
from .store import Store
from .zone.table import Table, TableConfig

if TYPE_CHECKING:
    from .sources.kube import KubeSource
    from .xfr.notify import Notifier
    from .zone.dnssd import DnsSd

log = logging.getLogger(__name__)

SWITCH_SECONDS = 0.0002  # sys.setswitchinterval while serving (see `App.start`)


class App:
    def __init__(self, config: Config, registry: CollectorRegistry | None = None, source: KubeSource | None = None) -> None:
        """`source`: the Kubernetes source `cli._begin_source` began before the App was built (`KubeSource.begin`)."""
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        self.stop_event = asyncio.Event()  # SIGTERM or a failed task: shut down
        # The sources, the orphan sweep and NOTIFY stop when no more answers go out (after the drain):
        # until then every answer follows the API, the lameduck's included.
        self._quit = asyncio.Event()
        self.failure: BaseException | None = None  # a root task that died; the CLI exits 1
        self.store = Store()
        self.table = Table(
            TableConfig(config.zones, config.ttl, config.namespaces, advertised_addresses(config),
                        config.local_cluster, config.reverse_cidrs, config.ips_from_slices),
            self.store,
        )
        self.store.listener = self.table.on_change
        # Serve from the sync on; the rest is compiled between queries (_compile_behind). Not under --workers,
        # whose supervisor is this App: its workers are forked from its table or take its answers by updates.
        self.table.defer = config.workers <= 1
        self.table.on_behind = self._left_behind
        self._listening = False  # start() is done: the DNS listeners are open
        self.metrics = Metrics(self.registry)
        self.table.on_programmed = self.metrics.programmed
        if config.uses_api and not config.manifests:
            # Only the API dates its changes; a manifest's managedFields are from whenever it was dumped.
            self.table.on_stamped = self.metrics.stamped
        self.forwarder = self._make_forwarder()
        # --loadbalance picks the class, so the default resolver has no per-query check for it.
        resolver = RoundRobinResolver if config.loadbalance == "round_robin" else Resolver
        self.resolver = resolver(self.table, forwarding=self.forwarder is not None)
        self.server = DnsServer(
            self.resolver,
            forward=self.forwarder.forward if self.forwarder is not None else None,
            observe=chain(self.metrics.observe, QueryLog().observe) if config.log_queries else self.metrics.observe,
            observe_batch=None if config.log_queries else self.metrics.observe_batch,  # (the query log: a line per query)
            tcp_limits=TcpLimits(config.max_tcp_connections, config.tcp_idle_timeout, config.tcp_max_queries,
                                 config.tcp_first_query_timeout, config.max_tcp_connections_per_source).fitted(
                                     asked=config.max_tcp_connections != Config.max_tcp_connections),
            reuse_port=config.workers > 1,
        )
        self.server.on_panic = self.metrics.panic
        self.notifier = self._make_transfers() if config.transfer_to else None  # decision 8: off by default
        self.metrics.attach(Views(self.table, self.store.counts, self._server_labels, self.forwarder,
                                   self.server.tcp, self.store.condition_counts))
        self.source = source.attach(self.store, self.metrics) if source is not None else self._make_source()
        self._begun_early = source is not None  # cli paused the collector with it (start resumes it)
        if config.dns_sd:
            self.table.dnssd = self._make_dnssd()
        self.discovery = Discovery(self.table, self.resolver, self.rejections, self.readiness,
                                   enabled=config.discovery == "on")
        self.admin = Admin(self.registry, self.readiness, self.discovery.routes())
        self._tasks: list[asyncio.Task] = []

    def _make_transfers(self) -> Notifier | None:
        """--transfer-to: the transfers, handed to the listeners and the resolver, with the IXFR journal
        and the metrics they report to; returns the --notify sender, if any."""
        from .xfr.transfer import Transfers  # (dnspython: loaded only when transfers are on)
        from .xfr.tsig import load_key

        config = self.config
        key = load_key(config.tsig_key_file) if config.tsig_key_file is not None else None
        transfers = Transfers(self.table, transfer_networks(config.transfer_to), key, self.metrics.transfer,
                              config.max_transfers)
        self.metrics.transfers_now = transfers
        if config.ixfr_journal_bytes:
            from .xfr.journal import Journal

            self.table.journal = transfers.journal = Journal(self.table, config.ixfr_journal_bytes,
                                                             config.ixfr_journal_age)
            self.metrics.journal = transfers.journal
        transfers.on_fallback = self.metrics.ixfr_fallback
        self.server.transfers = self.resolver.transfers = transfers
        if not config.notify:
            return None
        from .xfr.notify import Notifier

        notifier = Notifier(transfers, config.notify, self.metrics.notified)
        self.table.on_bump = notifier.changed
        return notifier

    def _make_dnssd(self) -> DnsSd:
        """--dns-sd: the browsing names, compiled into the table with the services they list."""
        from .zone.dnssd import DnsSd

        return DnsSd(self.table)

    def _make_source(self):
        if self.config.uses_api and not self.config.manifests:
            from .config import kube_settings
            from .sources.kube import KubeSource

            return KubeSource(kube_settings(self.config), self.store, self.metrics)
        paths = list(self.config.manifests) or default_paths()
        if not self.config.manifests:
            log.info("no --manifests and no cluster: serving the bundled example cluster set from %s", paths[0])
        return ManifestSource(paths, self.store, on_error=self.metrics.rejected, on_sync=self.metrics.sync_confirmed)

    def _make_forwarder(self):
        from .forward.forwarder import ForwardConfig, Forwarder, upstreams_from_config

        upstreams = upstreams_from_config(self.config)
        if not upstreams:
            return None
        return Forwarder(upstreams, ForwardConfig.of(self.config), self.metrics)

    def _server_labels(self) -> list[str]:
        return [server_label(host, port) for host, port in self.server.addresses]

    def readiness(self) -> tuple[bool, str]:
        if self.table.synced:
            return True, ""
        status = getattr(self.source, "status", None)
        return False, status() if callable(status) else "not synced"

    def rejections(self) -> list[Rejection]:
        """The objects the source could not use, and why (for /imports and /explain)."""
        listed = getattr(self.source, "rejections", None)
        return [Rejection(*r) for r in listed()] if callable(listed) else []

    async def start(self, dns: bool = True) -> None:
        """Load or start watching, wait for sync (bounded), then open the listeners.

        `dns=False`: no DNS listeners (the --workers supervisor, whose forked workers answer)."""
        # The initial list or load allocates millions of objects that all live on, with no cycles
        # among them: the cyclic collector, triggered by the allocations alone, would scan the
        # growing store again and again for nothing.
        # It is paused until the sync (or the startup timeout); the collection below follows. A source
        # begun before the App (cli._begin_source) was begun with the collector paused already.
        collecting = gc.isenabled() or self._begun_early
        gc.disable()
        try:
            if isinstance(self.source, ManifestSource):
                self.source.load()
            self._spawn(self.source.run(self._quit), "source")
            self._spawn(Orphans(self.store).run(self._quit), "orphans")
            if self.notifier is not None:
                self._spawn(self.notifier.run(self._quit), "notify")
            if self.forwarder is not None:
                await self.forwarder.start(list(self.config.listen))
            await self._wait_for_sync()
        finally:
            if collecting:
                gc.enable()
        # The initial objects live as long as the process: move them out of the collector's sight, so
        # a full collection while serving scans only what changed since (a latency spike otherwise).
        # No collection first: it would scan every object of the sync, before the first answer, to
        # free the few cycles the sync left, which stay.
        gc.freeze()
        for host, port in self.config.listen if dns else ():
            await self.server.listen(host, port)
        if dns:
            # A change's compile answers the waiting UDP queries between its steps (Table.interleave),
            # and the watch threads' decoding hands the interpreter back to the loop thread within
            # SWITCH_SECONDS (Python's default, 5 ms, would let one decode hold a query that long).
            self.table.interleave = functools.partial(selector.serve_waiting, asyncio.get_running_loop())
            sys.setswitchinterval(SWITCH_SECONDS)
        if self.config.http_listen is not None:
            await self.admin.listen(*self.config.http_listen)
        self._listening = True
        if self.table.behind:
            self._spawn(self._compile_behind(), "compile")

    def _left_behind(self) -> None:
        """Table.on_behind: the sync left services to compile. At start-up `start` compiles them once the
        listeners are open; a sync after that (the API was out past --startup-timeout) has them compiled now."""
        if self._listening:
            self._spawn(self._compile_behind(), "compile")

    async def _compile_behind(self) -> None:
        """Compile what the sync left (Table.compile_behind) in slices of ~5 ms, answering queries between
        them; the collector paused throughout (as for the sync: no cycles to find among what a compile
        allocates), and what it compiled frozen with the rest when done."""
        collecting = gc.isenabled()
        gc.disable()
        try:
            while self.table.compile_behind(0.005):
                await asyncio.sleep(0)
        finally:
            if collecting:
                gc.enable()
        gc.freeze()

    async def _wait_for_sync(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout
        next_log = 0.0
        while not self.table.synced and time.monotonic() < deadline:
            if time.monotonic() >= next_log:
                log.info("waiting for the initial list before starting the server")
                next_log = time.monotonic() + 2
            await asyncio.sleep(0.01)  # the sync time is what users wait for: noticed within 10 ms
        if not self.table.synced:
            log.warning("starting server with an unsynced source (NXDOMAIN answers are SERVFAIL until synced): %s", self.readiness()[1])

    async def run(self) -> None:
        await self.start()
        await self.stop_event.wait()
        await self.shutdown()

    async def shutdown(self) -> None:
        log.info("shutting down: /ready reports 503, answering for %.1fs more (lameduck)", self.config.lameduck)
        self.leave()
        if self.config.lameduck:
            await asyncio.sleep(self.config.lameduck)
        self.server.stop_accepting()
        # Open (TCP) queries finish: a forwarded one may need the whole upstream timeout.
        await self.server.drain(timeout=max(2.0, self.config.upstream_timeout + 0.5))
        if self.forwarder is not None:
            self.forwarder.close()
        self._quit.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.admin.aclose()
        errors.flush()
        log.info("stopped")

    def leave(self) -> None:
        """The lameduck begins: /ready reports 503 and transfers are refused but for the journal's IXFRs
        (xfr/policy.py), so load balancers and secondaries move to the pods that stay while queries, and a
        following secondary's refreshes, are still answered."""
        self.admin.shutting_down = True
        if self.server.transfers is not None:
            self.server.transfers.leaving = True

    def reload(self) -> None:
        reload = getattr(self.source, "reload", None)
        if callable(reload):
            log.info("SIGHUP: re-reading manifests")
            reload()

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)

        def done(t: asyncio.Task) -> None:
            if not t.cancelled() and t.exception() is not None:
                log.error("%s task failed: %r; stopping", name, t.exception(), exc_info=t.exception())
                self.failure = t.exception()
                self.stop_event.set()

        task.add_done_callback(done)
        self._tasks.append(task)


