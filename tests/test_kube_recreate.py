"""A ServiceImport deleted and re-created within a second, under a steady stream of queries.

KEP-1645 expects a service's DNS answers to stay stable while an MCS controller
reworks its ServiceImport (a conflict transition, a controller that replaces the
object instead of updating it); Submariner's Lighthouse lost records this way.
CoreDNS answers NXDOMAIN from the moment the delete reaches its informer until
the create does, and with the SOA's negative TTL a client caches that NXDOMAIN.

mcsdns does the same by default (the contract: every answer is CoreDNS's). With
`--delete-grace DURATION` a deleted ServiceImport keeps its answers for that
long; re-created within it, its name never answers NXDOMAIN; not re-created, it
goes once the grace has passed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kube_server import MCS, NXDOMAIN, KubeServer, a, ensure_crd, fqdn, service_import
from testsupport.testbed import Testbed

pytestmark = pytest.mark.kube

SI_API = f"{MCS}/v1beta1"
GAPS = (0.0, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.95)  # seconds between the delete and the re-create


class Asker:
    """Asks one name as fast as one socket allows, on a thread; counts each answer by its value."""

    def __init__(self, server: KubeServer, name: str) -> None:
        self.server, self.name = server, name
        self.seen: dict[tuple[str, tuple[str, ...]], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rcode, rdata = self.server.answer(self.name)
            except Exception:  # noqa: BLE001 - a lost UDP reply is not an answer
                continue
            key = (rcode, tuple(rdata))
            self.seen[key] = self.seen.get(key, 0) + 1

    def __enter__(self) -> "Asker":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def churn(testbed: Testbed, ns: str, name: str, ip: str) -> None:
    """Delete and re-create the import, each gap of GAPS once."""
    for gap in GAPS:
        testbed.delete(SI_API, "ServiceImport", ns, name)
        if gap:
            time.sleep(gap)
        testbed.create(service_import(ns, name, [ip]))
        time.sleep(0.3)


def test_a_recreated_import_never_answers_nxdomain_with_a_delete_grace(testbed: Testbed, fresh_namespace: str,
                                                                        tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    testbed.create(service_import(ns, "web", ["10.4.0.1"]))
    testbed.create(service_import(ns, "gone", ["10.4.0.2"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--delete-grace", "2s") as server:
        server.wait_until_ready()
        server.wait_answer(fqdn("web", ns), "A", a("10.4.0.1"))
        with Asker(server, fqdn("web", ns)) as asker:
            churn(testbed, ns, "web", "10.4.0.1")
        print(f"\n--delete-grace 2s, {len(GAPS)} delete + re-create within {max(GAPS)}s: answers {asker.seen}")
        assert sum(asker.seen.values()) > 100
        assert set(asker.seen) == {("NOERROR", ("10.4.0.1",))}, "the answer changed while the import was re-created"
        # Deleted for good: gone once the grace has passed, not before.
        testbed.delete(SI_API, "ServiceImport", ns, "gone")
        deleted = time.monotonic()
        assert server.answer(fqdn("gone", ns)) == a("10.4.0.2"), "removed before its grace"
        server.wait_answer(fqdn("gone", ns), "A", NXDOMAIN, timeout=10)
        took = time.monotonic() - deleted
        print(f"a deleted import answered NXDOMAIN {took:.2f}s after its delete (grace 2s)")
        assert 1.8 <= took < 4.0
        assert "Traceback" not in server.log()


def test_without_the_grace_a_deleted_import_goes_at_once_as_in_coredns(testbed: Testbed, fresh_namespace: str,
                                                                        tmp_path: Path) -> None:
    ensure_crd(testbed)
    ns = fresh_namespace
    testbed.create(service_import(ns, "web", ["10.4.0.1"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log") as server:
        server.wait_until_ready()
        server.wait_answer(fqdn("web", ns), "A", a("10.4.0.1"))
        with Asker(server, fqdn("web", ns)) as asker:
            churn(testbed, ns, "web", "10.4.0.1")
        print(f"\nno grace (CoreDNS's behaviour), {len(GAPS)} delete + re-create within {max(GAPS)}s: answers {asker.seen}")
        assert set(asker.seen) <= {("NOERROR", ("10.4.0.1",)), NXDOMAIN[:1] + ((),)}
        assert asker.seen.get(("NXDOMAIN", ()), 0) > 0, "a deleted import was still answered without --delete-grace"
