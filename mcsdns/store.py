"""The store of normalized objects, shared by every source, feeding the record table.

Sources put stripped records (see objects.py) in; the store keeps the current
set, indexes slices by the service they belong to, and tells its listener
which services and namespaces changed so only those are recompiled. Writes
that change nothing DNS can see (a resync, a status update, a re-read file)
produce no notification; an unchanged object is dropped at once and the stored
one kept, so a relist allocates nothing lasting for it.

A list of a whole kind (a relist) is applied by relist.Relist, mark and sweep:
it takes the kind's `keys`, `upsert`s each page, and ends with an `upsert` of the
last page that also deletes the keys no page contained.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .objects import CLUSTER_ID_PROPERTY, KNOWN_CONDITIONS, ClusterProperty, EndpointSlice, Namespace, Object, ObjectKey, ServiceImport

log = logging.getLogger(__name__)

ServiceKey = tuple[str, str]  # (namespace, service name): a ServiceImport and the slices labelled with its name


@dataclass(slots=True)
class Changes:
    """What one batch of writes touched."""

    services: set[ServiceKey] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)
    # Programming-latency origins: per service, the earliest trigger time text or arrival.
    triggers: dict[ServiceKey, str | None] = field(default_factory=dict)
    # Set on the one notification sent when every required kind has completed its initial list.
    synced: bool = False
    # The ClusterProperty cluster.clusterset.k8s.io (the cluster id, --local-cluster auto) changed.
    cluster_id: bool = False
    # mcsdns_programming_duration_seconds: (kind label, the change's time as the API reports it)
    # for every effective write of an object that carries one.
    stamps: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.services or self.namespaces or self.synced or self.cluster_id)


KINDS = ("ServiceImport", "EndpointSlice", "Namespace")


class Store:
    """Current objects by kind; `listener(changes)` runs after every effective write,
    and once more (with `changes.synced`) when the last required kind is first synced."""

    def __init__(self, listener: Callable[[Changes], None] | None = None) -> None:
        self.imports: dict[ServiceKey, ServiceImport] = {}
        self.slices: dict[ServiceKey, EndpointSlice] = {}  # (namespace, slice name)
        self.by_service: dict[ServiceKey, dict[str, EndpointSlice]] = {}
        self.namespaces: set[str] = set()
        # ClusterProperties by name (read only with --local-cluster auto); never required for sync:
        # without one the answers are the same sets, only not ordered by locality.
        self.properties: dict[str, str] = {}
        self.synced: set[str] = set()  # kinds whose initial list completed (only ever grows)
        self.required: set[str] = set(KINDS)
        # Every kind a source watches has completed its initial list (decision 10). Once True it stays
        # True (kinds are only added to `synced`): the resolver's caches, filled only while synced,
        # rely on it. A plain attribute, as the query path reads it.
        self.synced_all = False
        self.listener = listener
        self._warned_clusterless: set[ServiceKey] = set()

    # ----------------------------------------------------------------- reads

    def service_slices(self, key: ServiceKey) -> tuple[EndpointSlice, ...]:
        return tuple(self.by_service.get(key, {}).values())

    @property
    def cluster_id(self) -> str | None:
        """This cluster's id per KEP-2149 (ClusterProperty cluster.clusterset.k8s.io), if known."""
        return self.properties.get(CLUSTER_ID_PROPERTY)

    def counts(self) -> dict[str, int]:
        return {
            "ServiceImport": len(self.imports),
            "EndpointSlice": len(self.slices),
            "Namespace": len(self.namespaces),
        }

    def condition_counts(self) -> dict[tuple[str, str, str], int]:
        """ServiceImports by (condition type, status, reason) of their status.conditions (decision 14).

        Labels stay bounded whatever the objects hold: a type or reason mcs-api does not
        define counts as `other`."""
        out: dict[tuple[str, str, str], int] = {}
        for imp in self.imports.values():
            for c in imp.status.conditions:
                reasons = KNOWN_CONDITIONS.get(c.type)
                key = (c.type if reasons else "other", c.status, c.reason if reasons and c.reason in reasons else "other")
                out[key] = out.get(key, 0) + 1
        return out

    # ----------------------------------------------------------------- writes

    def apply(self, obj: Object) -> None:
        changes = Changes()
        self._apply(obj, changes)
        self._emit(changes)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        changes = Changes()
        self._delete(kind, namespace, name, changes)
        self._emit(changes)

    def upsert(self, objects: Iterable[Object], kind: str = "", gone: Iterable[tuple[str, str]] = ()) -> None:
        """Apply a batch (a page of a list), then delete the `gone` keys of `kind`, with one notification."""
        changes = Changes()
        for obj in objects:
            self._apply(obj, changes)
        for namespace, name in gone:
            self._delete(kind, namespace, name, changes)
        self._emit(changes)

    def keys(self, kind: str) -> set[ObjectKey]:
        """The keys of `kind` now (a new set: the mark of a relist, see relist.py)."""
        if kind == "ServiceImport":
            return set(self.imports)
        if kind == "EndpointSlice":
            return set(self.slices)
        if kind == "ClusterProperty":
            return {("", n) for n in self.properties}
        return {("", n) for n in self.namespaces}

    def mark_synced(self, kind: str) -> None:
        was = self.synced_all
        self.synced.add(kind)
        self.synced_all = self.required <= self.synced
        if not was and self.synced_all:
            self._emit(Changes(synced=True))

    # ----------------------------------------------------------------- copies (--workers)

    def state_of(self, changes: Changes) -> dict:
        """The current state of everything `changes` touched, for a forked copy's `take_state`
        (the --workers supervisor sends it to each worker after every change)."""
        return {
            "services": {key: (self.imports.get(key), dict(self.by_service.get(key, {}))) for key in changes.services},
            "namespaces": {ns: ns in self.namespaces for ns in changes.namespaces},
            "properties": dict(self.properties) if changes.cluster_id else None,
            "synced": set(self.synced),
        }

    def take_state(self, state: dict) -> Changes:
        """Make this copy hold `state` (from the original's `state_of`) for what it names; the changes,
        not emitted: the caller recompiles them as the original's listener did."""
        for key, (imp, slices) in state["services"].items():
            if imp is None:
                self.imports.pop(key, None)
            else:
                self.imports[key] = imp
            for name, old in self.by_service.pop(key, {}).items():
                if self.slices.get((key[0], name)) is old:  # not already moved to another service
                    del self.slices[(key[0], name)]
            if slices:
                self.by_service[key] = slices
                for name, sl in slices.items():
                    self.slices[(key[0], name)] = sl
        for ns, present in state["namespaces"].items():
            if present:
                self.namespaces.add(ns)
            else:
                self.namespaces.discard(ns)
        if state["properties"] is not None:
            self.properties = state["properties"]
        was = self.synced_all
        self.synced = self.synced | set(state["synced"])  # the supervisor's only grows too: never unsynced
        self.synced_all = self.required <= self.synced
        return Changes(services=set(state["services"]), namespaces=set(state["namespaces"]),
                       synced=not was and self.synced_all, cluster_id=state["properties"] is not None)

    # ----------------------------------------------------------------- internals

    def _apply(self, obj: Object, changes: Changes) -> None:
        if isinstance(obj, ServiceImport):
            key = (obj.namespace, obj.name)
            old_import = self.imports.get(key)
            if old_import != obj:
                self.imports[key] = obj
                changes.services.add(key)
                if obj.changed:
                    changes.stamps.append(("serviceimport", obj.changed))
            elif old_import.status != obj.status:  # no answer changes (decision 14); kept for discovery and metrics
                self.imports[key] = obj
        elif isinstance(obj, EndpointSlice):
            key = (obj.namespace, obj.name)
            old = self.slices.get(key)
            if obj.dns_equivalent(old):
                if old.not_ready != obj.not_ready:  # no answer changes; kept current for /imports and /explain
                    self.slices[key] = self.by_service[(obj.namespace, obj.service)][obj.name] = obj
                return  # the stored copy answers the same (only a trigger time, never read again, differs)
            if old is not None and old.service != obj.service:
                self._unindex(old, changes)
            self.slices[key] = obj
            svc = (obj.namespace, obj.service)
            self.by_service.setdefault(svc, {})[obj.name] = obj
            changes.services.add(svc)
            changes.triggers.setdefault(svc, obj.trigger_time)
            stamp = obj.trigger_time or obj.changed
            if stamp:
                changes.stamps.append(("endpointslice", stamp))
            if obj.cluster is None and key not in self._warned_clusterless:
                self._warned_clusterless.add(key)
                log.warning(
                    "EndpointSlice %s/%s has no multicluster.kubernetes.io/source-cluster label: "
                    "its addresses answer the service name, but it makes no per-endpoint names or SRV records",
                    obj.namespace,
                    obj.name,
                )
        elif isinstance(obj, Namespace):
            if obj.name not in self.namespaces:
                self.namespaces.add(obj.name)
                changes.namespaces.add(obj.name)
        elif isinstance(obj, ClusterProperty):
            if self.properties.get(obj.name) != obj.value:
                self.properties[obj.name] = obj.value
                changes.cluster_id |= obj.name == CLUSTER_ID_PROPERTY

    def _unindex(self, sl: EndpointSlice, changes: Changes) -> None:
        svc = (sl.namespace, sl.service)
        members = self.by_service.get(svc)
        if members is not None:
            members.pop(sl.name, None)
            if not members:
                del self.by_service[svc]
        changes.services.add(svc)
        changes.triggers.setdefault(svc, None)

    def _delete(self, kind: str, namespace: str, name: str, changes: Changes) -> None:
        if kind == "ServiceImport":
            if self.imports.pop((namespace, name), None) is not None:
                changes.services.add((namespace, name))
        elif kind == "EndpointSlice":
            old = self.slices.pop((namespace, name), None)
            if old is not None:
                self._unindex(old, changes)
                self._warned_clusterless.discard((namespace, name))
        elif kind == "Namespace":
            if name in self.namespaces:
                self.namespaces.discard(name)
                changes.namespaces.add(name)
        elif kind == "ClusterProperty":
            if self.properties.pop(name, None) is not None:
                changes.cluster_id |= name == CLUSTER_ID_PROPERTY

    def _emit(self, changes: Changes) -> None:
        if changes and self.listener is not None:
            self.listener(changes)


def key_of(obj: Object) -> ObjectKey:
    """(namespace, name); namespace "" for the cluster-scoped kinds (as `keys` and `delete` take them)."""
    if isinstance(obj, (Namespace, ClusterProperty)):
        return ("", obj.name)
    return (obj.namespace, obj.name)
