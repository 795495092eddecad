"""mcsdns/admin/orphans.py on a real Store: one log line per orphan service, after two sweeps, bounded.

tests/compat/test_implementations.py checks the same line against a real kube-apiserver (the
Lighthouse fixture's orphan slice), and that it matches what /explain says.
"""

from __future__ import annotations

import logging

import pytest

from mcsdns.objects import to_endpoint_slice, to_namespace, to_service_import
from mcsdns.admin.orphans import MAX_LINES, Orphans
from mcsdns.store import KINDS, Store
from testsupport.objects import endpoint, endpoint_slice, namespace, service_import


def synced_store() -> Store:
    store = Store()
    store.apply(to_namespace(namespace("demo")))
    for kind in KINDS:
        store.mark_synced(kind)
    return store


def add_slice(store: Store, service: str, name: str | None = None) -> None:
    store.apply(to_endpoint_slice(endpoint_slice("demo", name or f"{service}-c1", service, "c1",
                                                 [endpoint(["10.1.0.1"])])))


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mcsdns.admin.orphans"]


def test_an_orphan_is_logged_once_after_two_sweeps_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcsdns.admin.orphans")
    store = synced_store()
    orphans = Orphans(store)
    add_slice(store, "web")
    store.apply(to_service_import(service_import("demo", "db", ["10.0.0.2"])))
    add_slice(store, "db")  # has its import: never an orphan
    orphans.sweep()
    assert lines(caplog) == []  # one sweep: maybe a controller between its two writes
    orphans.sweep()
    assert lines(caplog) == ["no ServiceImport web in namespace demo (1 EndpointSlice(s) are labelled "
                             "multicluster.kubernetes.io/service-name=web: demo/web-c1; they answer nothing "
                             "until the import exists)"]
    orphans.sweep()
    orphans.sweep()
    assert len(lines(caplog)) == 1
    store.apply(to_service_import(service_import("demo", "web", ["10.0.0.1"])))
    orphans.sweep()
    assert lines(caplog)[1:] == ["EndpointSlices labelled multicluster.kubernetes.io/service-name=web in namespace "
                                 "demo are no longer orphans: its ServiceImport exists now"]
    # Deleted again: an orphan again, logged again.
    store.delete("ServiceImport", "demo", "web")
    orphans.sweep()
    orphans.sweep()
    assert len(lines(caplog)) == 3 and lines(caplog)[2].startswith("no ServiceImport web in namespace demo")


def test_a_transient_orphan_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcsdns.admin.orphans")
    store = synced_store()
    orphans = Orphans(store)
    add_slice(store, "web")
    orphans.sweep()
    store.apply(to_service_import(service_import("demo", "web", ["10.0.0.1"])))
    orphans.sweep()
    orphans.sweep()
    assert lines(caplog) == []


def test_nothing_is_logged_before_sync(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcsdns.admin.orphans")
    store = Store()  # the imports may simply not be listed yet
    add_slice(store, "web")
    orphans = Orphans(store)
    orphans.sweep()
    orphans.sweep()
    assert lines(caplog) == []


def test_many_orphans_make_a_bounded_number_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="mcsdns.admin.orphans")
    store = synced_store()
    orphans = Orphans(store)
    for i in range(MAX_LINES + 15):
        add_slice(store, f"svc{i:02d}")
    for extra in range(7):
        add_slice(store, "svc00", f"svc00-extra{extra}")
    orphans.sweep()
    orphans.sweep()
    got = lines(caplog)
    assert len(got) == MAX_LINES + 1, got
    assert "(8 EndpointSlice(s) are labelled" in got[0] and "and 3 more;" in got[0], got[0]
    assert got[-1].startswith("15 more services have EndpointSlices but no ServiceImport"), got[-1]
    for _ in range(3):
        orphans.sweep()
    assert len(lines(caplog)) == MAX_LINES + 1
