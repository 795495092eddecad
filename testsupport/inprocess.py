"""An in-process Store -> Table (-> Resolver), wired the way the App wires them, for tests with no socket.

The unit tests and the cost scripts ask the real resolver for the real wire bytes; only the source
differs (manifest files or objects handed in). One builder keeps the wiring (the store's listener, the
table's settings) in one place, so a change to how the App builds its table changes here only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import dns.message

from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.sources.manifests import ManifestSource
from mcsdns.store import Store
from mcsdns.zone.table import Table, TableConfig

ZONES = ("clusterset.local",)
NS_ADDRESSES = ("127.0.0.1",)
KINDS = ("Namespace", "ServiceImport", "EndpointSlice")


def build_table(manifests: Iterable[Path] = (), objects: Iterable[object] = (), *, zones: tuple[str, ...] = ZONES,
                ttl: int = 5, namespaces: frozenset[str] | None = None, ns_addresses: tuple[str, ...] = NS_ADDRESSES,
                local_cluster: str | None = None, reverse_cidrs: tuple[str, ...] = (), synced: bool = False,
                on_error: Callable[[str], None] | None = None, compile_changes: bool = True,
                defer: bool = False) -> Table:
    """A Table over a fresh Store, fed `manifests` (read once, as --manifests does) then `objects`.

    `objects` are manifest dicts (converted as a source would) or already converted objects.
    `synced` marks every kind synced, as a source does after its first list (manifest files do it
    themselves). `compile_changes=False` leaves the store unwired, so nothing is compiled until the
    caller asks (the compile-cost script times that step alone). `defer=True`: as the server's
    table, the sync leaves services `behind` (`Table.compile_behind` compiles them; queries catch up).
    """
    store = Store()
    table = Table(TableConfig(zones, ttl, namespaces, ns_addresses, local_cluster, reverse_cidrs), store)
    table.defer = defer
    if compile_changes:
        store.listener = table.on_change
    if synced:
        for kind in KINDS:
            store.mark_synced(kind)
    paths = list(manifests)
    if paths:
        ManifestSource(paths, store, on_error=on_error).load()
    for obj in objects:
        store.apply(convert(obj) if isinstance(obj, dict) else obj)
    return table


def build_resolver(manifests: Iterable[Path] = (), objects: Iterable[object] = (), *, forwarding: bool = False,
                   **table_options) -> Resolver:
    """`build_table(...)` behind the resolver the server runs (`forwarding`: names outside the zones go upstream)."""
    return Resolver(build_table(manifests, objects, **table_options), forwarding=forwarding)


def ask(resolver: Resolver, question: dns.message.Message | str, qtype: str = "A", *,
        tcp: bool = False) -> dns.message.Message:
    """The resolver's reply to `question` (a query, or a name asked for `qtype`), handled as a UDP or (`tcp`)
    TCP query is, then parsed: the in-process way to ask what the server would answer."""
    query = question if isinstance(question, dns.message.Message) else dns.message.make_query(question, qtype)
    return dns.message.from_wire(resolver.handle(query.to_wire(), tcp))
