"""What each MCS implementation writes (implementations.py), applied to the real kube-apiserver and
asked of the real CoreDNS and of mcsdns: every answer CoreDNS's, save what a decision prescribes.

The same differential machinery as test_differential.py (compare.compare, decisions.py): a
difference passes only when mcsdns gives exactly the reply a decision expects. The first
questions a user asks per implementation are checked against the answers docs/implementations.md
quotes, on both servers.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Iterator

import pytest

from mcsdns.admin.orphans import SWEEP_SECONDS
from testsupport.polling import eventually
from testsupport.testbed import ApiError

from . import compare
from .dnsclient import UDP_EDNS, Ask
from .generator import MCS, ZONE, Dataset, asks, names
from .harness import SEED, CompatServer, World
from .implementations import EXTRA_NAMES, NS, STATUSES, USER_VIEW, implementations
from .test_differential import report, unexpected

pytestmark = pytest.mark.kube

def _rdata(reply: compare.Reply) -> tuple[str, ...]:
    return tuple(sorted(line.rsplit(" ", 1)[1] for line in reply.answer))


def _user_view_holds(world: World) -> bool:
    """Every USER_VIEW question answered as listed, on both servers."""
    for _, name, qtype, rcode, want in USER_VIEW:
        ask = Ask(f"{name}.svc.{ZONE}.", qtype, UDP_EDNS, 1232)
        for replies in compare.ask_both(world.ports_all, [ask]):
            if replies[0].rcode != rcode or _rdata(replies[0]) != want:
                return False
    return True


@pytest.fixture(scope="module")
def loaded(world: World) -> Iterator[tuple[World, Dataset]]:
    ds = implementations()
    for obj in ds.objects:
        if obj["kind"] == "Namespace":
            world.apply(obj)
    for obj in ds.objects:
        if obj["kind"] != "Namespace":
            world.apply(obj)
    for obj in ds.imports():
        status = STATUSES.get((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        if status is not None:
            world.testbed.apply_status(obj, status)
    world.refresh()
    eventually(lambda: _user_view_holds(world), timeout=60, interval=0.2,
               what="both servers answer every implementation's names")
    yield world, ds


def test_statuses_were_written(loaded: tuple[World, Dataset]) -> None:
    """The statuses went through the subresource (the object's apply drops them)."""
    world, _ = loaded
    for (ns, name), status in STATUSES.items():
        got = world.testbed.get(f"{MCS}/v1beta1", "ServiceImport", ns, name)
        assert got.get("status", {}).get("conditions", []) == status.get("conditions", [])
        assert got["status"].get("clusters", []) == status.get("clusters", [])


@pytest.mark.parametrize("impl", sorted({row[0] for row in USER_VIEW}))
def test_what_a_user_gets_first(loaded: tuple[World, Dataset], impl: str) -> None:
    """The answers docs/implementations.md quotes, asked of CoreDNS and of mcsdns over UDP."""
    world, _ = loaded
    for _, name, qtype, rcode, want in (row for row in USER_VIEW if row[0] == impl):
        ask = Ask(f"{name}.svc.{ZONE}.", qtype, UDP_EDNS, 1232)
        coredns, mine = (r[0] for r in compare.ask_both(world.ports_all, [ask]))
        assert (coredns.rcode, _rdata(coredns)) == (rcode, want), f"CoreDNS {name} {qtype}: {coredns.short()}"
        assert (mine.rcode, _rdata(mine)) == (rcode, want), f"mcsdns {name} {qtype}: {mine.short()}"


def test_every_name_form_same_answers(loaded: tuple[World, Dataset]) -> None:
    """Every name form x type x transport of every implementation's objects, all namespaces."""
    world, ds = loaded
    items = asks(names(ds) + EXTRA_NAMES, SEED + 5)
    diffs = compare.compare("MCS implementations", world.ports_all, items, ds)
    assert not unexpected(diffs), report(diffs)


def test_explain_names_the_orphan_slice_and_the_import_status(loaded: tuple[World, Dataset]) -> None:
    """/explain on the world's mcsdns: a slice without its import, and an import its controller calls not Ready."""
    import json
    import urllib.parse

    world, _ = loaded

    def explain(name: str) -> dict:
        status, body = world.mcsdns_all.http("/explain?" + urllib.parse.urlencode({"name": name}))
        assert status == 200, body
        return json.loads(body)

    lh = NS["lighthouse"]
    orphan = explain(f"orphan.{lh}.svc.{ZONE}")
    assert orphan["rcode"] == "NXDOMAIN" and orphan["reason"].startswith(
        f"no ServiceImport orphan in namespace {lh} (1 EndpointSlice(s) are labelled "
        f"multicluster.kubernetes.io/service-name=orphan: {lh}/"), orphan
    assert orphan["reason"].endswith("; they answer nothing until the import exists)"), orphan
    # The log says the same once, within two sweeps (mcsdns/admin/orphans.py), and never again.
    eventually(lambda: orphan["reason"] in world.mcsdns_all.log(), timeout=3 * SWEEP_SECONDS + 5, interval=0.2,
               what=lambda: world.mcsdns_all.log()[-2000:])
    time.sleep(SWEEP_SECONDS + 1)
    assert world.mcsdns_all.log().count(f"no ServiceImport orphan in namespace {lh}") == 1
    fresh = explain(f"fresh.{NS['mcs-api']}.svc.{ZONE}")
    assert fresh["rcode"] == "NOERROR" and fresh["answer"] == []
    assert fresh["reason"].endswith("the import is not Ready (Pending: waiting for the derived Service's IP): its "
                                    "status.conditions, written by the MCS controller; answers never depend on them "
                                    "(decision 14)")


def _accepted(api, obj: dict) -> bool:
    try:
        api.apply(obj)
        return True
    except ApiError as err:
        if err.status == 422:
            return False
        raise


def test_one_ip_per_source_cluster_beyond_the_mcs_api_limit(loaded: tuple[World, Dataset]) -> None:
    """The AWS Cloud Map controller's shape with three clusters, on a CRD without the mcs-api CRD's
    `maxItems: 2` on spec.ips: CoreDNS answers all three IPs, and so must mcsdns (decision 12: never
    refuse an object for what DNS can serve). The v0.5.0 CRD is restored afterwards."""
    world, _ = loaded
    api, ns = world.testbed, NS["aws"]
    crd = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "serviceimports.multicluster.x-k8s.io")
    for version in crd["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ips"].pop("maxItems", None)
    crd["metadata"] = {"name": crd["metadata"]["name"]}
    crd.pop("status", None)
    three = {"apiVersion": f"{MCS}/v1alpha1", "kind": "ServiceImport", "metadata": {"name": "three", "namespace": ns},
             "spec": {"type": "ClusterSetIP", "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
                      "ips": ["10.100.1.3", "10.100.2.3", "10.100.3.3"]}}
    try:
        api.apply(crd)
        eventually(lambda: _accepted(api, three), timeout=30, interval=0.2,
                   what="the CRD without maxItems accepts three IPs")
        world.refresh()
        want = ("10.100.1.3", "10.100.2.3", "10.100.3.3")
        ask = Ask(f"three.{ns}.svc.{ZONE}.", "A", UDP_EDNS, 1232)
        eventually(lambda: all(_rdata(r[0]) == want for r in compare.ask_both(world.ports_all, [ask])), timeout=30,
                   interval=0.2,
                   what="both servers answer the three IPs")
        items = asks([("three", ns, "svc"), ("_http", "_tcp", "three", ns, "svc")], SEED + 6)
        diffs = compare.compare("one IP per cluster", world.ports_all, items, None)
        assert not unexpected(diffs), report(diffs)
    finally:
        api.delete(f"{MCS}/v1alpha1", "ServiceImport", ns, "three")
        api.install_crd("v0.5.0")
    restored = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd["metadata"]["name"])
    assert {v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["ips"].get("maxItems")
            for v in restored["spec"]["versions"]} == {2}


def test_the_docs_table_is_the_fixture_list() -> None:
    """docs/implementations.md quotes USER_VIEW row for row (NODATA: NOERROR without records)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "implementations.md").read_text()
    section = text.split("## What a user gets first", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([a-z-]+) \| `([^`]+)` \| ([A-Z]+) \| ([^|]+) \|$", section, re.M)
    want = [(impl, name, qtype, ", ".join(answers) if answers else "NODATA")
            for impl, name, qtype, rcode, answers in USER_VIEW if rcode == "NOERROR"]
    assert len(want) == len(USER_VIEW)
    assert [(i, n, t, a.strip()) for i, n, t, a in rows] == want


def test_ips_from_slices_answers_an_import_without_ips_and_changes_nothing_else(
        loaded: tuple[World, Dataset]) -> None:
    """--ips-from-slices (decision 13, off by default; test_every_name_form_same_answers holds the
    default to CoreDNS): on another mcsdns over the same API, Lighthouse's `nginx` (ClusterSetIP,
    empty spec.ips) answers its slices' ready address; every other answer of every implementation,
    each name form x type x transport, stays CoreDNS's."""
    world, ds = loaded
    lh = NS["lighthouse"]
    nginx = f"nginx.{lh}.svc.{ZONE}"
    with CompatServer(world.testbed, world.workdir, "ips-from-slices", "--ips-from-slices") as on:
        ports = (world.coredns.blocks[0].port, on.dns_port)
        coredns, mine = (r[0] for r in compare.ask_both(ports, [Ask(f"{nginx}.", "A", UDP_EDNS, 1232)]))
        assert (coredns.rcode, _rdata(coredns)) == ("NOERROR", ())  # CoreDNS: NODATA
        assert (mine.rcode, _rdata(mine)) == ("NOERROR", ("10.43.0.5",)), mine.short()  # cluster2's is not ready
        srv = compare.ask_both(ports, [Ask(f"_http._tcp.{nginx}.", "SRV", UDP_EDNS, 1232)])[1][0]
        assert _rdata(srv) == (f"{nginx}.",) and "10.43.0.5" in " ".join(srv.additional), srv.short()
        diffs = compare.compare("--ips-from-slices", ports, asks(names(ds) + EXTRA_NAMES, SEED + 7), ds, tally=None,
                                record=False)
        changed = {d.ask.qname.lower().rstrip(".") for d in unexpected(diffs)}
        assert changed and all(q.endswith(nginx) for q in changed), report(diffs)
        # A slice change reaches the answer: cluster2's endpoint turns ready, then back.
        slice2 = next(o for o in ds.objects if o["kind"] == "EndpointSlice" and o["metadata"]["name"] == "nginx-cluster2-5xq2w")
        ready2 = {**slice2, "endpoints": [{**slice2["endpoints"][0], "conditions": {"ready": True}}]}

        def nginx_a() -> tuple[str, ...]:
            return _rdata(compare.ask_both(ports, [Ask(f"{nginx}.", "A", UDP_EDNS, 1232)])[1][0])
        try:
            world.testbed.apply(ready2)
            eventually(lambda: nginx_a() == ("10.43.0.5", "10.44.0.7"), timeout=10, interval=0.2, what="cluster2's address")
        finally:
            world.testbed.apply(slice2)
        eventually(lambda: nginx_a() == ("10.43.0.5",), timeout=10, interval=0.2, what="cluster2's address gone again")
        status, body = on.http("/explain?name=" + nginx)
        assert status == 200 and "its spec.ips are empty, so (--ips-from-slices) the ready addresses of " \
            "EndpointSlice(s) nginx-cluster1-5xq2w (cluster1)" in json.loads(body)["reason"], body
    status, body = world.mcsdns_all.http("/explain?name=" + nginx)  # off: says what the flag would answer
    assert status == 200 and json.loads(body)["reason"].startswith(
        f"the name exists (ServiceImport {lh}/nginx) but has no IPv4 address: spec.ips are empty; its EndpointSlice(s) "
        "nginx-cluster1-5xq2w (cluster1) have ready addresses, which --ips-from-slices would answer"), body
