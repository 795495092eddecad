"""CoreDNS and mcsdns, same kube-apiserver, same questions: the same answers.

Every difference must be claimed by a documented decision (decisions.py,
mirrored by docs/compatibility.md); the terminal summary counts questions and
differences by name form.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import dns.message
import dns.query
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testsupport.cases import MAIN, check, make_query
from testsupport.objects import endpoint, endpoint_slice, namespace, service_import
from testsupport.polling import eventually

from . import compare
from .compare import Difference
from .harness import SEED, SOURCE, Unsynced, World
from .decisions import DECISIONS
from .dnsclient import TCP, UDP, UDP_EDNS, Ask, exchange
from .generator import (
    PAYLOADS,
    QTYPES,
    ZONE,
    asks,
    names,
    random_case,
)

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]


def unexpected(diffs: list[Difference]) -> list[Difference]:
    return [d for d in diffs if d.decision is None]


def report(diffs: list[Difference], limit: int = 15) -> str:
    bad = unexpected(diffs)
    text = "\n".join(d.describe() for d in bad[:limit])
    return f"{len(bad)} unexpected differences (first {min(limit, len(bad))}):\n{text}"


# --------------------------------------------------------------------------- not synced


needs_watch = pytest.mark.skipif(SOURCE == "manifests", reason="mcsdns reads manifests: always synced")


@needs_watch
def test_not_synced_both_servfail_instead_of_nxdomain(unsynced: Unsynced) -> None:
    """Without the ServiceImport CRD neither server can sync: NXDOMAIN-class answers are
    SERVFAIL (with the SOA), positive answers are served, /ready is 503 on both."""
    assert unsynced.ready_before == (503, 503)
    for qname, rcodes in unsynced.servfail.items():
        assert rcodes == ("SERVFAIL", "SERVFAIL"), qname
    assert not unexpected(unsynced.diffs), report(unsynced.diffs)


# --------------------------------------------------------------------------- the reader


def test_fast_reader_agrees_with_dnspython(world: World) -> None:
    """The suite's fast reply reader gives exactly what dnspython gives, on real replies."""
    items = asks(names(world.everything)[:80], SEED, transports=(UDP, TCP))
    raw = [exchange(port, [a for _, a in items]) for port in world.ports_all]
    read = 0
    for wire in (w for replies in raw for w in replies if w is not None):
        fast = compare.read_fast(wire)
        if fast is not None:
            read += 1
            assert fast == compare.normalize_slow(wire), dns.message.from_wire(wire)
    assert read > 0.9 * sum(1 for replies in raw for w in replies if w is not None)


# --------------------------------------------------------------------------- the contract fixture

# Cases of testsupport/cases.py that CoreDNS answers differently on purpose (decision ns-address):
# outside a cluster, with `bind 127.0.0.1`, it has no address of its own to give.
CASES_DIFFERING_BY_DECISION = {"51", "D1"}


def test_contract_cases_hold_on_coredns(world: World) -> None:
    """Every case of the contract tables, asked of the real CoreDNS (`namespaces testns`)."""
    failures = {}
    port = world.ports_testns[0]
    for c in MAIN:
        reply = dns.query.udp(make_query(c), "127.0.0.1", port=port, timeout=2)
        try:
            check(c, reply)
        except AssertionError as err:
            failures[c.id] = f"{err}\n{reply}"
    assert set(failures) == CASES_DIFFERING_BY_DECISION, "\n\n".join(
        f"{k}: {v}" for k, v in failures.items() if k not in CASES_DIFFERING_BY_DECISION)


def test_contract_fixture_same_answers(world: World) -> None:
    """The contract fixture, `namespaces testns` on both: every name form x type x transport."""
    items = asks(names(world.contract), SEED)
    diffs = compare.compare("contract fixture", world.ports_testns, items, world.contract)
    assert not unexpected(diffs), report(diffs)


# --------------------------------------------------------------------------- generated cluster set


@pytest.mark.slow
def test_generated_cluster_set_same_answers(world: World) -> None:
    """The generated cluster set plus the contract fixture, all namespaces exposed."""
    items = asks(names(world.everything), SEED + 1)
    diffs = compare.compare(f"generated (seed {SEED})", world.ports_all, items, world.everything)
    assert not unexpected(diffs), report(diffs)


def test_truncation_was_exercised(world: World) -> None:
    """The big headless service truncates over UDP without EDNS on both servers, identically."""
    ns = next(o["metadata"]["namespace"] for o in world.generated.imports() if o["metadata"]["name"] == "big")
    qname = f"big.{ns}.svc.{ZONE}."
    items = [(("big", ns, "svc"), Ask(qname, qtype, transport, payload))
             for qtype in ("A", "SRV")
             for transport, payload in ((UDP, 0), (UDP_EDNS, 512), (UDP_EDNS, 1232), (UDP_EDNS, 4096), (TCP, 0))]
    coredns, mine = compare.ask_both(world.ports_all, [a for _, a in items])
    assert coredns[0].truncated and mine[0].truncated  # A over UDP/512
    assert not coredns[4].truncated and not mine[4].truncated  # A over TCP
    diffs = compare.compare("truncation", world.ports_all, items, world.everything)
    assert not unexpected(diffs), report(diffs)


# --------------------------------------------------------------------------- random questions


def _vocabulary(world: World) -> list[str]:
    words = {"svc", "pod", "dns", "ns", "dns-version", "_tcp", "_udp", "_sctp", "_http", "_", "*", "x"}
    for obj in world.everything.objects:
        meta = obj["metadata"]
        words.add(meta["name"])
        if meta.get("namespace"):
            words.add(meta["namespace"])
        for value in (meta.get("labels") or {}).values():
            words.update(value.lower().split("."))
        for ep in obj.get("endpoints") or []:
            if ep.get("hostname"):
                words.add(ep["hostname"])
    return sorted(w for w in words if 0 < len(w) < 64)


@pytest.fixture(scope="module")
def vocabulary(world: World) -> list[str]:
    return _vocabulary(world)


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_names_same_answers(world: World, vocabulary: list[str], data) -> None:
    """Hypothesis: names built from the cluster set's own words (and junk), any type, any transport."""
    word = st.one_of(st.sampled_from(vocabulary), st.from_regex(r"\A[a-z0-9_-]{1,12}\Z"))
    left = data.draw(st.lists(word, min_size=0, max_size=4), label="labels")
    tail = data.draw(st.sampled_from([("svc",), ("pod",), (), ("dns",)]), label="tail")
    labels = tuple(left) + tail
    if len(".".join(labels)) + len(ZONE) > 250:
        return
    qtype = data.draw(st.sampled_from(QTYPES), label="qtype")
    transport = data.draw(st.sampled_from([UDP, UDP_EDNS, TCP]), label="transport")
    rng = random.Random(data.draw(st.integers(0, 2**32), label="case"))
    qname = random_case(".".join(labels + (ZONE,)) + ".", rng)
    payload = data.draw(st.sampled_from(PAYLOADS), label="payload") if transport == UDP_EDNS else 0
    ask = Ask(qname, qtype, transport, payload, bool(payload) and data.draw(st.booleans(), label="DO"))
    diffs = compare.compare("hypothesis", world.ports_all, [(labels, ask)], world.everything)
    assert not unexpected(diffs), report(diffs)


# --------------------------------------------------------------------------- updates and deletes


def _ready_addresses(sl: dict) -> set[str]:
    return {a for ep in sl.get("endpoints") or [] if (ep.get("conditions") or {}).get("ready") is not False
            for a in ep["addresses"]}


def test_updates_and_deletes_converge(world: World) -> None:
    """Change, add and delete objects; once both servers show every change, they agree again."""
    gen = world.generated
    api = world.testbed
    rng = random.Random(SEED)
    sentinels: list[tuple[str, str, object]] = []  # (qname, qtype, predicate on a Reply), per change

    def fqdn(ns: str, svc: str) -> str:
        return f"{svc}.{ns}.svc.{ZONE}."

    def key(o: dict) -> tuple[str, str]:
        return o["metadata"]["namespace"], o["metadata"]["name"]

    ordinary = [o for o in gen.imports() if o["metadata"]["namespace"] != "cx-decisions" and key(o)[1] != "big"]
    cluster_ips = [o for o in ordinary if o["spec"]["type"] == "ClusterSetIP"]
    live_slices = [(o, s) for o in ordinary if o["spec"]["type"] == "Headless"
                   for s in gen.slices_of(*key(o)) if _ready_addresses(s)]
    rng.shuffle(cluster_ips)
    rng.shuffle(live_slices)
    assert len(cluster_ips) >= 3 and len(live_slices) >= 2, "the generated cluster set is too small for this test"

    # 1. New IPs for a ClusterSetIP import (ports given too: without ports the name does not exist).
    ns, svc = key(cluster_ips[0])
    api.patch(cluster_ips[0]["apiVersion"], "ServiceImport", ns, svc,
              {"spec": {"ips": ["10.99.0.1"], "ipFamilies": ["IPv4"], "ports": [{"port": 80, "protocol": "TCP"}]}})
    sentinels.append((fqdn(ns, svc), "A", lambda r: r.answer and all(x.endswith(" 10.99.0.1") for x in r.answer)))
    # 2. New ports.
    ns, svc = key(cluster_ips[1])
    api.patch(cluster_ips[1]["apiVersion"], "ServiceImport", ns, svc,
              {"spec": {"ips": ["10.99.0.2"], "ports": [{"name": "new", "port": 4242, "protocol": "UDP"}]}})
    sentinels.append((f"_new._udp.{svc}.{ns}.svc.{ZONE}.", "SRV", lambda r: r.rcode == "NOERROR" and r.answer))
    # 3. Delete a ServiceImport.
    ns, svc = key(cluster_ips[2])
    api.delete(cluster_ips[2]["apiVersion"], "ServiceImport", ns, svc)
    sentinels.append((fqdn(ns, svc), "A", lambda r: r.rcode == "NXDOMAIN"))
    # 4. Delete one slice of a headless import; 5. turn another slice's endpoints not ready.
    for (imp, sl), action in zip(live_slices[:2], ("delete", "unready")):
        ns, svc = key(imp)
        gone = _ready_addresses(sl)
        if action == "delete":
            api.delete("discovery.k8s.io/v1", "EndpointSlice", ns, sl["metadata"]["name"])
        else:
            api.apply(dict(sl, endpoints=[dict(ep, conditions={"ready": False}) for ep in sl["endpoints"]]))
        qtype = "AAAA" if sl["addressType"] == "IPv6" else "A"
        sentinels.append((fqdn(ns, svc), qtype, lambda r, gone=gone: r.rcode in ("NOERROR", "NXDOMAIN")
                          and not any(x.split(" ")[-1] in gone for x in r.answer)))
    # 6. A new namespace with a headless import from a new cluster.
    new_ns = "cx-late"
    world.apply(namespace(new_ns))
    world.apply(service_import(new_ns, "late", headless=True, ports=[]))
    world.apply(endpoint_slice(new_ns, "late-north", "late", "north", [endpoint(["10.77.0.1"], "l0"), endpoint(["10.77.0.2"], ready=None)], ports=[{"name": "http", "port": 80, "protocol": "TCP"}]))
    sentinels.append((f"l0.north.late.{new_ns}.svc.{ZONE}.", "A", lambda r: r.answer))
    # 7. A ClusterSetIP import turned Headless (its VIPs go, its endpoints answer).
    if len(cluster_ips) > 3:
        imp = cluster_ips[3]
        ns, svc = key(imp)
        api.patch(imp["apiVersion"], "ServiceImport", ns, svc, {"spec": {"type": "Headless", "ips": []}})
        vips = set(imp["spec"].get("ips") or [])
        sentinels.append((fqdn(ns, svc), "SRV" if not vips else "A",
                          lambda r, vips=vips: r.rcode in ("NOERROR", "NXDOMAIN")
                          and not any(x.split(" ")[-1] in vips for x in r.answer)))
    world.refresh()

    for qname, qtype, ok in sentinels:
        ask = Ask(qname, qtype, UDP_EDNS, 1232)
        eventually(lambda: all(ok(r) for r in (x[0] for x in compare.ask_both(world.ports_all, [ask]))),
                   timeout=60, interval=0.2, what=f"{qname} {qtype} changed on both servers")

    label_sets = names(world.everything) + [(new_ns, "svc"), ("late", new_ns, "svc"),
                                            ("l0", "north", "late", new_ns, "svc")]
    items = asks(label_sets, SEED + 2, transports=(UDP_EDNS,))
    diffs: list[Difference] = []

    def agree() -> bool:
        nonlocal diffs
        diffs = compare.compare("after updates", world.ports_all, items, world.everything, record=False)
        return not unexpected(diffs)

    try:
        eventually(agree, timeout=30, interval=1, what="both servers agree after the updates")
    except AssertionError:
        pass  # reported below, with the differences
    diffs = compare.compare("after updates", world.ports_all, items, world.everything)
    assert not unexpected(diffs), report(diffs)


# --------------------------------------------------------------------------- sync after the CRD appears


@needs_watch
def test_unsynced_servers_sync_once_the_crd_exists(unsynced: Unsynced, world: World) -> None:
    """The servers started without the CRD become ready once it exists, and agree again."""
    eventually(lambda: unsynced.coredns.ready()[0] == 200 and unsynced.mcsdns.http("/ready")[0] == 200,
               timeout=90, interval=0.5, what="/ready 200 on both servers started before the CRD")
    items = asks(names(unsynced.contract), SEED + 3, transports=(UDP_EDNS,))
    diffs = compare.compare("synced late", unsynced.ports, items, unsynced.contract)
    assert not unexpected(diffs), report(diffs)


# --------------------------------------------------------------------------- the decision list


def test_compatibility_doc_lists_exactly_the_decisions() -> None:
    """docs/compatibility.md's "Deliberate differences" table mirrors decisions.py, in order."""
    text = (ROOT / "docs" / "compatibility.md").read_text()
    section = text.split("## Deliberate differences", 1)[1].split("\n## ", 1)[0]
    ids = re.findall(r"^\|\s*`([a-z0-9-]+)`\s*\|", section, re.M)
    assert ids == [d.id for d in DECISIONS]
