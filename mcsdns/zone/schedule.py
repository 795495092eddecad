"""When the table compiles: held back until the initial sync, early while the lists page, behind after it.

Nothing is compiled before the store's initial sync: the first lists of a
kube source arrive kind by kind (ServiceImports, then EndpointSlices would
compile every service twice), so their changes are collected and every
service is compiled once when the store reports the sync. Until then queries
take the zone logic, which answers the same from the same objects. After the
sync every change is compiled as it arrives. Except that a service which looks
complete while the lists still run (`_compile_early`: its import and slices
in, the list past it) is compiled then, in the time the lists wait for the API
server's next page, and the sync compiles only the services not compiled since
their last change: still once each when each service's objects come together
(not in a server's table, below: there the sync compiles nothing).

A server (`App`, which sets `defer`) does not wait for the sync's compile either:
it answers as soon as the store is synced, and the services not compiled yet
(`behind`) are compiled in slices between queries (`compile_behind`). A question
that reaches one of them first compiles it on the spot (`catch_up`, which the
resolver calls before anything decides from the compiled indexes), so every reply
is the one the compiled table gives, from the first query on; what the deferral
saves is the time before the first one (the whole compile, seconds at 50,000 imports).

`Schedule` is the part of `table.Table` that decides this; the table compiles.
"""

from __future__ import annotations

import functools
import gc
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol, TypeVar

from ..store import Changes, ServiceKey, Store

log = logging.getLogger(__name__)

Method = TypeVar("Method", bound=Callable[..., object])


def collector_paused(method: Method) -> Method:
    """`method` run with Python's cyclic garbage collector paused (unless it is off already).

    Compiling allocates objects by the hundred thousand (1000 endpoints x 100 ports: 100,000
    entries and SRV records) and frees them by reference counting, with no cycles among them;
    the collector, triggered by the allocations alone, would scan them (and every object the
    table holds) over and over for nothing. The pause lasts one call.
    """

    @functools.wraps(method)
    def paused(*args: object, **kwargs: object) -> object:
        if not gc.isenabled():
            return method(*args, **kwargs)
        gc.disable()
        try:
            return method(*args, **kwargs)
        finally:
            gc.enable()

    return paused  # type: ignore[return-value]


class _Settings(Protocol):
    local_cluster: str | None  # table.TableConfig's --local-cluster


class Schedule:
    """The table's compile schedule (the module docstring); `table.Table` is built on it."""

    if TYPE_CHECKING:  # what the table provides
        store: Store
        config: _Settings
        owned: dict[ServiceKey, list[bytes]]
        reverse_zones: frozenset[bytes]
        local: str | None
        generation: int

        def _local_cluster(self) -> str | None: ...

        def compile(self, key: ServiceKey) -> None: ...

        def _synced(self, triggers: dict[ServiceKey, str]) -> None: ...

        def advance(self, services: Iterable[ServiceKey] | None) -> None: ...

    def _begin_schedule(self) -> None:
        # Until the initial sync nothing is compiled (see the module docstring); this keeps the
        # trigger times of the changes held back, for the programming-latency metric. None after.
        self._deferred: dict[ServiceKey, str] | None = None if self.store.synced_all else {}
        self._early: set[ServiceKey] = set()  # compiled before the sync, and current (see _compile_early)
        self._pending: set[ServiceKey] = set()  # changed by the last page, compiled after the next
        # True (App): the sync compiles only what is needed at once and leaves the rest `behind`, for
        # `compile_behind` and `catch_up` (the module docstring). Not with --reverse-cidr: its PTR index
        # is filled by compiling, and a PTR question names an address, not the service to catch up.
        self.defer = False
        self.behind: set[ServiceKey] = set()  # synced, served, not compiled yet (and so not in `owned`)
        self._behind_keys: Iterator[ServiceKey] | None = None  # `behind` in compile order (a set has none)
        self.on_behind: Callable[[], None] | None = None  # the sync left services behind (App compiles them)

    @property
    def deferring(self) -> bool:
        """`defer` in effect: not with --reverse-cidr (see `defer`)."""
        return self.defer and not self.reverse_zones

    @property
    def settled(self) -> bool:
        """Synced, and every service compiled: `owned` and `children` then tell every absent name."""
        return self.store.synced_all and not self.behind

    def _hold(self, changes: Changes) -> None:
        """A change before the initial sync (`_deferred` is not None): kept for the sync's compile, or
        compiled early, or, when it completes the sync, the sync's compile."""
        assert self._deferred is not None
        for key, trigger in changes.triggers.items():
            if trigger is not None:
                self._deferred.setdefault(key, trigger)
        if self.store.synced_all:
            triggers, self._deferred = self._deferred, None
            self._compile_everything(triggers)
        else:
            self._compile_early(changes)

    def _compile_early(self, changes: Changes) -> None:
        """Before the sync: compile the services that look complete, in the time the lists wait for pages.

        Lists come in key order (namespace, name), and a service's slices are named after it, so
        once a later page arrived the services of the page before have all their slices: each page
        compiles the services the previous one touched (with an import and a slice by now, and not
        touched again since). Once every kind but ServiceImport is listed, a service is complete
        when its import arrives and is compiled at once. A service compiled here and changed after
        (a slice on a later page, a namespace change) is simply no longer current: it is compiled
        again or left to the sync, which compiles every service not compiled here since its last
        change. Not with --local-cluster auto (the order by locality may change at the sync), nor
        before the Namespaces are listed (every service would look unexposed).
        """
        store = self.store
        if self.deferring:
            return  # compiled after the sync, while serving: here it would only delay the sync (one CPU for both)
        if self.config.local_cluster == "auto" or "Namespace" in store.required - store.synced:
            return
        self._early -= changes.services
        if changes.namespaces:
            self._early = {k for k in self._early if k[0] not in changes.namespaces}
        if store.required - store.synced == {"ServiceImport"}:
            ready, self._pending = self._pending | changes.services, set()
        else:
            ready, self._pending = self._pending - changes.services, set(changes.services)
        for key in ready:
            if key in store.imports and key in store.by_service and key[0] not in changes.namespaces:
                self.compile(key)
                self._early.add(key)

    @collector_paused
    def _compile_everything(self, triggers: dict[ServiceKey, str]) -> None:
        """The initial sync: compile every service once (but those compiled early and still current)."""
        started = time.monotonic()
        self.local = self._local_cluster()
        early, self._early, self._pending = self._early, set(), set()
        left: list[ServiceKey] = []
        defer = self.deferring  # (then nothing was compiled early: `owned` is empty)
        for key in [*self.store.imports, *(k for k in self.owned if k not in self.store.imports)]:
            if key in early:
                continue
            if defer:
                left.append(key)
            else:
                self.compile(key)
        self.behind = set(left)
        self._behind_keys = iter(left) if left else None
        self._synced(triggers)
        log.info("synced: compiled %d services in %.2fs%s", len(self.store.imports) - len(self.behind),
                 time.monotonic() - started, f", {len(self.behind)} more to compile while serving" if self.behind else "")
        if self.behind and self.on_behind is not None:
            self.on_behind()

    def compile_behind(self, budget: float) -> bool:
        """Compile services left `behind` by the sync, for about `budget` seconds (at least one
        service); True while some are left. The end makes a new generation: the resolver's
        shortcuts that read `children` wait for it (`settled`)."""
        if self._behind_keys is None:
            return False
        deadline = time.monotonic() + budget
        behind = self.behind
        for key in self._behind_keys if behind else ():
            if key in behind:  # (else compiled since: a change, or a question's `catch_up`)
                self.compile(key)
                if not behind or time.monotonic() >= deadline:
                    break
        if behind:
            return True
        self._behind_keys = None
        self.advance(None)
        log.info("compiled every service (%d)", len(self.owned))
        return False

    def catch_up(self, lname: bytes, zone_len: int) -> None:
        """Compile now the service whose names `lname` (lower case, below a served zone `zone_len`
        bytes long) could be, if it is `behind`: `<service>.<namespace>.svc.<zone>` and the names one
        and two labels below it, exactly those `Table.absent` decides from `owned`."""
        end = len(lname) - zone_len
        starts = label_starts(lname, end)
        if not 3 <= len(starts) <= 5 or lname[starts[-1] : end] != b"\x03svc":
            return
        self.catch_up_service(service_key(lname, starts))

    def catch_up_service(self, key: ServiceKey) -> None:
        """`catch_up` for a service named by its key (the discovery endpoints read its compiled names)."""
        if key in self.behind:
            self.compile(key)


def label_starts(lname: bytes, end: int) -> list[int]:
    """Where each label of `lname` (wire form, valid) starts, up to `end` (where its zone starts)."""
    starts: list[int] = []
    i = 0
    while i < end:
        starts.append(i)
        i += lname[i] + 1
    return starts


def service_key(lname: bytes, starts: list[int]) -> ServiceKey:
    """(namespace, service) of `<service>.<namespace>.svc` ending at `starts[-1]` (`label_starts`)."""
    return (lname[starts[-2] + 1 : starts[-1]].decode("latin-1"), lname[starts[-3] + 1 : starts[-2]].decode("latin-1"))
