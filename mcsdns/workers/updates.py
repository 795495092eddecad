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
worker itself, as one process compiles it, so an update is never applied partly.

Pure: no I/O. The supervisor frames and sends the dict `update_of` returns.
"""

from __future__ import annotations

from ..store import Changes
from ..zone.table import Compiled, Table


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
    table.on_change(changes, update.get("compiled"))
    if table.serial != after:  # the same SOA serial in every worker's replies
        table.set_serial(after)
