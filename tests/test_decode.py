"""sources/decode.py reads list pages and watch events into what `json.loads` gives, as far as DNS reads.

The decoder skips fields DNS never reads, so these tests hold it to the standard library where
it matters: every object converts to the same record (or is refused with the same message),
with the same omissions and change time, and the page's continue token and resourceVersion are
the same, whatever odd values sit in the fields the decoder names. Values are drawn at random
into a served ServiceImport and EndpointSlice, including shapes the API never serves.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcsdns.objects import convert
from mcsdns.sources import decode

SLICE = {
    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
    "metadata": {"name": "web-1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                 "labels": {"multicluster.kubernetes.io/service-name": "web",
                            "multicluster.kubernetes.io/source-cluster": "c1"},
                 "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-12-01T23:40:00Z"},
                 "managedFields": [{"manager": "m", "time": "2026-12-01T23:40:05Z", "fieldsV1": {"f:x": {}}},
                                   {"manager": "n", "time": "2026-12-01T23:41:05Z"}]},
    "endpoints": [{"addresses": ["10.0.0.1"], "hostname": "a", "conditions": {"ready": True, "serving": True},
                   "nodeName": "n1", "targetRef": {"kind": "Pod", "name": "p"}},
                  {"addresses": ["10.0.0.2", "fd00::2"], "conditions": {"ready": False}},
                  {"addresses": ["10.0.0.3"]}],
    "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
}  # fmt: skip
IMPORT = {
    "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
    "metadata": {"name": "web", "namespace": "ns", "creationTimestamp": "2026-12-01T23:40:05Z"},
    "spec": {"type": "ClusterSetIP", "ips": ["10.9.0.1"], "ports": [{"name": "http", "protocol": "TCP", "port": 80}]},
    "status": {"clusters": [{"cluster": "c1"}]},
}  # fmt: skip
# Where a random value replaces what is there: every field the decoder names, and some around them.
PATHS = [
    (), ("kind",), ("apiVersion",), ("metadata",), ("metadata", "name"), ("metadata", "namespace"),
    ("metadata", "labels"), ("metadata", "labels", "multicluster.kubernetes.io/source-cluster"),
    ("metadata", "annotations"), ("metadata", "managedFields"), ("metadata", "managedFields", 0),
    ("metadata", "managedFields", 1, "time"), ("metadata", "resourceVersion"), ("spec",), ("spec", "ports"),
    ("spec", "ips"), ("endpoints",), ("endpoints", 0), ("endpoints", 0, "conditions"),
    ("endpoints", 1, "conditions", "ready"), ("endpoints", 0, "hostname"), ("endpoints", 2, "addresses"),
    ("ports",), ("ports", 0), ("ports", 0, "port"),
]  # fmt: skip
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["TCP", "10.0.0.9", "Headless", "c2", "ns", "2026-12-01T23:59:59Z"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["ready", "time", "name", "x", "port"]), inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


def outcome(raw: Any) -> tuple:
    """What the store gets from one raw object: the record with its omissions and times, or the refusal."""
    try:
        obj = convert(raw)
    except Exception as exc:  # noqa: BLE001 - the watch turns any converter error into a rejection
        return ("refused", type(exc).__name__, str(exc))
    return ("record", obj, getattr(obj, "omitted", ()), getattr(obj, "changed", None))


def put(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    try:
        doc[path[0]] = put(doc[path[0]], path[1:], value)
    except (KeyError, IndexError, TypeError):
        pass  # the path is not there in this object: leave it as it is
    return doc


def page_of(items: list, meta: Any) -> bytes:
    return json.dumps({"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}).encode()


def assert_same_page(raw: bytes) -> None:
    expected, got = json.loads(raw), decode.page(raw)
    assert [outcome(i) for i in expected.get("items") or []] == [outcome(i) for i in got.get("items") or []]
    meta_e, meta_g = expected.get("metadata"), got.get("metadata")
    if isinstance(meta_e, dict):
        assert (meta_e.get("continue"), meta_e.get("resourceVersion")) == (meta_g.get("continue"), meta_g.get("resourceVersion"))
    else:
        assert meta_g == meta_e  # not a list's metadata: as served, for the watch to refuse alike


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from([SLICE, IMPORT]), path=st.sampled_from(PATHS), value=JSON_VALUES, meta=JSON_VALUES)
@pytest.mark.slow
def test_pages_convert_as_with_the_standard_library(which, path, value, meta):
    item = put(json.loads(json.dumps(which)), path, value)
    assert_same_page(page_of([item, SLICE, IMPORT], {"continue": "tok", "resourceVersion": "7"}))
    assert_same_page(page_of([IMPORT, item], meta))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from([SLICE, IMPORT]), path=st.sampled_from(PATHS), value=JSON_VALUES,
       kind=st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", 7, None]))  # fmt: skip
def test_watch_events_convert_as_with_the_standard_library(which, path, value, kind):
    raw = json.dumps({"type": kind, "object": put(json.loads(json.dumps(which)), path, value)}).encode()
    expected, got = json.loads(raw), decode.event(raw)
    assert expected["type"] == got["type"]
    if kind == "ERROR" or not isinstance(expected["object"], dict):
        assert got == expected  # a Status (or an odd object) is decoded whole
    else:
        assert outcome(expected["object"]) == outcome(got["object"])
        meta_e, meta_g = expected["object"].get("metadata"), got["object"].get("metadata")
        if isinstance(meta_e, dict):
            assert meta_e.get("resourceVersion") == meta_g.get("resourceVersion")


@pytest.mark.parametrize("raw", [
    b'{"items": [1, "x", null]}', b'{"items": null, "metadata": null}', b'{"items": {"a": 1}}', b'[]', b'{}',
    b'{"items": [{"kind": "Namespace", "metadata": {"name": "n"}}], "metadata": {"continue": 5}}',
    b'{"items": [], "big": 123456789012345678901234567890, "nan": NaN}',
])  # fmt: skip
def test_odd_documents_decode_as_with_the_standard_library(raw):
    expected = json.loads(raw)
    got = decode.page(raw)
    if isinstance(expected, dict) and isinstance(got, dict):
        assert [outcome(i) for i in expected.get("items") or []] == [outcome(i) for i in got.get("items") or []] \
            if isinstance(expected.get("items"), list) else expected.get("items") == got.get("items")
    else:
        assert got == expected


@pytest.mark.parametrize("raw", [b"", b"nope", b"\xff", b'{"items": [', b'{"a": 1} x'])
def test_what_is_not_json_raises_value_error(raw):
    with pytest.raises(ValueError):
        decode.page(raw)
    with pytest.raises(ValueError):
        decode.event(raw)
    assert decode.loads(b'{"n": 123456789012345678901234567890}') == {"n": 123456789012345678901234567890}
