"""--workers N: what the supervisor sends its workers after a change, and how a worker applies it.

The supervisor compiles every change once. An update carries, beside the new
store state of what changed (a worker still answers per-endpoint names and
names that do not exist from its own store copy), the compiled answers of the
services the supervisor just recompiled: the wire bodies under their lookup
keys. The worker runs the same `Table.on_change` as one process would (so the
same services are recompiled, the same DNS-SD names, PTR records and serial
bump follow), except that a service whose answers came with the update has
them put in place instead of rendered: a change is rendered once, not N+1
times. A service whose answers did not come with the update (a new local
cluster id reorders every service; a table not yet synced) is compiled by the
worker as before, so an update is never applied partly.

Pure: no I/O. The supervisor frames and sends the dict `update_of` returns.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from .store import Changes, ServiceKey
from .table import Table
from .wire import Body

Compiled = dict[ServiceKey, "list[tuple[bytes, Body]] | None"]  # None: the service has no answers (gone, hidden)


def update_of(table: Table, changes: Changes, serial_before: int) -> dict:
    """The update for `changes`, which `table` (the supervisor's) has just recompiled (`on_change`)."""
    return {**table.store.state_of(changes), "serial": (serial_before, table.serial),
            "compiled": compiled_answers(table, changes)}


def compiled_answers(table: Table, changes: Changes) -> Compiled:
    """The answers of the services `changes` names (and of those in the namespaces it names), as compiled.

    Right after `on_change` a service's `owned` keys are exactly what `compile` made for it (answers
    remembered on first query are added later, by queries). An empty dict before the initial sync:
    nothing was compiled yet."""
    if not table.store.synced_all or not (changes.services or changes.namespaces):
        return {}
    services = set(changes.services)
    for ns in changes.namespaces:
        services.update(k for k in table.store.imports if k[0] == ns)
    out: Compiled = {}
    answers = table.answers
    for key in services:
        keys = table.owned.get(key)
        if keys is None:
            out[key] = None
        elif all(k in answers for k in keys):
            out[key] = [(k, answers[k]) for k in keys]
        # else (a key another feature took over since): left out, the worker compiles this service itself
    return out


def apply_update(table: Table, update: dict) -> None:
    """Put a supervisor's update into this worker's table and store, as the supervisor's `on_change` left its own."""
    changes = table.store.take_state(update)
    before, after = update["serial"]
    table.serial = before
    with _installing(table, update.get("compiled") or {}):
        table.on_change(changes)
    if table.serial != after:  # the same SOA serial in every worker's replies
        table.set_serial(after)


@contextmanager
def _installing(table: Table, compiled: Compiled) -> Iterator[None]:
    """While it lasts, `table.compile(key)` installs `compiled[key]` when the update carries it (and
    compiles otherwise). An attribute of this one table for one `on_change`, so which services are
    recompiled stays decided in one place, `Table.on_change`."""
    if not compiled:
        yield
        return

    def compile_or_install(key: ServiceKey) -> None:
        if key not in compiled:
            Table.compile(table, key)
        else:
            install(table, key, compiled[key])

    table.compile = compile_or_install  # type: ignore[method-assign]
    try:
        yield
    finally:
        del table.compile


def install(table: Table, key: ServiceKey, answers: list[tuple[bytes, Body]] | None) -> None:
    """`Table.compile(key)` with the answers given instead of rendered (`None`: the service has none).

    Should this copy's store disagree with the supervisor's about whether the service is served
    (it cannot, having taken the same state), it compiles instead: never a stale answer."""
    svc = table.service(*key)
    if svc is not None and not table.namespace_exposed(key[0]):
        svc = None
    if (svc is None) != (answers is None):
        Table.compile(table, key)
    else:
        table.install(key, svc, answers or [])
