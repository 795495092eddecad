"""updates.py: a --workers worker that applies the supervisor's compiled updates holds the supervisor's table.

Two tables over two stores, built from the same objects as the fork would leave them: the
"supervisor" compiles each change, its update goes through pickle (as over the socketpair) into the
"worker". After every change both must hold the same answers under the same keys, the same per-service
key lists, the same SOA serial, and answer every question byte for byte alike; DNS-SD names and
--reverse-cidr PTR records (which the worker keeps itself) included. The end-to-end path (real
processes, real sockets, a real kube-apiserver) is tests/test_workers.py.
"""

from __future__ import annotations

import pickle

import pytest

from mcsdns.zone.dnssd import DnsSd
from mcsdns.objects import convert
from mcsdns.serve.resolve import Resolver
from mcsdns.store import Changes, Store
from mcsdns.zone.table import Table, TableConfig
from mcsdns.workers.updates import apply_update, update_of
from testsupport.inprocess import KINDS, NS_ADDRESSES, ZONES
from testsupport.objects import endpoint, endpoint_slice, namespace, service_import

CONFIG = TableConfig(ZONES, 5, None, NS_ADDRESSES, None, ("10.0.0.0/8",))


def objects() -> list[dict]:
    out = [namespace("a"), namespace("b")]
    for ns in ("a", "b"):
        for i in range(3):
            out.append(service_import(ns, f"s{i}", [f"10.1.{ord(ns)}.{i}"]))
            out.append(endpoint_slice(ns, f"s{i}-east", f"s{i}", "east",
                                      [endpoint([f"10.2.{ord(ns)}.{i}"], hostname=f"pod-{i}")]))
    out.append(service_import("a", "hl", headless=True))
    out.append(endpoint_slice("a", "hl-east", "hl", "east", [endpoint([f"10.3.0.{k}"], hostname=f"h{k}") for k in range(4)]))
    return out


class Pair:
    """The supervisor's table and a worker's copy, each over its own store, kept in step by updates."""

    def __init__(self) -> None:
        self.updates: list[dict] = []
        self.sup = self._table(self._relay)
        self.worker = self._table(None)
        for table in (self.sup, self.worker):
            for obj in objects():
                table.store.apply(convert(obj))
            for kind in KINDS:
                table.store.mark_synced(kind)
        self.worker.set_serial(self.sup.serial)  # (serials are milliseconds: the two tables were made apart)
        self.updates.clear()

    def _table(self, listener) -> Table:
        store = Store()
        table = Table(CONFIG, store)
        store.listener = listener or table.on_change
        table.dnssd = DnsSd(table)
        return table

    def _relay(self, changes: Changes) -> None:
        serial = self.sup.serial
        self.sup.on_change(changes)
        self.updates.append(pickle.loads(pickle.dumps(update_of(self.sup, changes, serial), protocol=pickle.HIGHEST_PROTOCOL)))

    def deliver(self, strip_compiled: bool = False) -> list[dict]:
        sent, self.updates = self.updates, []
        for update in sent:
            if strip_compiled:
                update.pop("compiled")
            apply_update(self.worker, update)
        return sent


def questions(table: Table) -> list[bytes]:
    names = set(table.answers)
    for key in list(names):  # a per-endpoint name and a missing one next to each service name
        names.add(b"\x05pod-0\x04east" + key)
        names.add(b"\x07missing" + key)
        names.add(key[:-4] + b"\x00\x10\x00\x01")  # TXT: a type no service compiles (NODATA, not NXDOMAIN)
    return [b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + key for key in sorted(names)]


def assert_same(pair: Pair) -> None:
    sup, worker = pair.sup, pair.worker
    assert worker.answers == sup.answers
    assert {k: sorted(v) for k, v in worker.owned.items()} == {k: sorted(v) for k, v in sup.owned.items()}
    assert worker.serial == sup.serial
    assert worker.children == sup.children  # the index the resolver answers missing names from
    packets = questions(sup)
    assert [Resolver(worker).handle(p) for p in packets] == [Resolver(sup).handle(p) for p in packets]


CHANGES = {
    "address changed": lambda s: s.apply(convert(service_import("a", "s0", ["10.1.9.9"]))),
    "endpoint added": lambda s: s.apply(convert(endpoint_slice("a", "s1-east", "s1", "east",
                                                               [endpoint(["10.2.0.1"]), endpoint(["10.2.0.2"])]))),
    "service deleted": lambda s: s.delete("ServiceImport", "b", "s2"),
    "service added": lambda s: s.apply(convert(service_import("b", "new", ["10.1.8.8"]))),
    "headless slice deleted": lambda s: s.delete("EndpointSlice", "a", "hl-east"),
    "namespace deleted": lambda s: s.delete("Namespace", "", "b"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_worker_installs_the_supervisors_answers(change):
    pair = Pair()
    assert_same(pair)
    CHANGES[change](pair.sup.store)
    sent = pair.deliver()
    assert sent and any(update["compiled"] for update in sent), "the update carried no compiled answers"
    assert_same(pair)
    # The worker holds the bodies it was sent (installed, not rendered again).
    for update in sent:
        for answers in update["compiled"].values():
            for key, body in answers or ():
                assert pair.worker.answers[key] is body


def test_every_change_in_a_row_and_without_compiled_answers_too():
    pair, plain = Pair(), Pair()
    for change in CHANGES.values():
        change(pair.sup.store)
        change(plain.sup.store)
        pair.deliver()
        plain.deliver(strip_compiled=True)  # the worker compiles each service itself: the same result
        assert_same(pair)
        assert_same(plain)
    pair.sup.store.apply(convert(namespace("b")))  # the namespace back: its imports are served again
    pair.deliver()
    assert_same(pair)
    assert any(k.endswith(b"\x00\x01\x00\x01") and b"\x02s0\x01b" in k for k in pair.worker.answers)
