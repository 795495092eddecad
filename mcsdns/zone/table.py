"""The record table: compiled wire answers keyed by the question's bytes.

The key is the lower-cased question as it sits in the packet (name, type,
class), so the hot path is `answers.get(packet[12:qend].lower())`. Each
service's keys are recompiled together when the store reports a change to
it, and swapped in as a group; the event loop is the only writer and reader,
so a query never sees half a service.

The table is also the `ZoneView` the zone logic reads for names it did not
compile, so compiled and per-query answers come from the same objects.

When the table compiles (held back until the initial sync, or left `behind` and compiled
between queries) is `schedule.Schedule`'s, which the table is built on.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Callable, Iterable, Protocol

from ..objects import EndpointSlice, ServiceImport
from ..store import Changes, ServiceKey, Store
from . import compiler, fastpath, reverse, vocab
from .compiler import Service
from .schedule import Schedule, collector_paused, label_starts, service_key
from .serial import SERIAL_MASK, SerialLog, clock_serial, next_serial
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

QTYPE_IN = {t: struct.pack(">HH", t, vocab.CLASS_IN) for t in compiler.COMPILED_TYPES}
PTR_IN = struct.pack(">HH", vocab.PTR, vocab.CLASS_IN)
# Per service, how many answers computed on first query (per-endpoint names, odd
# spellings) are kept; bounds memory against clients walking random names.
LAZY_LIMIT = 4096
# A change's compile lets waiting queries through (`Table.interleave`) at most this often: a query
# then waits for one step of it (a service, or one large answer), not for the whole change.
STEP_SECONDS = 0.0002
# A headless service keeps the bytes derived from its targets and addresses between compiles (a
# readiness flip renders the same ones again); past this many per endpoint they are dropped and
# derived afresh, so endpoints that come and go do not pile up.
NAMES_PER_ENDPOINT = 8
# The last generations whose changed services `changed` names: a resolver this few generations behind
# drops only those services' cached replies (and every reply that is not one service's answer).
CHANGE_LOG = 64


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


class Table(Schedule):
    def __init__(self, config: TableConfig, store: Store) -> None:
        self.config = config
        self.store = store
        self.ttl = config.ttl
        self.zones = tuple(encode_labels(z.split(".")) + b"\x00" for z in config.zones)
        self.answers: dict[bytes, Body] = {}
        self._names: dict[ServiceKey, NameCache] = {}  # headless services' derived bytes, kept between compiles
        # Answers the queries waiting now; the App sets it once its listeners are open. A change's
        # compile (`on_change`, after the sync) calls it between steps (`_step`), with the table in a
        # state a query may see: every service either as it was or as it is now.
        self.interleave: Callable[[], None] | None = None
        self._stepping: Callable[[], None] | None = None  # `interleave`, while a change compiles
        self._step_due = 0.0
        self.owned: dict[ServiceKey, list[bytes]] = {}  # exactly the services that exist in an exposed namespace
        self.serial = clock_serial()
        self.generation = 0
        # Per generation, newest last: (the generation, the `children` names of the services whose answers it
        # changed; None: any answer may have changed). What the resolver's caches drop (`Resolver.catch_up`).
        self.changed: deque[tuple[int, frozenset[bytes] | None]] = deque(maxlen=CHANGE_LOG)
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
        self.use_fastpath = True  # ClusterSetIP services take fastpath.py's one pass (tests turn it off to compare)
        self._begin_schedule()
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
        and a zone transfer's snapshot of the store, xfr/stream.py)."""
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
            self._hold(changes)  # before the initial sync (schedule.py)
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
        self._stepping, self._step_due = self.interleave, perf_counter() + STEP_SECONDS
        try:
            for key in services:
                if compiled and key in compiled:
                    self.install(key, compiled[key])
                else:
                    self.compile(key)
                if self.on_programmed is not None:
                    imp = self.store.imports.get(key)
                    self.on_programmed(key, changes.triggers.get(key), bool(imp and imp.headless))
                self._step()
        finally:
            self._stepping = None
        if self.dnssd is not None:
            self.dnssd.update(services, changes.namespaces)
        # A namespace or the local cluster changes more than its services' answers (which names exist
        # around them): the caches start over then.
        self.bump(services, scoped=not (changes.namespaces or changes.cluster_id))
        if self.on_stamped is not None:
            for kind, stamp in changes.stamps:
                self.on_stamped(kind, stamp)

    def _step(self) -> None:
        """Between two steps of a change's compile: answer the waiting queries (`interleave`), once
        every STEP_SECONDS. The generation is bumped after the change, so what they cache meanwhile
        is dropped with the rest."""
        run = self._stepping
        if run is not None and perf_counter() >= self._step_due:
            run()
            self._step_due = perf_counter() + STEP_SECONDS

    def _synced(self, triggers: dict[ServiceKey, str]) -> None:
        """The initial sync's compile is done (`Schedule._compile_everything`): the programming times of
        the changes held back, DNS-SD's full index, the first serial."""
        if self.on_programmed is not None:
            for key, trigger in triggers.items():
                imp = self.store.imports.get(key)
                self.on_programmed(key, trigger, bool(imp and imp.headless))
        if self.dnssd is not None:
            self.dnssd.full()
        self.bump(None)

    def bump(self, services: Iterable[ServiceKey] | None, scoped: bool = True) -> None:
        """A new serial (decision 9, `clock_serial`) for a change to `services` (None: the initial sync);
        `scoped`: only their answers changed (see `advance`)."""
        before = self.serial
        if services is not None:
            services = list(services)
        self.advance(services if scoped else None)
        self.serial = next_serial(self.serial)
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
        self.advance(())
        self.serial = serial
        self._soa.clear()
        self._compile_apex()

    def advance(self, services: Iterable[ServiceKey] | None) -> None:
        """A new generation, in which the answers of `services` changed and nothing else but the serial
        (None: anything may have). Every cached reply that is not one service's answer (a negative one
        holds the SOA, so the serial) is dropped at each: `changed` names only the services."""
        self.generation += 1
        names = None if services is None else frozenset(n for key in services for n, _ in self._service_names(key))
        self.changed.append((self.generation, names))

    def owner(self, lname: bytes) -> bytes | None:
        """The `children` name (`<service>.<namespace>.svc.<zone>`) that `lname` (wire form, lower case)
        is or is below; None: no compiled service's."""
        children = self.children
        at, end = 0, len(lname) - 1
        while at < end:
            if lname[at:] in children:
                return lname[at:]
            at += lname[at] + 1
        return None

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
        self._swap(key, svc, answers)

    def _swap(self, key: ServiceKey, svc: Service | None, answers: list[tuple[bytes, Body]] | None) -> None:
        """Put one service's rendered `answers` in place of its old ones (None: it has none), with its
        `children` entries and PTR records; nothing in between yields to a query."""
        parents = self._withdraw(key)
        if self.reverse_zones:
            self._compile_pointers(key, svc)
        if svc is None or answers is None:
            self._names.pop(key, None)
            return
        table = self.answers
        keys = []
        for k, body in answers:
            table[k] = body
            keys.append(k)
        self.owned[key] = keys
        self.children.update(parents)

    @collector_paused
    def compile(self, key: ServiceKey) -> None:
        """Swap in one service's compiled answers (or remove them).

        Every answer is rendered before any is swapped in (`_swap`), so the queries a long compile
        lets through between its steps (`_step`) see the service as it was."""
        self.behind.discard(key)
        svc = self.service(*key)
        if svc is None or not self.namespace_exposed(key[0]):
            self._swap(key, None, None)
            return
        # A plain ClusterSetIP service (most of them): its answers written in one pass (fastpath.py).
        fast = fastpath.answers(svc.imp, self.zones, self.ttl, self.negative) if self.use_fastpath else None
        if fast is not None:
            self._swap(key, svc, [(lname + QTYPE_IN[qtype], body) for lname, qtype, body in fast])
        else:
            self._swap(key, svc, self._rendered(key, svc))

    def _rendered(self, key: ServiceKey, svc: Service) -> list[tuple[bytes, Body]]:
        """Every compiled answer of `svc` (not a plain ClusterSetIP one), (lookup key, body) each."""
        out: list[tuple[bytes, Body]] = []
        # Per-endpoint names (10 per service and more, rarely asked for a ClusterSetIP service)
        # are compiled on their first query (Resolver -> remember): that keeps the table, and
        # so memory and compile time per change, proportional to services, not endpoints.
        # compile_service lists the service's entries once and groups them by name, so this
        # costs O(entries + answers), not O(names x entries).
        # (A generator: its entries are listed at the first answer, and each answer between two renders.)
        answers = compiler.compile_service(svc, self, self.ttl, self.config.ns_addresses, endpoint_names=False)
        last: tuple[str, ...] | None = None
        rel = b""
        names = self._names_of(key, svc)
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
                short = longest + len(zwire) <= 255
                if qtype == vocab.SRV:
                    body = self.render(lname, len(zwire), ans, names, short)
                    self._step()
                else:
                    at = (id(ans), len(lname) - len(zwire))
                    done = addresses.get(at)
                    if done is None:
                        done = addresses[at] = (ans, self.render(lname, len(zwire), ans, names, short))
                        self._step()
                    body = done[1]
                out.append((lname + QTYPE_IN[qtype], body))
        return out

    def _names_of(self, key: ServiceKey, svc: Service) -> NameCache:
        """The NameCache to render `svc` with: a headless service's own, kept between its compiles
        (bounded by NAMES_PER_ENDPOINT); a new one for any other."""
        if not svc.imp.headless:
            return NameCache()
        names = self._names.get(key)
        if names is None or names.size() > NAMES_PER_ENDPOINT * (sum(len(sl.addresses) for sl in svc.slices) + 16):
            names = self._names[key] = NameCache()
        return names

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
        starts = label_starts(lname, end)
        count = len(starts)
        if not count:
            return False  # the apex
        last = lname[starts[-1] : end]
        if last == b"\x03svc":
            if count <= 2 or count >= 6:
                return count >= 6
            if service_key(lname, starts) not in self.owned:
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


def _label_boundary(lname: bytes, at: int) -> bool:
    i = 0
    while i < at:
        i += lname[i] + 1
    return i == at
