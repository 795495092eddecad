"""`mcsdns zone`: the compiled zone printed as an RFC 1035 zone file (rendered with dnslib).

The records come from the same code the server answers from: the objects are
read into a `Store` (from manifests, or one list of the Kubernetes API), a
`Table` is built on it, and every service goes through `compiler.compile_service`
with per-endpoint names included. Each positive answer becomes the records of
its name, so a zone file server loaded with the output (Knot, NSD, BIND) gives
the same A, AAAA, SRV and TXT answers as mcsdns for every name it prints
(tests/test_zonefile.py checks that against knotd), and with `--dns-sd` the
browsing names' PTR, SRV and TXT (dnssd.py). Uses: diffing what two
servers or two manifest sets serve, and feeding a static server in benchmarks.

What a static zone cannot say (the answers that exist only as CoreDNS's
rules, docs/dns-contract.md): `pod.<zone>` and namespaces without services
are NODATA in mcsdns but absent here (NXDOMAIN in a zone file server); a
ClusterSetIP import without IPs is NODATA in mcsdns and absent here; TXT on
an empty non-terminal (`svc.<zone>`, `<ns>.svc.<zone>`) is NXDOMAIN in mcsdns
(a CoreDNS quirk) and NODATA in a zone file server; names mcsdns answers
whatever their spelling (`_._tcp.<svc>...`) appear only in canonical form.
The SOA serial is the table's. A zone transfer (`--transfer-to`, transfer.py) holds
exactly `zone_records`, so a secondary has the records of this file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TextIO

from dnslib import AAAA, NS, PTR, QTYPE, RR, SOA, SRV, TXT, A, DNSLabel
from prometheus_client import CollectorRegistry

from ..config import Config, advertised_addresses, kube_settings
from ..sources.manifests import ManifestSource, default_paths
from ..store import Store
from ..zone import compiler, vocab
from ..zone.table import Table, TableConfig
from ..zone.wire import SOA_EXPIRE, SOA_REFRESH, SOA_RETRY


Owned = vocab.Owned  # a record with its owner's labels, in no zone yet


class ZoneSourceError(RuntimeError):
    """The objects could not be read completely (the message says which source and why)."""


def _name(labels: tuple[str, ...], origin: tuple[str, ...]) -> DNSLabel:
    """Labels left of the zone plus the zone, as dnslib's absolute name.

    A label with a dot (a cluster id that is a DNS subdomain) is split, as the
    server splits it in SRV targets.
    """
    parts = [p for label in labels for p in label.split(".")] + list(origin)
    return DNSLabel([p.encode() for p in parts])


def _rdata(rec: vocab.Record, origin: tuple[str, ...]) -> A | AAAA | SRV | TXT | NS | PTR:
    if rec.rtype == vocab.A:
        return A(rec.data)
    if rec.rtype == vocab.AAAA:
        return AAAA(rec.data)
    if rec.rtype == vocab.SRV:
        priority, weight, port, target = rec.data
        return SRV(priority, weight, port, _name(target, origin))
    if rec.rtype == vocab.TXT:
        return TXT(rec.data)
    if rec.rtype == vocab.NS:
        return NS(_name(rec.data, origin))
    if rec.rtype == vocab.PTR and isinstance(rec.data, tuple):  # DNS-SD browsing (a reverse zone's is Absolute)
        return PTR(_name(rec.data, origin))
    raise ValueError(f"no zone file form for record type {rec.rtype}")


def zone_records(table: Table, zone_name: str, ns_addresses: tuple[str, ...]) -> Iterator[RR]:
    """Every record of `zone_name`: SOA, apex NS and its addresses, dns-version, each service's, then
    (--dns-sd) the DNS-SD browsing names'."""
    origin = tuple(zone_name.lower().rstrip(".").split("."))
    yield from apex_records(table, origin, ns_addresses)
    for key in sorted(table.store.imports):
        svc = table.service(*key)
        if svc is None or not table.namespace_exposed(key[0]):
            continue
        yield from service_records(svc, table, origin, table.ttl, ns_addresses)
    if table.dnssd is not None:
        browsing = [owned for part in table.dnssd.snapshot() for owned in part]
        for owner, rec in sorted(browsing, key=lambda o: (o[0], o[1].rtype, repr(o[1].data))):
            yield as_rr(owner, rec, origin)


def apex_records(table: Table, origin: tuple[str, ...], ns_addresses: tuple[str, ...]) -> Iterator[RR]:
    """The records of the zone `origin` (labels) that belong to no service: SOA first, apex NS and its
    addresses, dns-version."""
    ttl = table.ttl
    apex = _name((), origin)
    yield RR(apex, QTYPE.SOA, ttl=min(ttl, 300), rdata=SOA(
        _name(compiler.NS_NAME, origin), _name(("hostmaster",), origin),
        (table.soa_serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, ttl)))  # fmt: skip
    for owner, rec in apex_owned(table, ns_addresses):
        yield as_rr(owner, rec, origin)


def apex_owned(table: Table, ns_addresses: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], vocab.Record]]:
    """(owner labels, record) of the apex NS, its addresses and dns-version: `apex_records` but the SOA,
    in no zone yet."""
    fixed = [
        ((), compiler.answer((), vocab.NS, table, table.ttl, ns_addresses)),
        (("dns-version",), compiler.answer(("dns-version",), vocab.TXT, table, table.ttl, ns_addresses)),
    ]
    for labels, ans in fixed:
        for rec in ans.answer + ans.additional:
            yield (labels if rec.owner is None else rec.owner), rec


def service_records(svc: compiler.Service, view: compiler.ZoneView, origin: tuple[str, ...], ttl: int,
                    ns_addresses: tuple[str, ...]) -> Iterator[RR]:
    """One service's records in the zone `origin` (labels): what `zone_records` lists for it."""
    for owner, rec in owned_records(svc, view, ttl, ns_addresses):
        yield as_rr(owner, rec, origin)


def owned_records(svc: compiler.Service, view: compiler.ZoneView, ttl: int,
                  ns_addresses: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], vocab.Record]]:
    """(owner labels, record) of every record of one service, in no zone yet: the IXFR journal
    (journal.py) diffs these, cheap tuples, and makes wire records of the difference only."""
    for labels, _qtype, ans in compiler.compile_service(svc, view, ttl, ns_addresses, endpoint_names=True):
        if ans.rcode != vocab.NOERROR:
            continue
        for rec in ans.answer:  # glue is the targets' own records, printed under their names
            yield (labels if rec.owner is None else rec.owner), rec


def as_rr(owner: tuple[str, ...], rec: vocab.Record, origin: tuple[str, ...]) -> RR:
    """A record of `owned_records` in the zone `origin`."""
    return RR(_name(owner, origin), rec.rtype, ttl=rec.ttl, rdata=_rdata(rec, origin))


def write_zone(out: TextIO, table: Table, zone_name: str, ns_addresses: tuple[str, ...], source: str) -> int:
    """Print the zone file; returns the number of records."""
    out.write(f"; {zone_name}. as served by mcsdns from {source}\n")
    out.write(f"$ORIGIN {zone_name}.\n")
    n = 0
    for rr in zone_records(table, zone_name, ns_addresses):
        out.write(rr.toZone() + "\n")
        n += 1
    return n


def load_store(config: Config, timeout: float) -> Store:
    """The objects of the configured source, read once (manifests) or listed once (Kubernetes API)."""
    store = Store()
    if config.uses_api and not config.manifests:
        _list_once(config, store, timeout)
        return store
    source = ManifestSource(list(config.manifests) or default_paths(), store)
    source.load()
    if not store.synced_all:
        raise ZoneSourceError(source.status())
    return store


def _list_once(config: Config, store: Store, timeout: float) -> None:
    """Run the Kubernetes source until every resource has been listed, then stop it."""
    from ..metrics import Metrics
    from ..sources.kube import KubeSource

    source = KubeSource(kube_settings(config), store, Metrics(CollectorRegistry()))

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(source.run(stop))
        deadline = time.monotonic() + timeout
        try:
            while not store.synced_all and time.monotonic() < deadline and not task.done():
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)

    asyncio.run(run())
    if not store.synced_all:
        raise ZoneSourceError(f"not synced within {timeout:g}s: {source.status()}")


def run(config: Config, out: TextIO, timeout: float = 30.0) -> int:
    """`mcsdns zone`: print the zone (the first of config.zones); returns the record count."""
    name = config.zones[0]
    store = load_store(config, timeout)
    ns_addresses = advertised_addresses(config)
    table = Table(TableConfig((name,), config.ttl, config.namespaces, ns_addresses,
                              ips_from_slices=config.ips_from_slices), store)
    if config.dns_sd:
        from ..zone.dnssd import DnsSd

        table.dnssd = DnsSd(table)
        table.dnssd.full()
    return write_zone(out, table, name, ns_addresses, config.describe_source())
