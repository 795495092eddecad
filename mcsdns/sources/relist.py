"""Mark and sweep: a list of one kind applied to the store as it arrives, and what it removes.

A source that lists a kind (the Kubernetes API, page by page, at start, on a resync
or after a 410 Gone; the manifests source, in one go, on every reload) must leave the
store holding exactly what the list held. `Relist` is that one list: it marks the
kind's keys when it starts, `page` upserts each page at once and strikes its keys
off, and `finish` applies the last page and deletes (sweeps) the keys no page held.
Until the sweep every object not re-listed yet stays in service, so answers during
a relist are the new state or the previous one, never a loss; a list cut short is
simply dropped and deletes nothing.

Keys a list names but could not use (a rejected object) count as held: their last
good version stays. A list whose first page was not seen sweeps nothing (`sweep=False`).

`DeleteGrace` (--delete-grace) is the one thing that outlives a list: ServiceImports
deleted by a watch event but still served for a while. A list that holds such a key
again cancels its removal; a list that does not removes it at once, with the sweep.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol

from ..objects import Object, ObjectKey, ServiceImport
from ..store import Store, key_of


class Timer(Protocol):
    """What `call_later` returns (an asyncio.TimerHandle)."""

    def cancel(self) -> None: ...


class DeleteGrace:
    """Removes a deleted ServiceImport only once `seconds` have passed without its re-creation.

    An MCS controller that replaces an import (delete, then create: a conflict being
    resolved, a migration) would otherwise make its name answer NXDOMAIN in between,
    and clients cache that NXDOMAIN for the SOA's negative TTL. CoreDNS removes it at
    once, so this is opt-in (project decision 13). A re-creation (a watch event or a
    list holding the key again: `seen`) cancels the removal and its answers take over;
    a list that no longer holds it removes it at once (`swept`).

    `call_later(seconds, callback)` schedules the removal (the event loop's, in the
    Kubernetes source), so this object does no I/O and keeps no clock of its own.
    """

    KIND = "ServiceImport"

    def __init__(self, seconds: float, call_later: Callable[[float, Callable[[], None]], Timer]) -> None:
        self.seconds = seconds
        self.call_later = call_later
        self.pending: dict[ObjectKey, Timer] = {}  # deleted by the API, still served, with the timer that removes them

    def defer(self, key: ObjectKey, remove: Callable[[], None]) -> None:
        """Run `remove` in `seconds` unless the import is re-created first (a second delete restarts the wait)."""
        self._cancel(key)
        self.pending[key] = self.call_later(self.seconds, lambda: self._over(key, remove))

    def seen(self, objects: Iterable[Object]) -> None:
        """Cancel the pending removal of every ServiceImport among `objects` (they exist again)."""
        if not self.pending:
            return
        for obj in objects:
            if isinstance(obj, ServiceImport):
                self._cancel((obj.namespace, obj.name))

    def swept(self, kind: str, keys: Iterable[ObjectKey]) -> None:
        """A list of `kind` removed `keys` already: their pending removals have nothing left to do."""
        if kind == self.KIND and self.pending:
            for key in keys:
                self._cancel(key)

    def _over(self, key: ObjectKey, remove: Callable[[], None]) -> None:
        if self.pending.pop(key, None) is not None:
            remove()

    def _cancel(self, key: ObjectKey) -> None:
        timer = self.pending.pop(key, None)
        if timer is not None:
            timer.cancel()


class Relist:
    """One list of one kind into the store: `page` for each page but the last, then `finish`."""

    def __init__(self, store: Store, kind: str, *, sweep: bool = True, grace: DeleteGrace | None = None) -> None:
        self.store = store
        self.kind = kind
        # The mark: the keys held before the list that no page has listed yet (None: this list sweeps nothing).
        self.unseen: set[ObjectKey] | None = store.keys(kind) if sweep else None
        self.rejected: set[ObjectKey] = set()  # keys the list named but could not use: their last good version stays
        self.count = 0  # objects listed
        self.grace = grace

    def page(self, objects: list[Object], rejected: Iterable[ObjectKey] = ()) -> None:
        """Upsert one page now (one notification) and strike its keys off; nothing is deleted yet."""
        self._seen(objects, rejected)
        self.store.upsert(objects)

    def finish(self, objects: list[Object], rejected: Iterable[ObjectKey] = ()) -> set[ObjectKey]:
        """The last page, then the sweep: delete every key held before the list that no page held.

        One notification covers the last page's writes and the deletes. Returns the keys swept.
        """
        self._seen(objects, rejected)
        gone = self.unseen if self.unseen is not None else set()
        self.unseen = None
        self.store.upsert(objects, self.kind, gone)
        if self.grace is not None:
            self.grace.swept(self.kind, gone)
        return gone

    def _seen(self, objects: list[Object], rejected: Iterable[ObjectKey]) -> None:
        rejected = set(rejected)
        self.rejected |= rejected
        self.count += len(objects)
        if self.grace is not None:
            self.grace.seen(objects)
        if self.unseen is not None:
            self.unseen -= rejected
            unseen = self.unseen
            for obj in objects:
                unseen.discard(key_of(obj))
