"""A ServiceImport's status as mcsdns keeps it (decision 14), in-process: bounded, never a rejection,
one shared copy per distinct status. tests/test_kube_discovery.py and tests/test_discovery.py show it
through a running server; tests/compat/test_implementations.py shows no answer depends on it."""

from __future__ import annotations

from mcsdns.objects import MAX_CONDITIONS, convert, import_status
from testsupport.objects import service_import


def _ready(status: str = "True", reason: str = "Ready", message: str = "") -> dict:
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-12-01T10:00:00Z"}


def test_a_status_never_refuses_the_import_nor_changes_what_it_compares_equal_to() -> None:
    plain = service_import("ns", "web", ["10.0.0.1"])
    for status in ("garbage", 7, [1], {"conditions": "x"}, {"conditions": [None, {"type": 5}]}, {"clusters": {"a": 1}}):
        imp = convert(dict(plain, status=status))
        assert imp == convert(plain) and imp.status.notes  # equal for DNS; what was odd is noted
    assert convert(plain).status.notes == () and convert(plain).status.conditions == ()


def test_not_ready_is_the_ready_condition_unless_true() -> None:
    assert import_status({"conditions": [_ready()]}).not_ready() is None
    assert import_status({"conditions": [_ready("False", "Pending", "no IP yet")]}).not_ready() == "Pending: no IP yet"
    assert import_status({"conditions": [_ready("Unknown", "")]}).not_ready() == "(no reason)"
    assert import_status({"conditions": [dict(_ready("False"), type="Other")]}).not_ready() is None  # no Ready condition


def test_bounded_and_shared() -> None:
    huge = import_status({"conditions": [_ready("False", "R" * 5000, "m" * 100_000)] * 100})
    assert len(huge.conditions) == MAX_CONDITIONS
    assert {(len(c.reason), len(c.message)) for c in huge.conditions} == {(63, 256)}
    same = [import_status({"conditions": [_ready()], "clusters": [{"cluster": "east"}]}) for _ in range(3)]
    assert same[0] is same[1] is same[2]  # one copy for every import with this status
