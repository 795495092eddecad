"""The events a watch yields (watching.Watcher), which the source applies to the store (kube.KubeSource).

Each is a small frozen record made on a watch's worker thread and handed to the event loop as it
is; the objects in them are already converted (objects.py), so the loop never sees raw JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..objects import Object, ObjectKey


@dataclass(frozen=True, slots=True)
class Listed:
    """A complete list: the kind now holds exactly `objects`, plus the last good `keep`.

    `whole`: no ListedPage came before it in this list (a list of one page), so it
    starts a list of its own even where an earlier list was cut short unnoticed.
    """

    objects: list[Object]
    keep: frozenset[ObjectKey]
    resource_version: str
    whole: bool = False


@dataclass(frozen=True, slots=True)
class ListedPage:
    """A page of a list that has more pages: upsert these now; the `Listed` ending the list sweeps.

    `first` starts a new list; `keep` are the keys of objects on this page that
    were rejected (their last good version stays, as if listed).
    """

    objects: list[Object]
    keep: frozenset[ObjectKey]
    first: bool


@dataclass(frozen=True, slots=True)
class Upserted:
    obj: Object
    arrived: float  # time.monotonic() when the event was read: programming latency origin


@dataclass(frozen=True, slots=True)
class Deleted:
    key: ObjectKey
    arrived: float


@dataclass(frozen=True, slots=True)
class Rejected:
    """An object DNS cannot represent; its last good version (if any) stays."""

    ref: str  # "ServiceImport ns/name"
    key: ObjectKey
    reason: str  # low-cardinality metrics label: the field at fault
    message: str


@dataclass(frozen=True, slots=True)
class Watching:
    """A watch stream is open (the watch is up)."""

    resource_version: str


@dataclass(frozen=True, slots=True)
class Bookmark:
    """The server confirmed the state up to a resourceVersion."""

    resource_version: str


@dataclass(frozen=True, slots=True)
class UsingVersion:
    """Discovery picked the served API version of a resource."""

    api_version: str


@dataclass(frozen=True, slots=True)
class Expired:
    """410 Gone: the resourceVersion is too old; a relist follows at once."""

    message: str


@dataclass(frozen=True, slots=True)
class Problem:
    """The resource cannot be listed or watched right now; a retry follows after `retry_in`."""

    category: str  # unreachable, unauthorized, forbidden, not-installed, not-found, throttled, error
    detail: str
    retry_in: float


Event = Listed | ListedPage | Upserted | Deleted | Rejected | Watching | Bookmark | UsingVersion | Expired | Problem
