"""The differential suite's second pass (issue 15): the opt-in flags on, the same answer sets.

A third mcsdns starts against the same kube-apiserver as the differential pair with
`--local-cluster east --reverse-cidr 10.0.0.0/8 --reverse-cidr fd00::/8`, and every question of the
first pass (the contract fixture and the generated cluster set, every name form, 11 types, UDP with
EDNS and TCP) goes to CoreDNS, to the flag-free mcsdns and to it. Compared as sets (record order,
SRV priorities and the SOA serial aside), its answers equal the flag-free mcsdns's, so they equal
CoreDNS's wherever the first pass found them equal and differ only by the documented decisions
elsewhere (test_differential.py holds those). Its own additions are checked on the same replies:
priority 0 exactly for the local cluster's SRV targets, and local addresses first.
"""

from __future__ import annotations

from collections.abc import Iterator

import dns.flags
import dns.message
import dns.rdatatype
import pytest

from testsupport.mcsdnsserver import record_sets
from testsupport.polling import eventually

from .dnsclient import TCP, UDP_EDNS, exchange
from .generator import SOURCE_CLUSTER, asks, names
from .harness import SEED, CompatServer, World

LOCAL = "east"
FLAGS = ("--local-cluster", LOCAL, "--reverse-cidr", "10.0.0.0/8", "--reverse-cidr", "fd00::/8")


@pytest.fixture(scope="module")
def flagged(world: World) -> Iterator[CompatServer]:
    server = CompatServer(world.testbed, world.workdir, "mcsdns-flags", *FLAGS, "--startup-timeout", "30s")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def sets(wire: bytes | None) -> tuple | None:
    """A reply as sets of records, SRV priority and SOA serial masked; None if there was none."""
    if wire is None:
        return None
    msg = dns.message.from_wire(wire, ignore_trailing=True)
    if msg.flags & dns.flags.TC:  # which records a truncated reply keeps depends on their order
        return (msg.rcode(), msg.flags, "truncated")
    return record_sets(msg)


def addresses_by_locality(world: World) -> tuple[set[str], set[str]]:
    """The addresses only the local cluster's slices hold, and those only other slices hold."""
    local: set[str] = set()
    other: set[str] = set()
    for sl in world.everything.of_kind("EndpointSlice"):
        cluster = (sl["metadata"].get("labels") or {}).get(SOURCE_CLUSTER)
        for ep in sl.get("endpoints") or []:
            (local if cluster and cluster.lower() == LOCAL else other).update(ep.get("addresses") or [])
    return local - other, other - local


@pytest.mark.slow
def test_flags_on_same_answer_sets_as_coredns(world: World, flagged: CompatServer) -> None:
    eventually(lambda: flagged.http("/ready")[0] == 200, 60, 0.2, what="the flagged mcsdns synced")
    questions = [ask for _, ask in asks(names(world.everything), SEED, transports=(UDP_EDNS, TCP))]
    coredns, plain, with_flags = (exchange(port, questions) for port in
                                  (world.ports_all[0], world.mcsdns_all.dns_port, flagged.dns_port))
    different, like_coredns, priorities, ordered = [], 0, 0, 0
    local, remote = addresses_by_locality(world)
    for ask, core, off, on in zip(questions, coredns, plain, with_flags):
        if sets(on) != sets(off):
            different.append(f"{ask.describe()}:\n  without flags {sets(off)}\n  with flags    {sets(on)}")
            continue
        like_coredns += sets(on) == sets(core)
        if on is None:
            continue
        msg = dns.message.from_wire(on, ignore_trailing=True)
        for rrset in msg.answer:
            if rrset.rdtype == dns.rdatatype.SRV:
                for rd in rrset:
                    rel = rd.target.to_text().lower().split(".")[:-3]  # left of clusterset.local.
                    # <svc>.<ns>.svc (a ClusterSetIP: 0) or <host>.<cluster>.<svc>.<ns>.svc (0 local, 10 remote)
                    want = 0 if len(rel) == 3 or ".".join(rel[1:-3]) == LOCAL else 10
                    assert rd.priority == want, (ask.describe(), rd.to_text())
                    priorities += 1
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) and not msg.flags & dns.flags.TC:
                got = [rd.address for rd in rrset]
                first_remote = min((i for i, ip in enumerate(got) if ip in remote), default=len(got))
                assert not any(ip in local for ip in got[first_remote:]), (ask.describe(), got)
                ordered += any(ip in local for ip in got) and first_remote < len(got)
    assert not different, f"{len(different)} of {len(questions)} answer sets changed:\n" + "\n".join(different[:20])
    print(f"\n{len(questions)} questions: every answer set with the flags on equals the flag-free one; "
          f"{like_coredns} equal CoreDNS's (the rest are the first pass's documented decisions); "
          f"{priorities} SRV priorities checked; {ordered} answers mixing local and remote addresses, local first")
    assert like_coredns > len(questions) * 0.9
    assert priorities and ordered  # the data set exercises both
