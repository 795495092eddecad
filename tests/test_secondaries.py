"""Knot 3 and BIND 9 as secondaries of mcsdns: they load the zone by a TSIG-signed AXFR and answer as mcsdns does.

For the bundled example and the contract's fixture (manifests source), each secondary
transfers the zone from a running `mcsdns serve --transfer-to 127.0.0.1 --tsig-key-file`
and is then asked, beside mcsdns, every question test_zonefile asks of a zone file server
(testsupport/zonecompare.py): the same records for every name and type, the CoreDNS quirks
as exactly those. The secondary's serial is mcsdns's own.
"""

from __future__ import annotations

import base64
import os
import signal
import time
import subprocess
import sys
from pathlib import Path

import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.tsig
import dns.zone
import pytest

from testsupport.churn import Churn
from testsupport.secondaries import BindSecondary, CoreDNSSecondary, KnotSecondary
from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer, http_get
from testsupport.polling import eventually
from testsupport.zonecompare import ZONE, answers_alike, ask, questions, soa_fields
from test_workers import worker_pids
from test_zonefile import print_zone

pytestmark = pytest.mark.slow  # real Knot, BIND and CoreDNS secondaries: minutes

EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SOURCES = {"example": (EXAMPLE, ()), "contract": (FIXTURES / "contract.yaml", ("--namespaces", "testns"))}
SECONDARIES = {"knot": KnotSecondary, "bind": BindSecondary, "coredns": CoreDNSSecondary}
SECRET = base64.b64encode(bytes(range(100, 132))).decode()


def transfer_flags(kind: str, key_file: Path) -> tuple[str, ...]:
    """mcsdns's transfer flags for a secondary of `kind`: with the TSIG key where it signs its requests
    (Knot, BIND); CoreDNS's `secondary` cannot, so it gets transfers by address alone."""
    key_file.write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    key = ("--tsig-key-file", str(key_file)) if SECONDARIES[kind].tsig else ()
    return ("--transfer-to", "127.0.0.1", *key)


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("kind", sorted(SECONDARIES))
def test_secondary_loads_the_zone_with_tsig_and_answers_like_mcsdns(kind: str, source: str, tmp_path: Path) -> None:
    manifests, extra = SOURCES[source]
    asked, names = questions(print_zone(manifests, *extra))
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", *extra,
                *transfer_flags(kind, tmp_path / "key")) as server:
        with SECONDARIES[kind](tmp_path / kind, server.dns_port, ("xfr-key", "hmac-sha256", SECRET)) as secondary:
            assert secondary.serial() == ask(server.dns_port, ZONE, "SOA").answer[0][0].serial
            compared = answers_alike(server.dns_port, secondary.port, asked, kind)
            assert soa_fields(server.dns_port) == soa_fields(secondary.port)
            assert compared >= 3 * names, (compared, len(asked))
        _, metrics = server.http("/metrics")
    assert 'mcsdns_transfers_total{result="axfr",type="axfr"}' in metrics or "fallback_axfr" in metrics, metrics


def test_a_secondary_with_the_wrong_key_gets_nothing(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    wrong = base64.b64encode(b"w" * 32).decode()
    with McsdnsServer("--manifests", str(EXAMPLE), "--transfer-to", "127.0.0.1", "--tsig-key-file", str(tmp_path / "key")) as server:
        knot = KnotSecondary(tmp_path / "knot", server.dns_port, ("xfr-key", "hmac-sha256", wrong), load_timeout=8)
        with pytest.raises(AssertionError, match="loading the zone"):
            with knot:
                pass
        assert "TSIG" in knot.log() or "BADSIG" in knot.log() or "failed" in knot.log(), knot.log()
        _, metrics = server.http("/metrics")
    assert 'result="badsig"' in metrics, metrics


def test_corednss_secondary_cannot_sign_so_a_keyed_primary_refuses_it(tmp_path: Path) -> None:
    """CoreDNS's `secondary` has no TSIG (its AXFR request is never signed): against mcsdns with
    `--tsig-key-file` it loads nothing, each try REFUSED as unsigned, and it keeps retrying."""
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    with McsdnsServer("--manifests", str(EXAMPLE), "--transfer-to", "127.0.0.1", "--tsig-key-file", str(tmp_path / "key")) as server:
        coredns = CoreDNSSecondary(tmp_path / "coredns", server.dns_port, ("xfr-key", "hmac-sha256", SECRET), load_timeout=3)
        with pytest.raises(AssertionError, match="loading the zone"):
            with coredns:
                pass
        _, metrics = server.http("/metrics")
    assert "masters failed to transfer" in coredns.log() and "bad xfr rcode: 5" in coredns.log(), coredns.log()  # 5: REFUSED
    assert 'mcsdns_transfers_total{result="unsigned",type="axfr"} ' in metrics, metrics
    assert 'result="axfr"' not in metrics, metrics


def test_corednss_secondary_takes_the_primary_by_address_only(tmp_path: Path) -> None:
    """`transfer from` must be an IP address: CoreDNS refuses a name at startup, so a secondary cannot follow
    a DNS name such as the headless Service `mcsdns-primaries` by itself (docs/transfers.md)."""
    coredns = CoreDNSSecondary(tmp_path / "coredns", 53, ("xfr-key", "hmac-sha256", SECRET))
    corefile = tmp_path / "Corefile"
    corefile.write_text(coredns.config("", "", "").replace("127.0.0.1:53", "localhost:53"))
    done = subprocess.run([coredns.executable, "-conf", str(corefile)], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "must specify an IP address: `localhost'" in done.stdout + done.stderr, done


def a_record(port: int, name: str) -> str | None:
    """The A answer of `name` (None: NXDOMAIN), or "?" for anything else (not there yet)."""
    reply = ask(port, name, "A")
    if reply.rcode() == dns.rcode.NXDOMAIN:
        return None
    return reply.answer[0][0].address if reply.answer else "?"


def a_set(port: int, name: str) -> set[str] | None:
    """The A addresses of `name` (None: NXDOMAIN)."""
    reply = ask(port, name, "A")
    if reply.rcode() == dns.rcode.NXDOMAIN:
        return None
    return {rd.address for rrset in reply.answer for rd in rrset}


def follow(server: McsdnsServer, secondary, churn: Churn, kind: str) -> tuple[str, set[str] | None]:
    """The churn's next change: mcsdns reloads and answers it, then the secondary reaches mcsdns's serial
    (by NOTIFY: its SOA refresh is 2 h) and answers it too. Returns (name, its A set; None: NXDOMAIN)."""
    name, expected = churn.step()
    server.signal(signal.SIGHUP)
    eventually(lambda: a_set(server.dns_port, name) == expected, timeout=10, what=f"mcsdns: {name}")
    current = ask(server.dns_port, ZONE, "SOA").answer[0][0].serial
    eventually(lambda: secondary.serial() == current, timeout=10,
               what=lambda: f"{kind} following {name} -> {expected} (serial {current}): {secondary.log()[-2000:]}")
    assert a_set(secondary.port, name) == expected
    return name, expected


def counts(metrics: str, family: str) -> dict[str, float]:
    """A counter's samples by their labels, summed over `worker` (--workers N labels each worker's)."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith(family + "{"):
            labels = ",".join(x for x in line.split("{")[1].split("}")[0].split(",") if not x.startswith("worker="))
            out[labels] = out.get(labels, 0) + float(line.split()[-1])
    return out


@pytest.mark.parametrize(("kind", "workers"), [*((kind, 1) for kind in sorted(SECONDARIES)), ("knot", 2)])
def test_secondary_follows_creates_updates_and_deletes_by_notify(kind: str, workers: int, tmp_path: Path) -> None:
    """Manifests change 12 times (testsupport/churn.py: ClusterSetIP and headless services created, updated,
    deleted); after each, mcsdns answers the change and sends NOTIFY, and the secondary (SOA refresh 2 h:
    only the NOTIFY can bring it so soon) reaches mcsdns's serial and answers every question of the zone as
    mcsdns does. Knot and BIND do it by IXFR from the journal (only their first load is a whole zone);
    CoreDNS's `secondary` asks AXFR only, so it takes the whole zone at every change, as its source says.
    With `--workers 2` each worker answers the secondary's SOA queries and transfers from its own copy of
    the journal, kept in step by the supervisor's updates (the same serials, the same differences): Knot
    still gets one AXFR and IXFR only, whichever worker each connection lands on."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    server = McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", *transfer_flags(kind, tmp_path / "key"),
                    "--workers", str(workers))
    secondary = SECONDARIES[kind](tmp_path / kind, server.dns_port, ("xfr-key", "hmac-sha256", SECRET))
    server.args += ["--notify", f"127.0.0.1:{secondary.port}"]
    with server, secondary:
        for step in range(12):
            follow(server, secondary, churn, kind)
            if step % 4 == 3:
                asked, _ = questions(print_zone(churn.path))
                answers_alike(server.dns_port, secondary.port, asked, kind)
        _, metrics = server.http("/metrics")
    assert 'mcsdns_notify_total{result="acknowledged"}' in metrics, metrics
    transfers = counts(metrics, "mcsdns_transfers_total")
    print(f"{kind}: {transfers}")
    if workers > 1:  # both workers answered the secondary
        assert len({line.split('worker="')[1].split('"')[0] for line in metrics.splitlines()
                    if line.startswith("mcsdns_transfers_total{")}) == workers, metrics
    if kind == "coredns":  # AXFR only: one whole zone per serial it reached, each after a NOTIFY it accepted
        log = secondary.log()
        loads = log.count(f"Transferred: {ZONE} from 127.0.0.1:{server.dns_port}")
        assert set(transfers) == {'result="axfr",type="axfr"'} and transfers['result="axfr",type="axfr"'] == loads, log
        assert loads >= 13 and log.count(f"Notify from 127.0.0.1 for {ZONE}: checking transfer") >= 12, log
        assert "Dropping notify" not in log, log
        return
    assert transfers.get('result="axfr",type="axfr"', 0) + transfers.get('result="fallback_axfr",type="ixfr"', 0) == 1
    assert transfers['result="ixfr",type="ixfr"'] >= 12 / 2, transfers  # NOTIFYs within 50 ms coalesce
    assert "mcsdns_ixfr_fallbacks_total{" not in metrics, metrics
    if kind == "knot":  # Knot's own word: one AXFR (the first load), then only IXFR, each of a few hundred bytes
        log = secondary.log()
        ixfr = [int(line.split(" bytes")[0].rsplit(" ", 1)[1]) for line in log.splitlines()
                if "IXFR, incoming" in line and "finished" in line]
        assert log.count("AXFR, incoming") == 2 and "AXFR-style" not in log and len(ixfr) >= 6, log[-3000:]
        print(f"knot: IXFR sizes {ixfr} bytes")
        assert max(ixfr) < 1024, ixfr


def test_with_workers_the_notify_waits_until_every_worker_serves_the_change(tmp_path: Path) -> None:
    """--workers 2: the secondary asks its SOA of any worker after a NOTIFY, so a worker that has not applied
    the change would answer the old serial and the secondary would keep its copy. With one worker stopped
    (SIGSTOP) a change reaches the supervisor (its serial moves) but no NOTIFY leaves; once the worker runs
    again and applies it, the NOTIFY goes and Knot follows it by IXFR."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    server = McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", *transfer_flags("knot", tmp_path / "key"),
                    "--workers", "2")
    knot = KnotSecondary(tmp_path / "knot", server.dns_port, ("xfr-key", "hmac-sha256", SECRET))
    server.args += ["--notify", f"127.0.0.1:{knot.port}"]

    def scrape() -> tuple[float, float, bool]:
        """(the supervisor's serial, NOTIFY sent (each try), one acknowledged); a stopped worker's part of
        /metrics waits 2 s."""
        status, metrics = http_get(server.http_port, "/metrics", timeout=10)
        assert status == 200, metrics
        notify = counts(metrics, "mcsdns_notify_total")
        return (float(next(line.split()[-1] for line in metrics.splitlines() if line.startswith("mcsdns_zone_serial "))),
                notify.get('result="sent"', 0), notify.get('result="acknowledged"', 0) >= 1)

    with server, knot:
        # The NOTIFY of the initial sync went before Knot listened: its retries end (acknowledged) first.
        serial, sent, _ = eventually(lambda: (got := scrape())[2] and got, timeout=30, what="the first NOTIFY answered")
        stopped = worker_pids(server)[1]
        os.kill(stopped, signal.SIGSTOP)
        try:
            name, expected = churn.step()
            server.signal(signal.SIGHUP)
            eventually(lambda: scrape()[0] != serial, timeout=15, what="the supervisor applying the change")
            time.sleep(1)
            assert scrape()[1] == sent, "a NOTIFY left while a worker still served the old serial"
        finally:
            os.kill(stopped, signal.SIGCONT)
        eventually(lambda: a_set(knot.port, name) == expected, timeout=10, what=lambda: f"knot: {knot.log()[-2000:]}")
        current = ask(server.dns_port, ZONE, "SOA").answer[0][0].serial
        assert knot.serial() == current and scrape()[1] > sent
    assert "AXFR-style" not in knot.log() and knot.log().count("IXFR, incoming") >= 1, knot.log()[-3000:]
    assert "NOTIFY sent before workers" not in server.log(), server.log()


def transfer_text(port: int) -> tuple[int, str]:
    """(serial, every record but the SOA, sorted) of a whole transfer of the zone from `port`, signed."""
    keyring = {dns.name.from_text("xfr-key."): dns.tsig.Key("xfr-key.", SECRET, "hmac-sha256")}
    zone = dns.zone.Zone(ZONE, relativize=False)
    query = dns.message.make_query(ZONE, "AXFR")
    query.use_tsig(keyring, next(iter(keyring)))
    dns.query.inbound_xfr("127.0.0.1", zone, query, port=port, timeout=10, lifetime=30)
    records = sorted(f"{name} {rdataset}" for name, node in zone.nodes.items() for rdataset in node
                     if rdataset.rdtype != dns.rdatatype.SOA)
    return zone.get_soa().serial, "\n".join(records)


def test_two_replicas_under_churn_each_with_a_pinned_secondary(tmp_path: Path) -> None:
    """Decision 9 as docs/transfers.md lays it out: two replicas read the same objects (one manifests file,
    each reloading on its own), each with a Knot secondary pinned to it (its address only, its NOTIFY).
    Under 8 changes and a restart of one replica, each address maps one serial to one content (a whole
    transfer of each replica is read at every step), each secondary answers as its replica, its serial
    never goes back, and the restarted replica's secondary comes back by one whole zone (an IXFR from a
    serial of the old process: `unknown`), then IXFR again."""
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    flags = ("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--transfer-to", "127.0.0.1",
             "--tsig-key-file", str(tmp_path / "key"))
    servers = [McsdnsServer(*flags), McsdnsServer(*flags)]
    knots = [KnotSecondary(tmp_path / f"knot{i}", s.dns_port, ("xfr-key", "hmac-sha256", SECRET))
             for i, s in enumerate(servers)]
    for server, knot in zip(servers, knots):
        server.args += ["--notify", f"127.0.0.1:{knot.port}"]
    contents: list[dict[int, str]] = [{}, {}]  # per address: serial -> the zone transferred at that serial
    followed: list[list[int]] = [[], []]  # per secondary: its serials, in order

    def check(i: int) -> None:
        server, knot = servers[i], knots[i]
        current = ask(server.dns_port, ZONE, "SOA").answer[0][0].serial
        eventually(lambda: knot.serial() == current, timeout=10, what=lambda: f"knot{i} at {current}: {knot.log()[-2000:]}")
        zone = transfer_text(server.dns_port)
        assert contents[i].setdefault(zone[0], zone[1]) == zone[1], f"replica {i}: serial {zone[0]} with two contents"
        followed[i].append(knot.serial())
        asked, _ = questions(print_zone(churn.path))
        answers_alike(server.dns_port, knot.port, asked, "knot")

    with servers[0], servers[1], knots[0], knots[1]:
        for step in range(8):
            name, expected = churn.step()
            for server in servers:
                server.signal(signal.SIGHUP)
            for i, server in enumerate(servers):
                eventually(lambda: a_set(server.dns_port, name) == expected, timeout=10, what=f"replica {i}: {name}")
                check(i)
            if step == 3:  # replica 1 restarts: a new process, the same address
                servers[1].stop()
                servers[1].start()
                check(1)
        _, metrics = servers[1].http("/metrics")
    for serials in followed:
        assert all(a == b or (b - a) % 2**32 < 2**31 for a, b in zip(serials, serials[1:])), serials  # never back
    log = knots[1].log()
    assert log.count("AXFR-style IXFR") == 1, log[-3000:]  # the one whole zone after the restart
    assert 'mcsdns_ixfr_fallbacks_total{reason="unknown"} 1.0' in metrics, metrics
    assert 'mcsdns_transfers_total{result="ixfr",type="ixfr"}' in metrics, metrics
    shared = set(contents[0]) & set(contents[1])
    print(f"serials seen: {len(contents[0])} and {len(contents[1])}, in both: {len(shared)}")


@pytest.mark.kube
@pytest.mark.parametrize("kind", ["knot", "coredns"])
def test_secondary_follows_changes_made_through_the_api(kind: str, testbed, fresh_namespace: str, tmp_path: Path) -> None:
    """The API source: ServiceImports and EndpointSlices created, updated and deleted in a real
    kube-apiserver; a Knot (TSIG) or CoreDNS secondary answers each change as mcsdns does, by NOTIFY,
    then every name."""
    from kube_server import ES_API, MCS, KubeServer, endpoint_slice, ensure_crd, service_import

    ensure_crd(testbed)
    ns = fresh_namespace
    server = KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--namespaces", ns, "--ns-address",
                        "127.0.0.1", *transfer_flags(kind, tmp_path / "key"))
    secondary = SECONDARIES[kind](tmp_path / kind, server.dns_port, ("xfr-key", "hmac-sha256", SECRET))
    server.args += ["--notify", f"127.0.0.1:{secondary.port}"]
    vip, web = f"vip.{ns}.svc.{ZONE}", f"web.{ns}.svc.{ZONE}"
    steps = [
        (lambda: testbed.create(service_import(ns, "vip", ["10.9.0.1"])), vip, "10.9.0.1"),
        (lambda: testbed.patch(f"{MCS}/v1beta1", "ServiceImport", ns, "vip", {"spec": {"ips": ["10.9.0.2"]}}),
         vip, "10.9.0.2"),
        (lambda: (testbed.create(service_import(ns, "web", headless=True)),
                  testbed.create(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.1", True)]))), web, "10.1.0.1"),
        (lambda: testbed.apply(endpoint_slice(ns, "web-east", "web", "east", [("10.1.0.3", True)])), web, "10.1.0.3"),
        (lambda: testbed.delete(ES_API, "EndpointSlice", ns, "web-east"), web, None),
        (lambda: testbed.delete(f"{MCS}/v1beta1", "ServiceImport", ns, "vip"), vip, None),
    ]
    with server:
        server.wait_until_ready()
        with secondary:
            for act, name, address in steps:
                act()
                eventually(lambda: a_record(server.dns_port, name) == address, timeout=10, what=f"mcsdns: {name}")
                eventually(lambda: a_record(secondary.port, name) == address, timeout=10,
                           what=lambda: f"{kind} following {name} -> {address}: {secondary.log()[-2000:]}")
            testbed.create(service_import(ns, "last", ["10.9.0.9"]))
            eventually(lambda: a_record(secondary.port, f"last.{ns}.svc.{ZONE}") == "10.9.0.9", timeout=10)
            proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--kubeconfig", str(testbed.kubeconfig_path),
                                   "--namespaces", ns, "--ns-address", "127.0.0.1"], cwd=ROOT, capture_output=True,
                                  text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            asked, _ = questions(proc.stdout)
            answers_alike(server.dns_port, secondary.port, asked)


@pytest.mark.parametrize("kind", ["bind", "knot"])
def test_with_dns_sd_a_secondary_answers_and_follows_the_browsing_names(kind: str, tmp_path: Path) -> None:
    """--dns-sd names are records of the zone (dnssd.py): a secondary that loaded the zone answers every
    browsing name for PTR, SRV, TXT, A and AAAA as mcsdns does, and after each change (by NOTIFY and IXFR)
    lists the same instances of `_http._tcp` in namespace demo."""
    churn = Churn(tmp_path / "manifests.yaml", EXAMPLE.read_text())
    server = McsdnsServer("--manifests", str(churn.path), "--ns-address", "127.0.0.1", "--dns-sd",
                    *transfer_flags(kind, tmp_path / "key"))
    secondary = SECONDARIES[kind](tmp_path / kind, server.dns_port, ("xfr-key", "hmac-sha256", SECRET))
    server.args += ["--notify", f"127.0.0.1:{secondary.port}"]
    kinds = f"_http._tcp.demo.svc.{ZONE}"

    def instances(port: int) -> set[str]:
        return {rd.target.to_text() for rrset in ask(port, kinds, "PTR").answer for rd in rrset}

    with server, secondary:
        asked, _ = questions(print_zone(churn.path, "--dns-sd"), ("A", "AAAA", "SRV", "TXT", "PTR"))
        names = {q[0] for q in asked if not q[2]}
        assert {f"b._dns-sd._udp.{ZONE}", f"_services._dns-sd._udp.demo.svc.{ZONE}", kinds,
                f"web._http._tcp.demo.svc.{ZONE}", f"db._postgres._tcp.demo.svc.{ZONE}"} <= names, names
        answers_alike(server.dns_port, secondary.port, asked, kind)
        for _ in range(4):
            name, expected = follow(server, secondary, churn, kind)
            assert instances(secondary.port) == instances(server.dns_port), name
            assert (f"{name.split('.')[0]}._http._tcp.demo.svc.{ZONE}" in instances(secondary.port)) == (expected is not None)
        asked, _ = questions(print_zone(churn.path, "--dns-sd"), ("A", "AAAA", "SRV", "TXT", "PTR"))
        answers_alike(server.dns_port, secondary.port, asked, kind)
        _, metrics = server.http("/metrics")
    assert "mcsdns_ixfr_fallbacks_total{" not in metrics, metrics
