"""Fuzzing objects and manifests: mutated ServiceImports and EndpointSlices, bad objects next to good
ones, huge and duplicate lists, YAML bombs, names past 255 bytes; manifests that never parsed or
can no longer be read.

`objects.convert` either returns a record or raises InvalidObject (never anything else); a record
it returns compiles, and every answer it leads to parses; a rejected object is counted under
mcsdns_objects_rejected_total{reason} and leaves the rest of the table exactly as it was. The
object mutator is testsupport/fuzz.py's.
"""

from __future__ import annotations

import copy
import logging
import time
from pathlib import Path

import dns.flags
import dns.message
import dns.rcode
import pytest
import yaml
from prometheus_client import CollectorRegistry

from mcsdns.metrics import Metrics
from mcsdns.objects import InvalidObject, convert
from mcsdns.serve.resolve import Resolver
from mcsdns.sources.manifests import ManifestSource
from mcsdns.store import Store
from testsupport.cases import MAIN, Z, check, make_query
from testsupport.fuzz import ES, FUZZ_SEED, OBJECT_INPUTS, SI, SI_HEADLESS, _slice, build, fresh_table, fuzz_objects
from testsupport.inprocess import ask, build_table
from testsupport.objects import namespace
from testsupport.mcsdnsserver import FIXTURES, McsdnsServer


# =========================================================================== objects


@pytest.mark.slow
def test_mutated_objects():
    started = time.monotonic()
    outcomes = fuzz_objects(OBJECT_INPUTS, FUZZ_SEED)
    print(f"\n{OBJECT_INPUTS} objects in {time.monotonic() - started:.1f}s: {dict(sorted(outcomes.items()))}")
    assert outcomes.get("accepted", 0) > OBJECT_INPUTS * 0.1
    assert sum(v for k, v in outcomes.items() if k.startswith("rejected")) > OBJECT_INPUTS * 0.3


# (object, expected reason label) -- one per way an object can be refused whole: no name DNS can use,
# or a field of a JSON type the API never serves. Objects DNS can serve around are served without
# the part it cannot represent (decision 12): tests/test_partial_objects.py.
BAD_OBJECTS = [
    (dict(copy.deepcopy(SI), spec={"type": 7}), "spec.type"),
    (dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ips": "10.0.0.1"}), "spec.ips"),
    (dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ports": [{"port": "80"}]}), "spec.ports"),
    (dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ports": {"port": 80}}), "spec.ports"),
    (dict(copy.deepcopy(SI), spec=["not", "an", "object"]), "spec"),
    (dict(copy.deepcopy(SI), metadata={"name": "Bad_Name", "namespace": "testns"}), "metadata.name"),
    (dict(copy.deepcopy(SI), metadata={"name": "ok"}), "metadata.namespace"),
    (dict(copy.deepcopy(SI), metadata="nope"), "metadata"),
    (_slice("bad-ready", endpoints=[{"addresses": ["10.1.1.1"], "conditions": {"ready": "yes"}}]), "endpoints"),
    (_slice("bad-endpoints", endpoints="10.1.1.1"), "endpoints"),
    (_slice("bad-port", ports=[{"port": "80"}]), "ports"),
    (dict(copy.deepcopy(SI), metadata={"name": "two.labels", "namespace": "testns"}), "metadata.name"),
    (_slice("bad-labels", metadata={"name": "bad-labels", "namespace": "testns", "labels": ["x"]}), "metadata.labels"),
    (_slice("no-service", metadata={"name": "no-service", "namespace": "testns", "labels": {}}), "label"),
    (_slice("bad-cluster", metadata={"name": "bad-cluster", "namespace": "testns", "labels": {
        "multicluster.kubernetes.io/service-name": "fz", "multicluster.kubernetes.io/source-cluster": "-bad-"}}), "label"),
]  # fmt: skip


def test_bad_objects_are_rejected_alone_and_counted(tmp_path):
    """Good and bad objects in one manifest: each bad one is rejected alone, counted by reason,
    and the answers are exactly those of the good objects alone."""
    good_docs = list(yaml.safe_load_all((FIXTURES / "contract.yaml").read_text()))
    good_docs += [copy.deepcopy(SI), copy.deepcopy(ES)]
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "all.yaml").write_text(yaml.safe_dump_all(good_docs))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    docs = list(good_docs)
    for i, (bad, _) in enumerate(BAD_OBJECTS):
        docs.insert(3 + 2 * i, bad)  # interleaved with the good ones
    (mixed / "all.yaml").write_text(yaml.safe_dump_all(docs))

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    reference = build([clean])
    served = build([mixed], on_error=metrics.rejected)

    assert {k: v for k, v in served.table.answers.items() if not k.startswith(b"\x0aclusterset")} == {
        k: v for k, v in reference.table.answers.items() if not k.startswith(b"\x0aclusterset")
    }
    for c in MAIN:
        check(c, ask(served, make_query(c)))
    expected: dict[str, int] = {}
    for _, reason in BAD_OBJECTS:
        expected[reason] = expected.get(reason, 0) + 1
    got = {reason: registry.get_sample_value("mcsdns_objects_rejected_total", {"reason": reason}) for reason in expected}
    assert got == {k: float(v) for k, v in expected.items()}


def test_huge_and_duplicate_lists_stay_bounded():
    """A slice as big as the API allows compiles in bounded time; beyond the API's own limits it is rejected."""
    endpoints = [{"addresses": [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"], "hostname": f"h{i}"} for i in range(1000)]
    store, table, resolver = fresh_table()
    store.apply(convert(SI_HEADLESS))
    started = time.monotonic()
    store.apply(convert(_slice("huge", endpoints=endpoints)))
    took = time.monotonic() - started
    assert took < 10, f"compiling a 1000-endpoint slice took {took:.1f}s"
    reply = ask(resolver, dns.message.make_query("fz.testns.svc." + Z, "A", use_edns=False))
    assert reply.flags & dns.flags.TC and reply.answer
    full = ask(resolver, "fz.testns.svc." + Z, "A", tcp=True)
    assert sum(len(r) for r in full.answer) == 1000
    # Duplicates: the same address twice, two endpoints with one hostname, a port listed twice -> de-duplicated answers.
    dup = _slice("dup", endpoints=[{"addresses": ["10.5.5.5", "10.5.5.5"], "hostname": "same"},
                                   {"addresses": ["10.5.5.6"], "hostname": "same"}],
                 ports=[{"name": "http", "protocol": "TCP", "port": 80}] * 3)  # fmt: skip
    store.delete("EndpointSlice", "testns", "huge")
    store.apply(convert(dup))
    a = ask(resolver, "fz.testns.svc." + Z, "A")
    assert sorted(rd.address for r in a.answer for rd in r) == ["10.5.5.5", "10.5.5.6"]
    srv = ask(resolver, "fz.testns.svc." + Z, "SRV")
    assert [rd.target.to_text() for r in srv.answer for rd in r] == ["same.c1.fz.testns.svc." + Z]
    # Beyond what the API server itself accepts (1000 endpoints, 100 addresses each): rejected, not compiled.
    for too_big in (_slice("too-many", endpoints=endpoints + endpoints[:1]),
                    _slice("too-wide", endpoints=[{"addresses": [f"10.6.0.{i % 250}" for i in range(101)]}])):
        with pytest.raises(InvalidObject):
            convert(too_big)


def test_yaml_alias_bomb_is_rejected_not_expanded(tmp_path):
    """Ten aliases of an endpoint list with aliases of aliases: a tiny file that would expand to millions of
    addresses. The source must reject it alone (API limits) rather than compile it."""
    addresses = ", ".join(f"10.0.{i // 250}.{i % 250 + 1}" for i in range(100))
    lines = ["apiVersion: discovery.k8s.io/v1", "kind: EndpointSlice",
             "metadata: {name: bomb, namespace: testns, labels: {multicluster.kubernetes.io/service-name: fz}}",
             "addressType: IPv4", f"x0: &e0 {{addresses: [{addresses}]}}",
             "endpoints: [" + ", ".join(["*e0"] * 20000) + "]"]  # 2M addresses from a 100 KB file
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n---\n" + yaml.safe_dump(SI_HEADLESS))
    rejected: list[str] = []
    started = time.monotonic()
    store = build_table([path], on_error=rejected.append).store
    assert time.monotonic() - started < 10
    assert ("testns", "fz") in store.imports and not store.slices
    assert rejected == ["endpoints"]


def test_a_63_byte_port_name_compiles():
    """A port name may be a 63-byte DNS label (EndpointSlice validation); `_` + it is no label, so that
    `_name._proto` name cannot exist. Found by the object fuzzer: it once raised out of the table."""
    long_name = "p" * 63
    store, table, resolver = fresh_table()
    store.apply(convert(dict(copy.deepcopy(SI), spec={"type": "ClusterSetIP", "ips": ["10.9.9.9"],
                                                      "ports": [{"name": long_name, "protocol": "TCP", "port": 80}]})))
    store.apply(convert(copy.deepcopy(SI_HEADLESS) | {"metadata": {"name": "fz2", "namespace": "testns"}}))
    store.apply(convert(_slice("long-port", metadata={"name": "long-port", "namespace": "testns", "labels": {
        "multicluster.kubernetes.io/service-name": "fz2", "multicluster.kubernetes.io/source-cluster": "c1"}},
        ports=[{"name": long_name, "protocol": "UDP", "port": 53}])))  # fmt: skip
    for name in ("fz", "fz2"):
        srv = ask(resolver, f"{name}.testns.svc.{Z}", "SRV")
        assert srv.rcode() == dns.rcode.NOERROR and srv.answer


def test_names_past_255_bytes_are_left_out():
    """Host, cluster, service and namespace of 63 bytes each: valid labels, but the SRV target
    would be a 278-byte name no resolver accepts. It is left out (NODATA), the reply still parses."""
    ns, svc, host, cluster = "n" * 63, "s" * 63, "h" * 63, "c" * 63
    table = build_table(objects=[namespace(ns)], synced=True)
    store = table.store
    store.apply(convert(dict(copy.deepcopy(SI_HEADLESS), metadata={"name": svc, "namespace": ns})))
    store.apply(convert(_slice("long", metadata={"name": "long", "namespace": ns, "labels": {
        "multicluster.kubernetes.io/service-name": svc, "multicluster.kubernetes.io/source-cluster": cluster}},
        endpoints=[{"addresses": ["10.0.0.1"], "hostname": host}])))  # fmt: skip
    resolver = Resolver(table)
    name = f"{svc}.{ns}.svc.{Z}"
    srv = ask(resolver, name, "SRV")
    assert srv.rcode() == dns.rcode.NOERROR and not srv.answer and not srv.additional and srv.authority
    a = ask(resolver, name, "A")
    assert [rd.address for r in a.answer for rd in r] == ["10.0.0.1"]


# =========================================================================== manifests and flags


def test_a_manifest_that_never_parsed_keeps_the_server_unready(tmp_path):
    """At startup there is no last good state: a broken file means /ready 503 naming file and line, and
    SERVFAIL instead of NXDOMAIN (decision 10), not a ready server with an empty zone. Fixed, it serves."""
    path = tmp_path / "app.yaml"
    path.write_text("apiVersion: v1\nkind: [unclosed\n")
    with McsdnsServer("--manifests", str(tmp_path), "--startup-timeout", "1s", "--upstream", "none", wait_ready=False) as s:
        status, reason = s.http("/ready")
        assert status == 503 and f"{path}: invalid YAML/JSON at line 3" in reason
        assert s.query("nothing.app.svc." + Z).rcode() == dns.rcode.SERVFAIL
        path.write_text(yaml.safe_dump_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}, dict(copy.deepcopy(SI), metadata={"name": "web", "namespace": "app"})]))
        deadline = time.monotonic() + 10
        while s.http("/ready")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.http("/ready") == (200, "OK")
        assert s.query("web.app.svc." + Z).answer[0][0].address == "10.9.9.9"
        assert s.query("nothing.app.svc." + Z).rcode() == dns.rcode.NXDOMAIN
        # Once synced, a broken edit keeps the last good objects and readiness (every replica reads the same file).
        path.write_text("{not json")
        time.sleep(2.5)
        assert s.http("/ready") == (200, "OK")
        assert s.query("web.app.svc." + Z).answer[0][0].address == "10.9.9.9"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_an_unreadable_file_names_the_error_and_keeps_the_last_good_objects(tmp_path, monkeypatch):
    """EACCES cannot be staged as root, so the read itself is made to fail: the log names file and reason."""
    logged = _Lines()
    logger = logging.getLogger("mcsdns.sources.manifests")
    logger.addHandler(logged)
    monkeypatch.setattr(logger, "level", logging.INFO)
    monkeypatch.setattr(logger, "disabled", False)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(SI)))
    store = Store()
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    source = ManifestSource([path], store, on_error=metrics.rejected)
    source.load()
    assert ("testns", "fz") in store.imports
    real = Path.read_text

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", denied)
    source.reload()
    logger.removeHandler(logged)
    assert f"{path}: cannot read (Permission denied); keeping its last good objects" in logged.lines
    assert ("testns", "fz") in store.imports
    assert registry.get_sample_value("mcsdns_objects_rejected_total", {"reason": "unreadable_file"}) == 1


