"""The record table: compiled wire answers keyed by the question's bytes.

The key is the lower-cased question as it sits in the packet (name, type,
class), so the hot path is `answers.get(packet[12:qend].lower())`. Each
service's keys are recompiled together when the store reports a change to
it, and swapped in as a group; the event loop is the only writer and reader,
so a query never sees half a service.

The table is also the `ZoneView` the zone logic reads for names it did not
compile, so compiled and per-query answers come from the same objects.

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
saves is the time before the first one (the whole compile at 50,000 imports: ~1.7 s).
"""

from __future__ import annotations

import functools
import gc
import logging
import struct
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Protocol, TypeVar

from ..objects import EndpointSlice, ServiceImport
from ..store import Changes, ServiceKey, Store
from . import compiler, fastpath, reverse, vocab
from .compiler import Service
from .wire import AA, Body, NameCache, Renderer, encode_labels, service_labels, soa_record


class NameIndex(Protocol):
    """Names the table compiles on behalf of a feature, told of every change (--dns-sd's `dnssd.DnsSd`).

    A protocol, so the table does not import the feature that imports it."""

    def full(self) -> None: ...

    def update(self, services: Iterable[ServiceKey], namespaces: Iterable[str]) -> None: ...

    def exists(self, lname: bytes) -> bool: ...

    def explain(self, labels: tuple[str, ...]) -> str | None: ...

    def snapshot(self) -> list[tuple[vocab.Owned, ...]]: ...  # its records, for a zone transfer

    def drain(self) -> tuple[list[vocab.Owned], list[vocab.Owned]]: ...  # deleted, added since the last drain

log = logging.getLogger(__name__)

Method = TypeVar("Method", bound=Callable[..., object])


def collector_paused(method: Method) -> Method:
    """`method` run with Python's cyclic garbage collector paused (unless it is off already).

    Compiling allocates objects by the hundred thousand (1000 endpoints x 100 ports: 100,000
    entries and SRV records) and frees them by reference counting, with no cycles among them;
    the collector, triggered by the allocations alone, would scan them (and every object the
    table holds) over and over for nothing: a fifth of such a compile. The pause lasts one call.
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


QTYPE_IN = {t: struct.pack(">HH", t, vocab.CLASS_IN) for t in compiler.COMPILED_TYPES}
PTR_IN = struct.pack(">HH", vocab.PTR, vocab.CLASS_IN)
# Per service, how many answers computed on first query (per-endpoint names, odd
# spellings) are kept; bounds memory against clients walking random names.
LAZY_LIMIT = 4096


class SerialLog(Protocol):
    """What the table tells of its serial changes (journal.Journal, IXFR's history)."""

    def reset(self, serial: int) -> None: ...  # the initial sync

    def record(self, services: Iterable[ServiceKey], before: int, after: int) -> None: ...

    def renumber(self, before: int, after: int) -> None: ...  # set_serial: the same contents, another serial


def clock_serial() -> int:
    """The SOA serial a change made now may take (decision 9): the Unix time in milliseconds, written
    modulo 2**32 (RFC 1982 arithmetic: a serial is newer while less than 2**31 ms, 24.8 days, ahead,
    far beyond the SOA expire of one day). Each change takes max(previous + 1, this), so the serial
    runs ahead of the clock only while changes come faster than 1,000 a second, and catches up when
    they slow; a restarted process, which takes its first serial from the clock after its sync,
    therefore starts above every serial the one before it gave out (docs/transfers.md)."""
    return int(time.time() * 1000)


MAX_SERIAL_STEP = 2**31 - 1  # the largest step RFC 1982 reads as newer
SERIAL_MASK = 0xFFFFFFFF  # a serial as the SOA writes it: 32 bits


@dataclass(frozen=True, slots=True)
class TableConfig:
    zones: tuple[str, ...]  # lower case, no trailing dot
    ttl: int
    namespaces: frozenset[str] | None  # exposed namespaces; None = all
    ns_addresses: tuple[str, ...]
    local_cluster: str | None = None  # --local-cluster: a cluster id, "auto" (the ClusterProperty), None = off
    reverse_cidrs: tuple[str, ...] = ()  # --reverse-cidr: serve the reverse zones covering these
    ips_from_slices: bool = False  # --ips-from-slices: empty spec.ips of a ClusterSetIP import -> its slices' addresses


# A service's compiled answers, (lookup key, body) each, as another table rendered them; None: it has none.
Compiled = dict[ServiceKey, "list[tuple[bytes, Body]] | None"]


class Table:
    def __init__(self, config: TableConfig, store: Store) -> None:
        self.config = config
        self.store = store
        self.ttl = config.ttl
        self.zones = tuple(encode_labels(z.split(".")) + b"\x00" for z in config.zones)
        self.answers: dict[bytes, Body] = {}
        self.owned: dict[ServiceKey, list[bytes]] = {}  # exactly the services that exist in an exposed namespace
        self.serial = clock_serial()
        self.generation = 0
        self.journal: SerialLog | None = None  # --transfer-to: the IXFR journal, told of every serial change
        self._soa: dict[int, bytes] = {}
        self._negative: dict[tuple[int, int], Body] = {}
        self.on_programmed: Callable[[ServiceKey, str | None, bool], None] | None = None
        # mcsdns_programming_duration_seconds: (kind, API change time text) of each change now served.
        self.on_stamped: Callable[[str, str], None] | None = None
        self.on_bump: Callable[[], None] | None = None  # --notify: the serial changed (notify.Notifier)
        self.local = self._local_cluster()
        # --reverse-cidr: the reverse zones (wire form), the PTR index, and the forward zones PTRs name.
        networks = reverse.zone_networks(config.reverse_cidrs) if config.reverse_cidrs else []
        self.reverse_zones = frozenset(encode_labels(reverse.zone_labels(n)) + b"\x00" for n in networks)
        self.ptr = reverse.PtrIndex(networks)
        self.forward_zones = tuple(tuple(z.split(".")) for z in config.zones)
        if networks:
            log.info("authoritative for %d reverse zone(s): %s", len(networks),
                     ", ".join(".".join(reverse.zone_labels(n)) for n in networks))
        self.dnssd: NameIndex | None = None  # --dns-sd: compiled along with the services it lists
        # `<service>.<namespace>.svc.<zone>` (wire form, lower case) of exactly the services in `owned`
        # -> the zone (wire form, one object per zone), for the zones no other served zone nests in or under (`_sole_zones`): a
        # name one label below is NXDOMAIN for every type but SOA (`absent`), which the resolver answers
        # from the raw question (Resolver._handle) without the parse, zone_of or the walk.
        self.children: dict[bytes, bytes] = {}
        self._child_zones = _sole_zones(self.zones, self.reverse_zones)
        # `svc.<zone>` (wire form) of the same zones -> the zone: `<a>.<b>.svc.<zone>` not in
        # `children` is a service that is not compiled, NXDOMAIN for every type but SOA too.
        self.svc_suffixes: dict[bytes, bytes] = {b"\x03svc" + z: z for z in self._child_zones}
        # Until the initial sync nothing is compiled (see the module docstring); this keeps the
        # trigger times of the changes held back, for the programming-latency metric. None after.
        self._deferred: dict[ServiceKey, str] | None = None if store.synced_all else {}
        self._early: set[ServiceKey] = set()  # compiled before the sync, and current (see _compile_early)
        self._pending: set[ServiceKey] = set()  # changed by the last page, compiled after the next
        self.use_fastpath = True  # ClusterSetIP services take fastpath.py's one pass (tests turn it off to compare)
        # True (App): the sync compiles only what is needed at once and leaves the rest `behind`, for
        # `compile_behind` and `catch_up` (the module docstring). Not with --reverse-cidr: its PTR index
        # is filled by compiling, and a PTR question names an address, not the service to catch up.
        self.defer = False
        self.behind: set[ServiceKey] = set()  # synced, served, not compiled yet (and so not in `owned`)
        self._behind_keys: Iterator[ServiceKey] | None = None  # `behind` in compile order (a set has none)
        self.on_behind: Callable[[], None] | None = None  # the sync left services behind (App compiles them)
        self._compile_apex()

    # ----------------------------------------------------------------- ZoneView

    def namespace_exposed(self, namespace: str) -> bool:
        allowed = self.config.namespaces
        return namespace in self.store.namespaces and (allowed is None or namespace in allowed)

    def service(self, namespace: str, name: str) -> Service | None:
        imp = self.store.imports.get((namespace, name))
        if imp is None:
            return None
        return self.service_of(imp, self.store.service_slices((namespace, name)), self.local)

    def service_of(self, imp: ServiceImport, slices: tuple[EndpointSlice, ...], local: str | None) -> Service:
        """The Service answers see for `imp` and its `slices` with the local cluster `local` (`service`,
        and a zone transfer's snapshot of the store, transfer.py)."""
        if self.config.ips_from_slices and not imp.headless and not imp.ips:
            # The one place the opt-in acts (decision 13): every answer, the plain lane, PTR and the
            # zone file take the service from here. A slice change recompiles the service already.
            imp = replace(imp, ips=compiler.slice_ips(slices))
        if local is None:
            return Service(imp, slices)
        return compiler.with_locality(imp, slices, local)

    def _local_cluster(self) -> str | None:
        """The local cluster id in effect (lower case), or None: --local-cluster off, or auto without one."""
        wanted = self.config.local_cluster
        if wanted == "auto":
            wanted = self.store.cluster_id
        return wanted.lower() if wanted else None

    @property
    def synced(self) -> bool:
        return self.store.synced_all

    @property
    def deferring(self) -> bool:
        """`defer` in effect: not with --reverse-cidr (see `defer`)."""
        return self.defer and not self.reverse_zones

    @property
    def settled(self) -> bool:
        """Synced, and every service compiled: `owned` and `children` then tell every absent name."""
        return self.store.synced_all and not self.behind

    # ----------------------------------------------------------------- SOA

    def soa(self, zone_at: int) -> bytes:
        """The zone SOA as authority, its owner pointing at the zone inside the question."""
        rec = self._soa.get(zone_at)
        if rec is None:
            rec = self._soa[zone_at] = soa_record(zone_at, min(self.ttl, 300), self.ttl, self.soa_serial)
        return rec

    def negative(self, rcode: int, zone_at: int) -> Body:
        """NODATA/NXDOMAIN/SERVFAIL bodies: shared, since only the zone position varies."""
        body = self._negative.get((rcode, zone_at))
        if body is None:
            body = self._negative[(rcode, zone_at)] = Body(AA | rcode, 0, 0, 0, b"", (), (), True, zone_at)
        return body

    def render(self, lname: bytes, zone_len: int, ans: vocab.Answer, names: NameCache | None = None,
               short: bool = False) -> Body:
        """The body of `ans` for a question `lname`; `names` shares derived bytes across one service's
        answers; `short`: every name in `ans` is known to fit in 255 bytes (Renderer.render)."""
        if ans.soa and not ans.answer and not ans.additional:
            return self.negative(ans.rcode, 12 + len(lname) - zone_len)
        return Renderer(lname, zone_len, names).render(ans, min(self.ttl, 300), self.ttl, self.soa_serial,
                                                       short=short)

    # ----------------------------------------------------------------- compiling

    def on_change(self, changes: Changes, compiled: Compiled | None = None) -> None:
        """Store listener: recompile what changed and bump the serial (after the initial sync).

        `compiled`: answers another table already rendered for some of these services (a --workers
        worker gets its supervisor's, see `updates`); those are put in place (`install`), not rendered.
        """
        if self._deferred is not None:
            for key, trigger in changes.triggers.items():
                if trigger is not None:
                    self._deferred.setdefault(key, trigger)
            if self.store.synced_all:
                triggers, self._deferred = self._deferred, None
                self._compile_everything(triggers)
            else:
                self._compile_early(changes)
            return
        if not (changes.services or changes.namespaces or self.config.local_cluster == "auto"):
            return  # a ClusterProperty nobody asked about (no --local-cluster auto): nothing to recompile
        services = set(changes.services)
        for ns in changes.namespaces:
            services.update(k for k in self.store.imports if k[0] == ns)
            services.update(k for k in self.owned if k[0] == ns)
        if changes.cluster_id and self._local_cluster() != self.local:
            self.local = self._local_cluster()
            log.info("local cluster (ClusterProperty cluster.clusterset.k8s.io) is now %s: reordering every service",
                     self.local or "unknown")
            services.update(self.store.imports)
            services.update(self.owned)
        for key in services:
            if compiled and key in compiled:
                self.install(key, compiled[key])
            else:
                self.compile(key)
            if self.on_programmed is not None:
                imp = self.store.imports.get(key)
                self.on_programmed(key, changes.triggers.get(key), bool(imp and imp.headless))
        if self.dnssd is not None:
            self.dnssd.update(services, changes.namespaces)
        self.bump(services)
        if self.on_stamped is not None:
            for kind, stamp in changes.stamps:
                self.on_stamped(kind, stamp)

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
        if self.on_programmed is not None:
            for key, trigger in triggers.items():
                imp = self.store.imports.get(key)
                self.on_programmed(key, trigger, bool(imp and imp.headless))
        if self.dnssd is not None:
            self.dnssd.full()
        self.bump(None)
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
        self.generation += 1
        log.info("compiled every service (%d)", len(self.owned))
        return False

    def catch_up(self, lname: bytes, zone_len: int) -> None:
        """Compile now the service whose names `lname` (lower case, below a served zone `zone_len`
        bytes long) could be, if it is `behind`: `<service>.<namespace>.svc.<zone>` and the names one
        and two labels below it, exactly those `absent` decides from `owned`."""
        end = len(lname) - zone_len
        starts = _label_starts(lname, end)
        if not 3 <= len(starts) <= 5 or lname[starts[-1] : end] != b"\x03svc":
            return
        self.catch_up_service(_service_key(lname, starts))

    def catch_up_service(self, key: ServiceKey) -> None:
        """`catch_up` for a service named by its key (the discovery endpoints read its compiled names)."""
        if key in self.behind:
            self.compile(key)

    def bump(self, services: Iterable[ServiceKey] | None) -> None:
        """A new serial (decision 9, `clock_serial`) for a change to `services` (None: the initial sync)."""
        before = self.serial
        self.generation += 1
        # Never a step of 2**31 or more: written modulo 2**32, it would read as older (RFC 1982), as
        # after a quiet spell of 24.8 days; the clock is caught up over later changes instead.
        self.serial = max(self.serial + 1, min(clock_serial(), self.serial + MAX_SERIAL_STEP))
        if self.journal is not None:
            if services is None:
                self.journal.reset(self.serial)
            else:
                self.journal.record(services, before, self.serial)
        self._soa.clear()
        # The apex SOA answer carries the serial in its body.
        self._compile_apex()
        if self.on_bump is not None:
            self.on_bump()

    @property
    def soa_serial(self) -> int:
        """The serial as the SOA record writes it (`serial` counts on past 2**32: RFC 1982 wraps it)."""
        return self.serial & SERIAL_MASK

    def set_serial(self, serial: int) -> None:
        """Take another table's SOA serial (a --workers worker takes its supervisor's); a new
        generation, as the resolver's caches hold replies with the SOA in them."""
        if self.journal is not None:
            self.journal.renumber(self.serial, serial)
        self.generation += 1
        self.serial = serial
        self._soa.clear()
        self._compile_apex()

    def _withdraw(self, key: ServiceKey) -> list[tuple[bytes, bytes]]:
        """Remove one service's answers and its `children` entries; returns its `children` entries."""
        for k in self.owned.pop(key, []):
            self.answers.pop(k, None)
        parents = self._service_names(key)
        for parent, _ in parents:
            self.children.pop(parent, None)
        return parents

    def install(self, key: ServiceKey, answers: list[tuple[bytes, Body]] | None) -> None:
        """`compile` with the answers another table rendered (None: it has none): the same bookkeeping
        (`owned`, `children`, PTR records), no rendering.

        Should this table's store disagree with the other's about whether the service is served
        (a worker takes its supervisor's state, so it cannot), it compiles instead: never a stale answer.
        """
        self.behind.discard(key)
        svc = self.service(*key)
        if svc is not None and not self.namespace_exposed(key[0]):
            svc = None
        if (svc is None) != (answers is None):
            self.compile(key)
            return
        parents = self._withdraw(key)
        if self.reverse_zones:
            self._compile_pointers(key, svc)
        if svc is None or answers is None:
            return
        for k, body in answers:
            self.answers[k] = body
        self.owned[key] = [k for k, _ in answers]
        self.children.update(parents)

    @collector_paused
    def compile(self, key: ServiceKey) -> None:
        """Swap in one service's compiled answers (or remove them)."""
        self.behind.discard(key)
        parents = self._withdraw(key)
        svc = self.service(*key)
        if svc is None or not self.namespace_exposed(key[0]):
            if self.reverse_zones:
                self._compile_pointers(key, None)
            return
        if self.reverse_zones:
            self._compile_pointers(key, svc)
        # A plain ClusterSetIP service (most of them): its answers written in one pass (fastpath.py).
        fast = fastpath.answers(svc.imp, self.zones, self.ttl, self.negative) if self.use_fastpath else None
        if fast is not None:
            owned = self.owned[key] = []
            for lname, qtype, body in fast:
                k = lname + QTYPE_IN[qtype]
                self.answers[k] = body
                owned.append(k)
            self.children.update(parents)
            return
        keys: list[bytes] = []
        # Per-endpoint names (10 per service and more, rarely asked for a ClusterSetIP service)
        # are compiled on their first query (Resolver -> remember): that keeps the table, and
        # so memory and compile time per change, proportional to services, not endpoints.
        # compile_service lists the service's entries once and groups them by name, so this
        # costs O(entries + answers), not O(names x entries).
        answers = compiler.compile_service(svc, self, self.ttl, self.config.ns_addresses, endpoint_names=False)
        last: tuple[str, ...] | None = None
        rel = b""
        names = NameCache()
        longest = compiler.longest_name(svc)
        # An address answer's body depends on the answer and where the zone sits in the question, not
        # on the name: compile_service hands the same Answer to names that share it (the port names of
        # a headless service), rendered once per zone position. The Answer is kept beside its body so
        # its id stays its own for the whole compile.
        addresses: dict[tuple[int, int], tuple[vocab.Answer, Body]] = {}
        for labels, qtype, ans in answers:
            if ans.nxdomain:
                continue  # negative answers depend on sync state: decided per query
            if labels is not last:
                last, rel = labels, encode_labels(labels)
            for zwire in self.zones:
                lname = rel + zwire
                k = lname + QTYPE_IN[qtype]
                short = longest + len(zwire) <= 255
                if qtype == vocab.SRV:
                    body = self.render(lname, len(zwire), ans, names, short)
                else:
                    at = (id(ans), len(lname) - len(zwire))
                    done = addresses.get(at)
                    if done is None:
                        done = addresses[at] = (ans, self.render(lname, len(zwire), ans, names, short))
                    body = done[1]
                self.answers[k] = body
                keys.append(k)
        self.owned[key] = keys
        self.children.update(parents)

    def _service_names(self, key: ServiceKey) -> list[tuple[bytes, bytes]]:
        """(`<service>.<namespace>.svc.<zone>` in wire form, lower case; the zone) for each
        zone of `children`."""
        namespace, service = key
        try:
            rel = service_labels(service.lower(), namespace.lower())
        except ValueError:  # no DNS name (a label longer than 63 bytes): none of its names is compiled either
            return []
        return [(rel + zwire, zwire) for zwire in self._child_zones]

    def _compile_pointers(self, key: ServiceKey, svc: Service | None) -> None:
        """--reverse-cidr: swap in the PTR answers of every address whose names this service changed."""
        changed = self.ptr.set_service(key, reverse.service_pointers(svc) if svc is not None else {})
        for address in changed:
            lname = encode_labels(reverse.pointer_labels(address)) + b"\x00"
            k = lname + PTR_IN
            targets = self.ptr.targets(address)
            zwire = self.reverse_zone_of(lname)
            if not targets or zwire is None:
                self.answers.pop(k, None)
                continue
            self.answers[k] = self.render(lname, len(zwire), reverse.ptr_answer(targets, self.forward_zones, self.ttl))

    def remember(self, key: ServiceKey, k: bytes, body: Body) -> None:
        """Keep an answer computed on first query (per-endpoint names), bounded per service."""
        keys = self.owned.get(key)
        if keys is not None and len(keys) < LAZY_LIMIT:
            self.answers[k] = body
            keys.append(k)

    def _compile_apex(self) -> None:
        for zwire in self.zones:
            k = zwire + struct.pack(">HH", vocab.SOA, 1)
            self.answers[k] = self.render(zwire, len(zwire), vocab.Answer(vocab.NOERROR, apex_soa=True))

    # ----------------------------------------------------------------- names that cannot exist

    def absent(self, lname: bytes, zone_len: int) -> bool:
        """True when `lname` (lower-cased, valid, below a served zone `zone_len` bytes long) is a name
        that `compiler.answer` answers NXDOMAIN for every type but SOA, decided from its shape and the
        table's indexes alone.

        A random-subdomain flood (`<random>.<svc>.<ns>.svc.<zone>`, unique names) misses every cache;
        this answers it with a few byte comparisons and one dict lookup instead of the zone logic's
        entry walk. Only the shapes below are decided; anything else (the apex, `svc`/`pod`, a
        namespace, `ns.dns`, `dns-version`, port and per-endpoint names of an existing service, ...)
        returns False and takes `compiler.answer`, and so does every DNS-SD browsing name under `--dns-sd`.
        The caller checks sync state, class and type (SOA is NODATA everywhere, D5), and keeps reverse
        zones (`--reverse-cidr`) away. The branches mirror `names.parse` and `compiler._lookup`:

        * 6 or more labels ending in `svc`, or any name whose last label is neither `svc` nor `pod`:
          INVALID (not `dns-version` or `ns.dns`, which `answer` treats first).
        * 2 or more labels ending in `pod`: below pod.Z, NXDOMAIN (decision 6).
        * 3 to 5 labels ending in `svc` whose `<svc>.<ns>` has no compiled service: no such
          ServiceImport, or its namespace is not exposed (`compile` keeps `owned` exactly for
          the services that exist in an exposed namespace).
        * 4 labels ending in `svc`: CoreDNS's endpoint query with cluster id "", which only a slice
          whose cluster id is the empty string could answer, and `objects` makes none (a missing
          label is None, decision 4; an empty one is refused or read as missing).
        """
        if self.dnssd is not None and self.dnssd.exists(lname):
            return False  # --dns-sd: a browsing name (NODATA for the types it has no records of)
        end = len(lname) - zone_len
        starts = _label_starts(lname, end)
        count = len(starts)
        if not count:
            return False  # the apex
        last = lname[starts[-1] : end]
        if last == b"\x03svc":
            if count <= 2 or count >= 6:
                return count >= 6
            if _service_key(lname, starts) not in self.owned:
                return True
            return count == 4
        
        if last == b"\x03pod":
            return count >= 2
        rel = lname[:end]
        return rel != b"\x0bdns-version" and rel != b"\x02ns\x03dns"

    # ----------------------------------------------------------------- zones

    def zone_of(self, lname: bytes) -> bytes | None:
        """The longest served zone containing `lname` (zones are few: a scan is fine); reverse zones too."""
        if self.reverse_zones:
            found = self.reverse_zone_of(lname)
            if found is not None:
                return found
        best = None
        for zwire in self.zones:
            if lname.endswith(zwire) and (best is None or len(zwire) > len(best)):
                start = len(lname) - len(zwire)
                if start == 0 or _label_boundary(lname, start):
                    best = zwire
        return best


    def reverse_zone_of(self, lname: bytes) -> bytes | None:
        """The --reverse-cidr zone containing `lname`: its suffixes looked up, longest first."""
        if not (lname.endswith(b"\x07in-addr\x04arpa\x00") or lname.endswith(b"\x03ip6\x04arpa\x00")):
            return None
        i = 0
        while i < len(lname) and lname[i]:
            if lname[i:] in self.reverse_zones:
                return lname[i:]
            i += lname[i] + 1
        return None


def _sole_zones(zones: tuple[bytes, ...], reverse_zones: frozenset[bytes]) -> tuple[bytes, ...]:
    """The zones for which `Table.zone_of` of every name below is the zone itself: no other served
    zone (forward or reverse) ends with it, and it ends with no reverse zone (those are matched
    first). A byte-suffix test, stricter than a label one: a doubtful zone only loses a fast lane."""
    others = zones + tuple(reverse_zones)
    return tuple(z for z in zones if not any(o != z and o.endswith(z) for o in others)
                 and not any(z.endswith(r) for r in reverse_zones))


def _label_starts(lname: bytes, end: int) -> list[int]:
    """Where each label of `lname` (wire form, valid) starts, up to `end` (where its zone starts)."""
    starts: list[int] = []
    i = 0
    while i < end:
        starts.append(i)
        i += lname[i] + 1
    return starts


def _service_key(lname: bytes, starts: list[int]) -> ServiceKey:
    """(namespace, service) of `<service>.<namespace>.svc` ending at `starts[-1]` (`_label_starts`)."""
    return (lname[starts[-2] + 1 : starts[-1]].decode("latin-1"), lname[starts[-3] + 1 : starts[-2]].decode("latin-1"))


def _label_boundary(lname: bytes, at: int) -> bool:
    i = 0
    while i < at:
        i += lname[i] + 1
    return i == at
