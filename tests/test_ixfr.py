"""IXFR from the journal (RFC 1995, mcsdns/xfr/journal.py) and the SOA serial (decision 9), over real sockets.

dnspython's IXFR client applies what mcsdns sends to its copy of the zone, change after
change (creates, updates, deletes), and must end with exactly the zone a fresh AXFR gives:
the diffs are exact. Each reply is incremental (the client's serial in the second SOA), and
small: the IXFR for one changed service is printed and bounded, at two zone sizes. Serials
the journal has not got fall back to the whole zone, counted by reason. A restart never
lowers the serial.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset
import dns.xfr
import dns.zone
import pytest

from test_transfer import EXAMPLE, ZONE, big_manifests, contents, ixfr, printed_zone, tcp_messages, transferred
from testsupport.churn import Churn
from testsupport.mcsdnsserver import ROOT, McsdnsServer
from testsupport.polling import eventually


def addresses(server: McsdnsServer, name: str) -> set[str] | None:
    """The A addresses of `name` (None: NXDOMAIN)."""
    reply = server.query(name, "A")
    if reply.rcode() == dns.rcode.NXDOMAIN:
        return None
    return {rd.address for rrset in reply.answer for rd in rrset}


def serial(server: McsdnsServer) -> int:
    return server.query(ZONE, "SOA").answer[0][0].serial


def ixfr_done(records: list[dns.rrset.RRset]) -> bool:
    """The records so far end an IXFR reply: the third SOA of the current serial (incremental), the
    second (a whole zone), or a lone SOA (current)."""
    current = records[0][0].serial
    ends = sum(1 for r in records if r.rdtype == dns.rdatatype.SOA and r[0].serial == current)
    incremental = len(records) > 1 and records[1].rdtype == dns.rdatatype.SOA
    return ends >= (3 if incremental else 2) or len(records) == 1


def ixfr_reply(port: int, from_serial: int) -> tuple[list[dns.rrset.RRset], int]:
    """The records of the IXFR reply to `from_serial` (one per RRset) and its size on the wire."""
    messages = tcp_messages(port, ixfr(from_serial), done=ixfr_done)
    records = [rr for m in messages for rr in dns.message.from_wire(m, one_rr_per_rrset=True).answer]
    return records, sum(2 + len(m) for m in messages)


def change(server: McsdnsServer, churn: Churn, timeout: float = 10) -> str:
    """The churn's next step, reloaded by `server` (SIGHUP) and answered; returns the name it showed on."""
    name, expected = churn.step()
    server.signal(signal.SIGHUP)
    eventually(lambda: addresses(server, name) == expected, timeout=timeout, what=f"mcsdns: {name} -> {expected}")
    return name


def apply_ixfr(port: int, zone: dns.zone.Zone) -> None:
    query, _ = dns.xfr.make_query(zone)
    dns.query.inbound_xfr("127.0.0.1", zone, query, port=port, timeout=10, lifetime=30)


def gauge(metrics: str, name: str) -> float:
    """The value of an unlabelled series in a /metrics text."""
    return float(metrics.split(f"\n{name} ")[1].split()[0])


def newer(a: int, b: int) -> bool:
    """b is newer than a in RFC 1982 serial arithmetic (32 bits)."""
    return a != b and (b - a) % 2**32 < 2**31


def test_ixfr_brings_a_copy_through_creates_updates_and_deletes_exactly(tmp_path: Path) -> None:
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    with McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1") as server:
        copy, behind = transferred(server.dns_port), transferred(server.dns_port)
        serials = [copy.get_soa().serial]
        for _ in range(12):
            name = change(server, churn)
            before = copy.get_soa().serial
            records, size = ixfr_reply(server.dns_port, before)
            assert records[1].rdtype == dns.rdatatype.SOA and records[1][0].serial == before, records[:3]  # incremental
            print(f"IXFR {before} -> {records[0][0].serial} for {name}: {size} bytes, {len(records)} records")
            assert size < 1024, (name, size)
            apply_ixfr(server.dns_port, copy)
            assert copy.get_soa().serial == serial(server)
            serials.append(copy.get_soa().serial)
            assert contents(copy) == contents(transferred(server.dns_port)), name
        # A copy twelve changes behind gets them condensed into one difference, and ends the same.
        records, _ = ixfr_reply(server.dns_port, behind.get_soa().serial)
        assert [r[0].serial for r in records if r.rdtype == dns.rdatatype.SOA] == [serials[-1], serials[0], serials[-1],
                                                                                   serials[-1]]
        apply_ixfr(server.dns_port, behind)
        assert contents(behind) == contents(copy) and behind.get_soa().serial == serials[-1]
        _, metrics = server.http("/metrics")
    assert all(newer(a, b) for a, b in zip(serials, serials[1:])), serials
    # Each step read and applied, then the condensed one read and applied; not one fell back.
    assert 'mcsdns_transfers_total{result="ixfr",type="ixfr"} 26.0' in metrics, metrics
    assert "mcsdns_ixfr_fallbacks_total{" not in metrics, metrics
    assert gauge(metrics, "mcsdns_ixfr_journal_changes") >= 12, metrics  # a reload may take two serials
    assert gauge(metrics, "mcsdns_zone_serial") == serials[-1] and gauge(metrics, "mcsdns_ixfr_journal_bytes") > 0


def test_serials_the_journal_has_not_got_fall_back_to_the_whole_zone_by_reason(tmp_path: Path) -> None:
    """future (newer than ours), purged (ours, but the journal, 1 byte here, kept nothing), unknown (before
    this process's start): each the whole zone, which dnspython's client takes as a full transfer."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    with McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--ixfr-journal-bytes", "1") as server:
        first = serial(server)
        change(server, churn)
        current = serial(server)
        whole = contents(transferred(server.dns_port))
        for reason, from_serial in [("future", (current + 1000) % 2**32), ("purged", first),
                                    ("unknown", (first - 1000) % 2**32)]:
            records, _ = ixfr_reply(server.dns_port, from_serial)
            assert records[1].rdtype != dns.rdatatype.SOA and len(records) > 20, (reason, records[:3])
            if reason == "future":
                continue  # dnspython's client refuses a serial lower than its own (SerialWentBackwards)
            zone = dns.zone.Zone(ZONE, relativize=False)
            query, _ = dns.xfr.make_query(zone, serial=from_serial)
            dns.query.inbound_xfr("127.0.0.1", zone, query, port=server.dns_port, timeout=10)
            assert contents(zone) == whole and zone.get_soa().serial == current
        _, metrics = server.http("/metrics")
    for reason, n in (("future", 1), ("purged", 2), ("unknown", 2)):
        assert f'mcsdns_ixfr_fallbacks_total{{reason="{reason}"}} {n}.0' in metrics, metrics
    assert 'mcsdns_transfers_total{result="fallback_axfr",type="ixfr"} 5.0' in metrics, metrics
    assert gauge(metrics, "mcsdns_ixfr_journal_changes") == gauge(metrics, "mcsdns_ixfr_journal_bytes") == 0


def test_the_ixfr_for_one_endpoint_is_the_same_size_at_10_and_1000_imports(tmp_path: Path) -> None:
    """One endpoint added to a headless service: the IXFR holds that change only, whatever the zone's size."""
    sizes = {}
    for services in (10, 1000):
        churn = Churn(tmp_path / f"{services}.yaml", big_manifests(tmp_path, services).read_text())
        with McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1") as server:
            churn.step()  # c0 created
            name = change(server, churn, timeout=20)  # h0 created with two endpoints
            before = serial(server)
            churn.services["h0"] = churn.services["h0"].replace(
                "conditions: {ready: true}}]", "conditions: {ready: true}}, {addresses: [10.78.0.9], hostname: h0-9, "
                "conditions: {ready: true}}]")
            churn.write()
            server.signal(signal.SIGHUP)
            eventually(lambda: "10.78.0.9" in (addresses(server, name) or ()), timeout=20, what="the new endpoint")
            records, sizes[services] = ixfr_reply(server.dns_port, before)
            assert records[1][0].serial == before
            added = {r.name.to_text() for r in records if r.rdtype != dns.rdatatype.SOA}
            # The new address in the service's and its port's A sets, its SRV and the endpoint's own name.
            assert added == {name, f"_http._tcp.{name}", f"h0-9.east.{name}"}, added
    print(f"IXFR for one endpoint added: {sizes[10]} bytes at 10 imports, {sizes[1000]} at 1000")
    assert sizes[10] == sizes[1000] and sizes[10] <= 1024, sizes


def test_a_restart_never_lowers_the_serial(tmp_path: Path) -> None:
    """Decision 9: the serial is the Unix time in ms of the last change, so a process started after another
    stopped begins above the last serial it gave out, even after a burst of changes."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    server = McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1")
    seen = []
    for _ in range(3):
        with server:
            seen.append(serial(server))
            for _ in range(4):
                change(server, churn)
                seen.append(serial(server))
    assert all(newer(a, b) for a, b in zip(seen, seen[1:])), seen


def test_a_change_after_a_quiet_month_still_reads_as_newer() -> None:
    """The serial is written modulo 2**32 ms (49.7 days): after 30 days without a change, the clock's
    value would be a step RFC 1982 reads as older, and secondaries would keep the old zone. Each step
    stays below 2**31, and the clock is caught up over the next changes."""
    from mcsdns.store import Store
    from mcsdns.zone.serial import clock_serial
    from mcsdns.zone.table import Table, TableConfig

    table = Table(TableConfig((ZONE.rstrip("."),), 5, None, ("127.0.0.1",)), Store())
    month_ago = clock_serial() - 30 * 86400 * 1000
    table.set_serial(month_ago)
    seen = [month_ago]
    for _ in range(3):
        table.bump(())
        seen.append(table.serial)
    written = [s & 0xFFFFFFFF for s in seen]
    assert all(newer(a, b) for a, b in zip(written, written[1:])), written
    assert seen[-1] >= clock_serial() - 1000, "the clock was not caught up"


def test_changes_older_than_the_journal_age_are_purged(tmp_path: Path) -> None:
    """--ixfr-journal-age 1s: a change is served by IXFR at once, by the whole zone (`purged`) once older."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    with McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--ixfr-journal-age", "1s") as server:
        first = serial(server)
        change(server, churn)
        records, _ = ixfr_reply(server.dns_port, first)
        assert records[1].rdtype == dns.rdatatype.SOA and records[1][0].serial == first  # incremental
        eventually(lambda: ixfr_reply(server.dns_port, first)[0][1].rdtype != dns.rdatatype.SOA, timeout=5,
                   what="the change aged out of the journal")
        _, metrics = server.http("/metrics")
    assert 'mcsdns_ixfr_fallbacks_total{reason="purged"}' in metrics, metrics
    assert gauge(metrics, "mcsdns_ixfr_journal_changes") == 0, metrics


def test_the_docs_quote_the_stored_follow_run() -> None:
    """docs/transfers.md's table of `python -m benchmarks.ixfr_follow` is the stored run's, as rendered."""
    from benchmarks.ixfr_follow import markdown

    stored = json.loads((ROOT / "benchmarks" / "results" / "ixfr_follow.json").read_text())
    assert markdown(stored) in (ROOT / "docs" / "transfers.md").read_text()
    assert all(f["knot_transfers"]["axfr"] == 1 and f["knot_transfers"]["axfr_style_ixfr"] == 0 for f in stored)
    # The target, as the page says: one endpoint's IXFR under 1 KiB, the same at every size.
    assert len({(f["ixfr_bytes"]["min"], f["ixfr_bytes"]["max"]) for f in stored}) == 1
    assert max(f["ixfr_bytes"]["max"] for f in stored) <= 1024 and max(f["imports"] for f in stored) >= 50000
    # What the page says of the follow time: within the target up to 10,000 imports; beyond, Knot's own
    # refresh (its log) is most of it, while mcsdns's part (the IXFR answered) stays the same.
    for f in stored:
        follow, own, ixfr = f["follow_ms"], f["knot_refresh_ms"], f["breakdown_ms"]["ixfr"]["p50"]
        if f["imports"] <= 10000:
            assert follow["p50"] <= 250 and follow["max"] <= 1000, f
        else:
            assert own["p50"] >= 0.8 * (follow["p50"] - ixfr) and ixfr <= 60, f


def test_each_served_zone_gets_its_own_names_in_the_ixfr(tmp_path: Path) -> None:
    """Two forward zones share one journal: an IXFR of each brings a copy of that zone to its AXFR."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    zones = ("clusterset.local.", "mc.example.")
    with McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--zone", "clusterset.local", "--zone", "mc.example") as server:

        def whole(origin: str) -> dns.zone.Zone:
            zone = dns.zone.Zone(origin, relativize=False)
            dns.query.inbound_xfr("127.0.0.1", zone, dns.message.make_query(origin, "AXFR"), port=server.dns_port,
                                  timeout=10)
            return zone

        copies = {origin: whole(origin) for origin in zones}
        for _ in range(4):
            change(server, churn)
            for origin, copy in copies.items():
                query, _ = dns.xfr.make_query(copy)
                dns.query.inbound_xfr("127.0.0.1", copy, query, port=server.dns_port, timeout=10)
                assert contents(copy) == contents(whole(origin)) and copy.get_soa().serial == serial(server), origin
        _, metrics = server.http("/metrics")
    assert 'mcsdns_transfers_total{result="ixfr",type="ixfr"} 8.0' in metrics, metrics


def browsing(zone: dns.zone.Zone) -> set[tuple[str, str, int, str]]:
    """The DNS-SD records of a zone's contents (names with an underscore label, or the browse list)."""
    return {r for r in contents(zone) if "._" in r[0] or r[0].startswith("_") or r[0].startswith("b._dns-sd")}


@pytest.mark.parametrize("workers", [1, 2])
def test_with_dns_sd_transfers_hold_the_browsing_names_and_ixfr_follows_them(workers: int, tmp_path: Path) -> None:
    """--dns-sd adds names to the zone (dnssd.py): a transfer holds them as `mcsdns zone --dns-sd` prints them,
    and each change's IXFR carries the browsing records it changed (an instance and its PTR appear with a
    service offering `_http._tcp`, go with it), so a copy kept by IXFR alone lists what mcsdns lists. With
    --workers 2 each worker's journal takes the same browsing records from the supervisor's changes."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    with McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
                "--dns-sd", "--workers", str(workers)) as server:
        copy = transferred(server.dns_port)
        assert contents(copy) == contents(printed_zone(churn.path, "--dns-sd"))
        assert (f"b._dns-sd._udp.{ZONE}", "PTR", 5, f"demo.svc.{ZONE}") in contents(copy)
        assert (f"web._http._tcp.demo.svc.{ZONE}", "SRV", 5, f"0 0 80 web.demo.svc.{ZONE}") in contents(copy)
        seen = set()
        for _ in range(8):
            name = change(server, churn)
            before = copy.get_soa().serial
            records, size = ixfr_reply(server.dns_port, before)
            assert records[1].rdtype == dns.rdatatype.SOA and records[1][0].serial == before, records[:3]
            apply_ixfr(server.dns_port, copy)
            assert contents(copy) == contents(transferred(server.dns_port)), name
            listed = {rd.target.to_text() for rrset in server.query(f"_http._tcp.demo.svc.{ZONE}", "PTR").answer
                      for rd in rrset}
            held = {r[3] for r in browsing(copy) if r[0] == f"_http._tcp.demo.svc.{ZONE}" and r[1] == "PTR"}
            assert held == listed, (name, held, listed)
            service = name.split(".")[0]
            assert (f"{service}._http._tcp.demo.svc.{ZONE}" in listed) == (server.query(name, "A").rcode() == 0), name
            seen.add(frozenset(listed))
            print(f"IXFR for {name}: {size} bytes, {len(records)} records")
            assert size < 1024, (name, size)
    assert len(seen) >= 4, seen  # the instance list really changed along the way
