"""The relist object alone (relist.py): mark and sweep and the --delete-grace removals, in process.

The sources drive it (tests/test_kube_relist.py through the Kubernetes source's events, the
manifests tests through file reloads, the test bed end to end); these pin its own rules with a
real Store: what a list no longer holds is deleted at its end and only then, what it holds
again is kept, a rejected object keeps its last good version, and a deleted ServiceImport is
removed when its grace is over unless a watch event or a list re-creates it first. The grace's
timers come from a scheduler run by hand, so no test waits on a clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mcsdns.config import Config, kube_settings
from mcsdns.objects import Address, EndpointSlice, Namespace, Port, ServiceImport
from mcsdns.sources.relist import DeleteGrace, Relist
from mcsdns.sources.kube import KubeSettings
from mcsdns.store import Changes, Store


def imp(name: str, ip: str = "10.0.0.1") -> ServiceImport:
    return ServiceImport("ns", name, False, (ip,), (Port(80, "http", "TCP"),))


def slice_(name: str, service: str) -> EndpointSlice:
    return EndpointSlice("ns", name, service, "east", (Address("10.1.0.1", True, None),), (Port(80, "http", "TCP"),))


def store_with(*objects) -> tuple[Store, list[Changes]]:
    notes: list[Changes] = []
    store = Store(notes.append)
    store.upsert(objects)
    notes.clear()
    return store, notes


class Timer:
    def __init__(self, seconds: float, callback: Callable[[], None]) -> None:
        self.seconds, self.callback, self.cancelled = seconds, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """call_later run by hand: `run()` fires every timer still scheduled, as the loop would when due."""

    def __init__(self) -> None:
        self.timers: list[Timer] = []

    def __call__(self, seconds: float, callback: Callable[[], None]) -> "Timer":
        timer = Timer(seconds, callback)
        self.timers.append(timer)
        return timer

    def live(self) -> list["Timer"]:
        return [t for t in self.timers if not t.cancelled]

    def run(self) -> None:
        for timer in self.live():
            timer.cancelled = True
            timer.callback()


# --------------------------------------------------------------------------- mark and sweep


def test_what_a_relist_no_longer_holds_is_deleted_at_its_end_and_only_then() -> None:
    store, notes = store_with(imp("a"), imp("b"), imp("c"))
    kept = store.imports[("ns", "c")]
    relist = Relist(store, "ServiceImport")
    relist.page([imp("a", "10.0.1.1")])
    relist.page([imp("c"), imp("d")])
    assert set(store.imports) == {("ns", "a"), ("ns", "b"), ("ns", "c"), ("ns", "d")}  # `b` still served
    assert store.imports[("ns", "a")].ips == ("10.0.1.1",)  # a page is applied as it arrives
    assert relist.finish([]) == {("ns", "b")}
    assert set(store.imports) == {("ns", "a"), ("ns", "c"), ("ns", "d")}
    assert store.imports[("ns", "c")] is kept  # re-seen unchanged: the stored copy stays
    assert relist.count == 3
    assert [sorted(n.services) for n in notes] == [[("ns", "a")], [("ns", "d")], [("ns", "b")]]


def test_the_last_page_and_the_sweep_make_one_notification() -> None:
    store, notes = store_with(imp("a"), imp("b"))
    Relist(store, "ServiceImport").finish([imp("a", "10.0.1.1"), imp("c")])
    assert set(store.imports) == {("ns", "a"), ("ns", "c")}
    assert len(notes) == 1 and notes[0].services == {("ns", "a"), ("ns", "b"), ("ns", "c")}


def test_a_rejected_object_keeps_its_last_good_version() -> None:
    store, _ = store_with(imp("a"), imp("b"))
    relist = Relist(store, "ServiceImport")
    relist.page([], rejected={("ns", "a")})
    relist.finish([])
    assert set(store.imports) == {("ns", "a")} and relist.rejected == {("ns", "a")}


def test_a_relist_touches_only_its_kind() -> None:
    store, _ = store_with(Namespace("ns"), imp("web"), slice_("web", "web"))
    Relist(store, "EndpointSlice").finish([])
    assert set(store.slices) == set() and set(store.imports) == {("ns", "web")} and store.namespaces == {"ns"}
    Relist(store, "Namespace").finish([Namespace("other")])
    assert store.namespaces == {"other"}


def test_a_list_whose_start_was_not_seen_deletes_nothing() -> None:
    store, _ = store_with(imp("a"), imp("b"))
    relist = Relist(store, "ServiceImport", sweep=False)
    relist.page([imp("c")])
    assert relist.finish([]) == set()
    assert set(store.imports) == {("ns", "a"), ("ns", "b"), ("ns", "c")}


# --------------------------------------------------------------------------- --delete-grace


def deferred(store: Store, name: str) -> tuple[DeleteGrace, Scheduler]:
    """A grace of 3 s with `name` deleted by a watch event: still in the store, its removal pending."""
    scheduler = Scheduler()
    grace = DeleteGrace(3.0, scheduler)
    grace.defer(("ns", name), lambda: store.delete("ServiceImport", "ns", name))
    return grace, scheduler


def test_a_deleted_import_is_served_until_its_grace_is_over() -> None:
    store, _ = store_with(imp("a"))
    grace, scheduler = deferred(store, "a")
    assert ("ns", "a") in store.imports and [t.seconds for t in scheduler.live()] == [3.0]
    scheduler.run()
    assert ("ns", "a") not in store.imports and not grace.pending


def test_a_recreation_by_watch_or_by_a_relist_cancels_the_removal() -> None:
    store, _ = store_with(imp("a"), imp("b"))
    grace, scheduler = deferred(store, "a")
    grace.defer(("ns", "b"), lambda: store.delete("ServiceImport", "ns", "b"))
    grace.seen([slice_("a", "a")])  # a slice of the same name is not the import
    assert len(scheduler.live()) == 2
    grace.seen([imp("a", "10.0.9.9")])  # the watch event of its re-creation
    relist = Relist(store, "ServiceImport", grace=grace)
    relist.page([imp("b")])  # a list holding `b` again
    relist.finish([imp("a", "10.0.9.9")])
    assert scheduler.live() == [] and not grace.pending
    scheduler.run()
    assert set(store.imports) == {("ns", "a"), ("ns", "b")}


def test_a_relist_without_the_import_removes_it_at_once() -> None:
    store, _ = store_with(imp("a"), imp("b"), slice_("b", "b"))
    grace, scheduler = deferred(store, "a")
    grace.defer(("ns", "b"), lambda: store.delete("ServiceImport", "ns", "b"))
    Relist(store, "EndpointSlice", grace=grace).finish([])  # sweeps slice ns/b: the import's removal stays due
    assert len(scheduler.live()) == 2
    Relist(store, "ServiceImport", grace=grace).finish([imp("b")])
    assert set(store.imports) == {("ns", "b")}  # `a` gone with the sweep, before its grace is over
    assert scheduler.live() == [] and not grace.pending  # and `b`, listed again, is not removed later
    scheduler.run()
    assert set(store.imports) == {("ns", "b")}


# --------------------------------------------------------------------------- settings


def test_the_kube_settings_are_the_flags_it_reads() -> None:
    assert kube_settings(Config()) == KubeSettings()  # the defaults agree
    config = Config(kubeconfig=Path("kc"), context="east", labels="tier=dns", local_cluster="auto", resync=30.0,
                    delete_grace=2.0)
    assert kube_settings(config) == KubeSettings(Path("kc"), "east", False, "tier=dns", True, 30.0, 2.0)
    assert kube_settings(Config(local_cluster="east")).cluster_properties is False
