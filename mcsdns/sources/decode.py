"""JSON documents from the API server (list pages, watch events) -> the dicts `objects.convert` reads.

A list page of 500 objects is mostly what DNS never reads: managedFields, uids, timestamps.
`page()` and `event()` decode with msgspec into structs that name only the fields the converters
and the watch read, so the rest is skipped by the decoder without being built as Python objects,
and rebuild each object as a small dict of those fields. Every field is typed `Any`, so msgspec
checks no types: `objects.convert` still sees every value as the API served it and validates,
omits and rejects it exactly as a `json.loads` document (decision 12). Where the page's
shape itself is unusual (an item or a metadata that is not an object, a managedFields entry that
is not one), the typed decode fails and the document is decoded whole by `loads`, which gives what
`json.loads` gives.

`loads()` is the untyped decoder: msgspec for what it reads, `json.loads` for what only
the standard library accepts (NaN, lone surrogates, floats beyond range), so a document
decodes to the same values either way and only what neither reads raises ValueError.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

UNSET = msgspec.UNSET


def loads(raw: bytes | str) -> Any:
    """The JSON value of `raw`, as `json.loads` gives it; ValueError when it is not JSON."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


class _Managed(msgspec.Struct):
    time: Any = UNSET


class _Meta(msgspec.Struct):
    name: Any = UNSET
    namespace: Any = UNSET
    labels: Any = UNSET
    annotations: Any = UNSET
    resourceVersion: Any = UNSET
    managedFields: list[_Managed] | None | msgspec.UnsetType = UNSET


class _Conditions(msgspec.Struct):
    ready: Any = UNSET


class _Endpoint(msgspec.Struct):
    addresses: Any = UNSET
    hostname: Any = UNSET
    conditions: _Conditions | None | msgspec.UnsetType = UNSET


class _Item(msgspec.Struct):
    kind: Any = UNSET
    apiVersion: Any = UNSET
    metadata: _Meta | None | msgspec.UnsetType = UNSET
    spec: Any = UNSET
    endpoints: list[_Endpoint] | None | msgspec.UnsetType = UNSET
    ports: Any = UNSET
    status: Any = UNSET  # a ServiceImport's conditions and clusters, for discovery (decision 14)


class _ListMeta(msgspec.Struct):
    resourceVersion: Any = UNSET
    # "continue" is a Python keyword: renamed
    continue_: Any = msgspec.field(default=UNSET, name="continue")


class _Page(msgspec.Struct):
    items: list[_Item] | None | msgspec.UnsetType = UNSET
    metadata: _ListMeta | None | msgspec.UnsetType = UNSET


class _Event(msgspec.Struct):
    type: Any = UNSET
    object: _Item | msgspec.UnsetType = UNSET


_PAGE = msgspec.json.Decoder(_Page)
_EVENT = msgspec.json.Decoder(_Event)


def _meta(m: _Meta) -> dict:
    out: dict = {}
    if m.name is not UNSET:
        out["name"] = m.name
    if m.namespace is not UNSET:
        out["namespace"] = m.namespace
    if m.labels is not UNSET:
        out["labels"] = m.labels
    if m.annotations is not UNSET:
        out["annotations"] = m.annotations
    if m.resourceVersion is not UNSET:
        out["resourceVersion"] = m.resourceVersion
    if m.managedFields is not UNSET:
        fields = m.managedFields
        out["managedFields"] = None if fields is None else [{} if f.time is UNSET else {"time": f.time} for f in fields]
    return out


def _endpoint(ep: _Endpoint) -> dict:
    out: dict = {}
    if ep.addresses is not UNSET:
        out["addresses"] = ep.addresses
    if ep.hostname is not UNSET:
        out["hostname"] = ep.hostname
    if ep.conditions is not UNSET:
        c = ep.conditions
        out["conditions"] = None if c is None else ({} if c.ready is UNSET else {"ready": c.ready})
    return out


def _item(it: _Item) -> dict:
    out: dict = {}
    if it.kind is not UNSET:
        out["kind"] = it.kind
    if it.apiVersion is not UNSET:
        out["apiVersion"] = it.apiVersion
    if it.metadata is not UNSET:
        out["metadata"] = None if it.metadata is None else _meta(it.metadata)
    if it.spec is not UNSET:
        out["spec"] = it.spec
    if it.endpoints is not UNSET:
        out["endpoints"] = None if it.endpoints is None else [_endpoint(ep) for ep in it.endpoints]
    if it.ports is not UNSET:
        out["ports"] = it.ports
    if it.status is not UNSET:
        out["status"] = it.status
    return out


def page(raw: bytes) -> dict:
    """A list page as {"items": [...], "metadata": {...}} with the fields the watch and converters read."""
    try:
        p = _PAGE.decode(raw)
    except msgspec.DecodeError:  # ValidationError too: a shape the structs do not describe
        return loads(raw)
    out: dict = {}
    if p.items is not UNSET:
        out["items"] = None if p.items is None else [_item(it) for it in p.items]
    if p.metadata is not UNSET:
        meta: dict | None = None
        if p.metadata is not None:
            meta = {}
            if p.metadata.resourceVersion is not UNSET:
                meta["resourceVersion"] = p.metadata.resourceVersion
            if p.metadata.continue_ is not UNSET:
                meta["continue"] = p.metadata.continue_
        out["metadata"] = meta
    return out


def event(raw: bytes) -> Any:
    """A watch event as {"type": ..., "object": {...}}; an ERROR event's Status is decoded whole."""
    try:
        e = _EVENT.decode(raw)
    except msgspec.DecodeError:
        return loads(raw)
    if e.type == "ERROR" or e.type is UNSET or e.object is UNSET:
        return loads(raw)  # a Status (code, reason, message) or an odd event: decoded whole
    return {"type": e.type, "object": _item(e.object)}
