"""The zone logic: objects -> answers, as pure functions (contract sections 2 and 3).

`answer()` decides what one question gets, from the parsed name and a read-only
view of the objects: CoreDNS's "entries" model (section 2.2) followed by its
qtype dispatch (handler.go). It does no I/O and knows nothing about packets,
so the contract's tables test it directly.

`compile_service()` computes ahead of time what `answer()` says for every name
a service makes, so the server can answer those from a dict of ready wire
bytes; names it did not compile (odd spellings, rare types, negative answers)
take `answer()` at query time. Both paths share the entries model and the
dispatch (`respond()`); `compile_service()` only lists the service's entries
once and groups them by name instead of filtering them again for each name,
so they cannot disagree (tests/test_compile_cost.py holds them to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple, Protocol

from ..objects import EndpointSlice, Port, ServiceImport
from .names import Kind, Request, parse
from .vocab import AAAA, NOERROR, NS, NXDOMAIN, SERVFAIL, SOA, SRV, TXT, A, Answer, Record, wire_length

DNS_SCHEMA_VERSION = "1.1.0"  # what CoreDNS answers, not the KEP's 1.0.0 (contract 2.6)
DNS_VERSION_TTL = 28800
NS_NAME = ("ns", "dns")  # ns.dns.<zone>, CoreDNS's own name for itself


class Entry(NamedTuple):
    """One (address, port, target) triple of the entries model.

    A named tuple rather than a dataclass: a headless service of 1000 endpoints x 100 ports makes
    100,000 of them per compile, and a tuple is cheaper to build (and unpacked whole by the loops
    that read every field).
    """

    ip: str
    v6: bool
    port: int
    target: tuple[str, ...]  # labels left of the zone
    srv: bool = True  # False for slices without a cluster id (decision 4): no SRV from them
    remote: bool = False  # --local-cluster: from another cluster (SRV priority 10, ordered after the local ones)


NODATA = Answer(NOERROR, soa=True)
NAME_ERROR = Answer(NXDOMAIN, soa=True)
NOT_SYNCED = Answer(SERVFAIL, soa=True)  # decision 10: what NXDOMAIN becomes before sync


class ZoneView(Protocol):
    """What the zone logic may read: exposure of namespaces and one service's objects."""

    def namespace_exposed(self, namespace: str) -> bool: ...

    def service(self, namespace: str, name: str) -> "Service | None": ...


@dataclass(frozen=True, slots=True)
class Service:
    """A ServiceImport with its MCS EndpointSlices: everything one service's names depend on.

    `local` is the lower-cased `--local-cluster` id (None: the flag is off); then `slices`
    hold the local cluster's first (`with_locality`), so every answer lists them first.
    """

    imp: ServiceImport
    slices: tuple[EndpointSlice, ...] = ()
    local: str | None = None


LOCAL_PRIORITY, REMOTE_PRIORITY = 0, 10  # SRV priorities with --local-cluster (the KEP sets none)


def with_locality(imp: ServiceImport, slices: tuple[EndpointSlice, ...], local: str | None) -> Service:
    """The service with its local cluster's slices first (stable otherwise); `local` as in Service.

    Ordering the slices is the whole of the ordering: the entries, and so the A/AAAA and SRV
    answers and the glue, follow the slice order, and the sets do not change.
    """
    if local is None:
        return Service(imp, slices)
    ordered = tuple(sorted(slices, key=lambda sl: not _is_local(sl.cluster, local)))
    return Service(imp, ordered, local)


def slice_ips(slices: tuple[EndpointSlice, ...]) -> tuple[str, ...]:
    """The ready addresses of `slices`, each once, in slice order (--ips-from-slices)."""
    return tuple(dict.fromkeys(addr.ip for sl in slices for addr in sl.addresses))


def _is_local(cluster: str | None, local: str | None) -> bool:
    return cluster is not None and cluster.lower() == local


def _remote(cluster: str | None, local: str | None) -> bool:
    """An endpoint of another cluster, with --local-cluster on (a slice without cluster id is not local)."""
    return local is not None and not _is_local(cluster, local)


# --------------------------------------------------------------------------- entries (2.2)


def _port_matches(req: Request, port: Port) -> bool:
    if req.port and req.port != port.name.lower():
        return False
    if req.protocol and req.protocol != port.protocol.lower():
        return False
    return True


def find_entries(req: Request, view: ZoneView) -> tuple[list[Entry], bool]:
    """CoreDNS `findMultiClusterServices`: (entries, name exists) for a SERVICE request."""
    svc = view.service(req.namespace, req.service)
    if svc is None:
        return [], False
    imp = svc.imp
    base = (imp.name, imp.namespace, "svc")
    entries: list[Entry] = []
    if imp.headless or req.endpoint:
        for sl in svc.slices:
            cluster = sl.cluster
            if req.endpoint and cluster is None:
                continue  # no per-endpoint names without a cluster id (decision 4)
            remote = _remote(cluster, svc.local)
            for addr in sl.addresses:
                if req.endpoint and (req.cluster != cluster.lower() or req.endpoint != addr.hostname.lower()):
                    continue
                # A cluster id with dots (a valid label value) spans several labels, as in CoreDNS's target.
                target = (addr.hostname, *cluster.split(".")) + base if cluster is not None else base
                for port in sl.ports:
                    if _port_matches(req, port):
                        entries.append(Entry(addr.ip, addr.v6, port.port, target, cluster is not None, remote))
        return entries, bool(entries)
    exists = False
    for port in imp.ports:
        if not _port_matches(req, port):
            continue
        exists = True
        for ip in imp.ips:
            entries.append(Entry(ip, ":" in ip and "." not in ip, port.port, base))
    return entries, exists


PortKey = tuple[str, str]  # (port name, protocol), lower-cased: what `_name._protocol` asks for
Group = tuple[list[Entry], bool]  # (entries, name exists), as find_entries returns them


def service_entries(svc: Service) -> tuple[Group, dict[PortKey, Group]]:
    """`find_entries` for the service name and every `_name._protocol` name, in one pass.

    The entries are listed once (address x port) and each is also appended to the group of
    its port's (name, protocol): a group is exactly the subsequence, in order, that
    `find_entries` keeps for that port filter, so every name's answer is built from its own
    group in O(entries) for the whole service rather than O(names x entries).
    A name whose key has no group has no entries and does not exist.
    """
    imp = svc.imp
    base = (imp.name, imp.namespace, "svc")
    groups: dict[PortKey, list[Entry]] = {}
    entries: list[Entry] = []
    if imp.headless:
        for sl in svc.slices:
            cluster = sl.cluster
            srv = cluster is not None
            remote = _remote(cluster, svc.local)
            # One group list per port of the slice, looked up once per slice, not per address.
            slots = [(port.port, groups.setdefault((port.name.lower(), port.protocol.lower()), [])) for port in sl.ports]
            for addr in sl.addresses:
                target = (addr.hostname, *cluster.split(".")) + base if cluster is not None else base
                ip, v6 = addr.ip, addr.v6
                for number, group in slots:
                    e = Entry(ip, v6, number, target, srv, remote)
                    entries.append(e)
                    group.append(e)
        # Headless: a name exists when it has entries.
        return (entries, bool(entries)), {k: (g, bool(g)) for k, g in groups.items()}
    ips = [(ip, ":" in ip and "." not in ip) for ip in imp.ips]
    for port in imp.ports:
        group = groups.setdefault((port.name.lower(), port.protocol.lower()), [])
        for ip, v6 in ips:
            e = Entry(ip, v6, port.port, base)
            entries.append(e)
            group.append(e)
    # ClusterSetIP: a name exists when a port matches it, with or without IPs.
    return (entries, bool(imp.ports)), {k: (g, True) for k, g in groups.items()}


def endpoint_entries(svc: Service) -> dict[tuple[str, str], list[Entry]]:
    """`find_entries` for every per-endpoint name `<hostname>.<cluster>`, in one pass.

    Keyed by (hostname, cluster id), lower-cased; slices without a cluster id make no
    per-endpoint names (decision 4).
    """
    imp = svc.imp
    base = (imp.name, imp.namespace, "svc")
    groups: dict[tuple[str, str], list[Entry]] = {}
    for sl in svc.slices:
        cluster = sl.cluster
        if cluster is None:
            continue
        lcluster = cluster.lower()
        remote = _remote(cluster, svc.local)
        for addr in sl.addresses:
            group = groups.setdefault((addr.hostname.lower(), lcluster), [])
            target = (addr.hostname, *cluster.split(".")) + base
            for port in sl.ports:
                group.append(Entry(addr.ip, addr.v6, port.port, target, True, remote))
    return groups


# --------------------------------------------------------------------------- rendering (backend_lookup.go)


def address_records(entries: list[Entry], v6: bool, ttl: int) -> tuple[Record, ...]:
    seen: set[str] = set()
    out = []
    for e in entries:
        if e.v6 == v6 and e.ip not in seen:
            seen.add(e.ip)
            out.append(Record(None, AAAA if v6 else A, ttl, e.ip))
    return tuple(out)


def local_count(entries: list[Entry], v6: bool) -> int:
    """How many of `address_records(entries, v6)` lead as the local cluster's, when remote ones follow.

    Entries hold the local cluster's first (with_locality), so the records of local entries are a
    prefix of the set (an address in a local and a remote slice counts once, as local). 0 when
    there is only one group: no --local-cluster, or all local, or all remote.
    """
    seen: set[str] = set()
    local = remote = 0
    for e in entries:
        if e.v6 == v6 and e.ip not in seen:
            seen.add(e.ip)
            if e.remote:
                remote += 1
            else:
                local += 1
    return local if local and remote else 0


# No DNS message carries more records than this: it is at most 65535 bytes and every record of
# ours takes at least 16 (a compressed owner, 10 fixed bytes, 4 bytes of A data), so 4097 records
# are already more than one reply can hold (4097 * 16 = 65552). Beyond it an SRV answer's records
# (and glue) are left out: no reply could carry them, and a reply cut to fit (with TC) keeps the
# same leading records either way. Address sets are never cut: --loadbalance rotates them whole.
REPLY_RECORDS_MAX = 4097


Glue = dict[tuple[str, ...], dict[str, Record]]  # target -> address -> its glue record, shared by a service's names


def srv_records(entries: list[Entry], ttl: int, glue_records: Glue | None = None) -> tuple[tuple[Record, ...], tuple[Record, ...]]:
    """SRV answers and their address glue, with CoreDNS's weights and de-duplication.

    At most REPLY_RECORDS_MAX records in all, answers first (as a reply holds them): the records
    past that are ones no reply can carry, and a service of 1000 endpoints x 100 ports would
    otherwise list 100,000 for its bare name. `glue_records` lets the names of one service (one
    TTL) share their equal glue records instead of building each again: (target, address) decides
    the record, since the address text decides its family.
    """
    if glue_records is None:
        glue_records = {}
    counted = [e for e in entries if e.srv]
    weight = max(1, 100 // len(counted)) if counted else 0
    answers: list[Record] = []
    extra: list[Record] = []
    # This loop runs once per entry of every SRV name (100,000 times for a service of 1000 endpoints
    # x 100 ports), so the (target, port) and (target, address) pairs already seen are kept without
    # building a pair per entry: a target's first port and first address in a dict, and only the
    # further ones (a target with several numbers for one name, or in several slices) as pairs.
    first_port: dict[tuple[str, ...], int] = {}
    first_ip: dict[tuple[str, ...], str] = {}
    more_ports: set[tuple[tuple[str, ...], int]] = set()
    more_ips: set[tuple[tuple[str, ...], str]] = set()
    for ip, v6, port, target, _, remote in counted:
        if port == -1:
            continue
        seen = first_port.get(target)
        if seen is None:
            first_port[target] = port
            new = True
        elif seen == port or (target, port) in more_ports:
            new = False
        else:
            more_ports.add((target, port))
            new = True
        if new:
            if len(answers) == REPLY_RECORDS_MAX:
                break  # the answer section alone is more than a reply holds: no glue will fit either
            answers.append(Record(None, SRV, ttl, (REMOTE_PRIORITY if remote else LOCAL_PRIORITY, weight, port, target)))
        known = first_ip.get(target)
        if known is None:
            first_ip[target] = ip
        elif known == ip or (target, ip) in more_ips:
            continue
        else:
            more_ips.add((target, ip))
        by_address = glue_records.get(target)
        if by_address is None:
            by_address = glue_records[target] = {}
        record = by_address.get(ip)
        if record is None:
            record = by_address[ip] = Record(target, AAAA if v6 else A, ttl, ip)
        extra.append(record)
    return tuple(answers), tuple(extra[: REPLY_RECORDS_MAX - len(answers)])


def _positive_or_nodata(answer: tuple[Record, ...], additional: tuple[Record, ...] = ()) -> Answer:
    return Answer(NOERROR, answer, additional) if answer else NODATA


# --------------------------------------------------------------------------- the dispatch (handler.go)


def answer(labels: tuple[str, ...], qtype: int, view: ZoneView, ttl: int, ns_addresses: tuple[str, ...]) -> Answer:
    """The answer to `labels` (lower-cased, left of the zone) for `qtype`, before sync policy.

    AXFR/IXFR and classes are decided by the caller (they are server-level).
    """
    if qtype == TXT and labels == ("dns-version",):
        return Answer(NOERROR, (Record(None, TXT, DNS_VERSION_TTL, DNS_SCHEMA_VERSION),))
    req = parse(labels)
    if qtype == SOA:
        # Apex: the SOA itself; anywhere else NODATA without an existence check (D5).
        return Answer(NOERROR, apex_soa=True) if req.kind is Kind.APEX else NODATA
    if qtype == NS and req.kind is Kind.APEX:
        return Answer(
            NOERROR,
            (Record(None, NS, ttl, NS_NAME),),
            tuple(Record(NS_NAME, AAAA if ":" in ip else A, ttl, ip) for ip in ns_addresses),
        )
    if labels == NS_NAME:
        if qtype in (A, AAAA):
            return _positive_or_nodata(
                tuple(Record(None, qtype, ttl, ip) for ip in ns_addresses if (":" in ip) == (qtype == AAAA))
            )
        return NAME_ERROR if qtype == TXT else NODATA

    entries, exists = _lookup(req, view)
    return respond(entries, exists, qtype, ttl)


def respond(entries: list[Entry], exists: bool, qtype: int, ttl: int,
            glue_records: Glue | None = None) -> Answer:
    """The answer for a name of the zone's service tree, from its entries (CoreDNS's qtype dispatch).

    `glue_records`: shared between the names of one service, as in `srv_records`.
    """
    if qtype == A or qtype == AAAA:
        records = address_records(entries, qtype == AAAA, ttl)
        if records:
            if entries[-1].remote:  # --local-cluster with remote entries (they come last): two groups?
                return Answer(NOERROR, records, local=local_count(entries, qtype == AAAA))
            return Answer(NOERROR, records)
    elif qtype == SRV:
        answers, extra = srv_records(entries, ttl, glue_records)
        if answers:
            return Answer(NOERROR, answers, extra)
    elif qtype == TXT:
        # CoreDNS quirk (2.6): TXT is NODATA only where there are entries.
        return NODATA if entries else NAME_ERROR
    return NODATA if exists or entries else NAME_ERROR


def _lookup(req: Request, view: ZoneView) -> tuple[list[Entry], bool]:
    kind = req.kind
    if kind is Kind.SERVICE:
        if not view.namespace_exposed(req.namespace):
            return [], False
        return find_entries(req, view)
    if kind is Kind.NAMESPACE:
        return [], view.namespace_exposed(req.namespace)
    return [], kind is Kind.APEX or kind is Kind.APEX_LIKE


# --------------------------------------------------------------------------- ahead of time


# The types the server answers from precompiled bytes; every other type takes answer() per query.
COMPILED_TYPES = (A, AAAA, SRV)


def service_names(svc: Service, endpoint_names: bool = True) -> Iterable[tuple[str, ...]]:
    """The lower-cased names (left of the zone) a service answers for in canonical spelling;
    without the per-endpoint names (`<hostname>.<cluster>`) when `endpoint_names` is False."""
    imp = svc.imp
    base = (imp.name, imp.namespace, "svc")
    yield base
    ports: Iterable[Port] = imp.ports
    if imp.headless:
        ports = [p for sl in svc.slices for p in sl.ports]
    seen: set[tuple[str, ...]] = set()
    for p in ports:
        if p.name and p.protocol and len(p.name) < 63:  # `_` + a 63-byte port name is no DNS label: no such name
            seen.add((f"_{p.name.lower()}", f"_{p.protocol.lower()}"))
    for sl in svc.slices if endpoint_names else ():
        if sl.cluster is None:
            continue
        for addr in sl.addresses:
            seen.add((addr.hostname.lower(), sl.cluster.lower()))
    for prefix in sorted(seen):
        yield prefix + base


def compile_service(
    svc: Service, view: ZoneView, ttl: int, ns_addresses: tuple[str, ...], *, endpoint_names: bool = True
) -> Iterator[tuple[tuple[str, ...], int, Answer]]:
    """(labels, qtype, Answer) for every precompiled question of one service, in `service_names` order.

    Each answer is the one `answer(labels, qtype, view, ...)` gives; `svc` is what
    `view.service()` returns for the service. The entries are listed once and grouped by
    name (`service_entries`), so the work is O(entries + answers), not O(names x entries).
    `endpoint_names=False` leaves out the per-endpoint names (`<hostname>.<cluster>`),
    which the table answers on first query instead.
    """
    imp = svc.imp
    exposed = view.namespace_exposed(imp.namespace)
    nothing: Group = ([], False)
    bare, by_port = service_entries(svc) if exposed else (nothing, {})
    by_endpoint: dict[tuple[str, str], list[Entry]] | None = None
    members = _address_members(svc) if exposed and imp.headless else None
    shared: dict[tuple[tuple[int, ...], int], Answer] = {}
    # Names with the same slices share their A/AAAA answer: it is computed from the shortest of
    # their groups (a port name's 1000 entries rather than the service name's 100,000).
    shortest: dict[tuple[int, ...], Group] = {}
    if members is not None:
        for same_key, group_of in [(members[None], bare), *((members.get(k, ()), g) for k, g in by_port.items())]:
            if same_key not in shortest or len(group_of[0]) < len(shortest[same_key][0]):
                shortest[same_key] = group_of
    glue_records: Glue = {}
    for labels in service_names(svc, endpoint_names):
        req = parse(labels)
        group: Group | None = None
        same: tuple[int, ...] | None = None  # headless: the slices a name's A/AAAA answer comes from
        if req.endpoint or req.cluster:  # `<hostname>.<cluster>`
            if not endpoint_names:
                continue
            if req.endpoint:
                if by_endpoint is None:
                    by_endpoint = endpoint_entries(svc) if exposed else {}
                found = by_endpoint.get((req.endpoint, req.cluster), [])
                group = (found, bool(found))
        elif req.port and req.protocol:  # `_name._protocol`
            group = by_port.get((req.port, req.protocol), nothing)
            if members is not None:
                same = members.get((req.port, req.protocol), ())
        elif not req.port and not req.protocol and req.kind is Kind.SERVICE:
            group = bare
            if members is not None:
                same = members[None]
        for qtype in COMPILED_TYPES:
            if group is None:  # no name service_names makes from valid objects; exact all the same
                yield labels, qtype, answer(labels, qtype, view, ttl, ns_addresses)
            elif same is not None and qtype != SRV:
                found = shared.get((same, qtype))
                if found is None:
                    entries, exists = shortest.get(same, group)
                    found = shared[(same, qtype)] = respond(entries, exists, qtype, ttl)
                yield labels, qtype, found
            else:
                yield labels, qtype, respond(group[0], group[1], qtype, ttl, glue_records)


def longest_name(svc: Service) -> int:
    """The wire length (left of the zone) of the longest name any record of the service's answers
    carries: the service name, or an endpoint's target `<hostname>.<cluster>.<service>` (the only
    owners and SRV targets its entries make). A renderer need not check the names of an answer
    whose every name fits in 255 bytes with the zone (wire.Renderer.writable)."""
    imp = svc.imp
    base = wire_length((imp.name, imp.namespace, "svc"))
    longest = base
    for sl in svc.slices:
        if sl.cluster is None or not sl.addresses:
            continue  # its entries' targets are the service name
        cluster = wire_length(tuple(sl.cluster.split(".")))
        # One pass in C over the slice's host labels (a sync reads every address of every slice).
        host = max(map(len, [addr.hostname.encode() for addr in sl.addresses]))
        longest = max(longest, host + 1 + cluster + base)
    return longest


def _address_members(svc: Service) -> dict[PortKey | None, tuple[int, ...]]:
    """For a headless service: which slices (by index) each `_name._protocol` name's entries come from,
    and (key None) the service name's.

    A name's A/AAAA answer depends on nothing else: its entries are those slices' addresses, in
    slice order, once per matching port, and the records keep each address once in first-seen
    order. Names with the same slices (every port name of a service whose slices all carry every
    port) share one answer, computed and rendered once instead of once per port name.
    """
    out: dict[PortKey | None, list[int]] = {}
    for i, sl in enumerate(svc.slices):
        if sl.ports:
            out.setdefault(None, []).append(i)
        for port in sl.ports:
            found = out.setdefault((port.name.lower(), port.protocol.lower()), [])
            if not found or found[-1] != i:
                found.append(i)
    shared = {key: tuple(indexes) for key, indexes in out.items()}
    shared.setdefault(None, ())
    return shared
