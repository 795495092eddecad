"""EndpointSlices labelled for a service that has no ServiceImport: one log line each.

Such slices answer nothing (CoreDNS, too, makes names only from an import), which is right while
an MCS controller is between writing the slices and the import, and wrong when it never writes
the import or deleted it and left the slices. Nothing else shows it unless someone asks
`/explain` for exactly that name, so a sweep every SWEEP_SECONDS logs each service whose slices
were orphans on two sweeps in a row (a controller's own gap between the two writes passes
unnoticed), once, with the same sentence `/explain` gives; and once more, at info, when the import
arrives or the slices go. At most MAX_LINES services per sweep are named; the rest are counted on
one line and not named later either, so a cluster set with thousands of orphans logs a few lines,
not thousands. Answers never change: this only reads the store.
"""

from __future__ import annotations

import asyncio
import logging

from ..objects import LABEL_SERVICE_NAME
from ..store import ServiceKey, Store

log = logging.getLogger(__name__)

SWEEP_SECONDS = 5.0
MAX_LINES = 10  # services named per sweep
SHOWN_SLICES = 5  # slice names per line


def orphan_sentence(namespace: str, service: str, slice_names: list[str]) -> str:
    """What /explain and the log both say about slices without their import."""
    names = ", ".join(f"{namespace}/{n}" for n in sorted(slice_names)[:SHOWN_SLICES])
    more = f" and {len(slice_names) - SHOWN_SLICES} more" if len(slice_names) > SHOWN_SLICES else ""
    return (f"no ServiceImport {service} in namespace {namespace} ({len(slice_names)} EndpointSlice(s) are labelled "
            f"{LABEL_SERVICE_NAME}={service}: {names}{more}; they answer nothing until the import exists)")


class Orphans:
    """The sweep; `logged` holds the services whose orphan line was written (or counted)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.seen: set[ServiceKey] = set()  # orphans at the last sweep
        self.logged: set[ServiceKey] = set()

    def orphans(self) -> set[ServiceKey]:
        imports, by_service = self.store.imports, self.store.by_service
        return {key for key, members in by_service.items() if members and key not in imports}

    def sweep(self) -> None:
        """Compare with the last sweep and log what is new or resolved (only once the store is synced)."""
        if not self.store.synced_all:
            return
        now = self.orphans()
        for key in sorted(self.logged - now):
            ns, name = key
            why = "its ServiceImport exists now" if key in self.store.imports else "its EndpointSlices are gone"
            log.info("EndpointSlices labelled %s=%s in namespace %s are no longer orphans: %s",
                     LABEL_SERVICE_NAME, name, ns, why)
        self.logged &= now
        due = sorted(now & self.seen - self.logged)
        for ns, name in due[:MAX_LINES]:
            log.warning("%s", orphan_sentence(ns, name, list(self.store.by_service.get((ns, name), {}))))
        if len(due) > MAX_LINES:
            log.warning("%d more services have EndpointSlices but no ServiceImport (not named here; "
                        "`mcsdns imports` lists the imports, `mcsdns explain <name>` names a service's slices)",
                        len(due) - MAX_LINES)
        self.logged |= set(due)
        self.seen = now

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), SWEEP_SECONDS)
            except TimeoutError:
                self.sweep()
