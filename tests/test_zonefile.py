"""`mcsdns zone`: the printed zone file loads in Knot, and knotd serving it answers as mcsdns does.

For the bundled example and the contract's fixture: `knotc zone-check` accepts
the file; then knotd serves it beside `mcsdns serve` on the same manifests and
both are asked A, AAAA, SRV and TXT for every name of the file, the empty
non-terminals above them and names that do not exist. Rcode, answer and (SRV)
additional sections must be the same records, compared as sets.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.zone
import pytest
import yaml

from testsupport.serverproc import FIXTURES, ROOT, Server
from upstreams import Knot

ZONE = "clusterset.local."
EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SOURCES = {"example": (EXAMPLE, ()), "contract": (FIXTURES / "contract.yaml", ("--namespaces", "testns"))}
QTYPES = ("A", "AAAA", "SRV", "TXT")


def print_zone(manifests: Path, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--manifests", str(manifests),
                           "--ns-address", "127.0.0.1", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def records(section: list) -> set[tuple[str, str, int, str]]:
    return {(rrset.name.to_text().lower(), dns.rdatatype.to_text(rrset.rdtype), rrset.ttl, rd.to_text().lower())
            for rrset in section for rd in rrset}


def ask(port: int, name: str, qtype: str) -> dns.message.Message:
    query = dns.message.make_query(name, qtype, use_edns=0, payload=4096)
    reply = dns.query.udp(query, "127.0.0.1", port=port, timeout=2)
    if reply.flags & dns.flags.TC:
        reply = dns.query.tcp(query, "127.0.0.1", port=port, timeout=2)
    return reply


def coredns_quirk(name: str, qtype: str, empty: bool) -> bool:
    """Where CoreDNS's rules (docs/dns-contract.md) say NXDOMAIN and a zone file server NODATA.

    `empty`: the name is an empty non-terminal of the zone file. `svc.Z` and
    `<ns>.svc.Z` are NODATA in both except for TXT (NXDOMAIN in CoreDNS without
    entries, as on the apex and ns.dns.Z); every deeper empty non-terminal
    (`_<proto>.<svc>...`, `<cluster>.<svc>...`, `dns.Z`) is NXDOMAIN there:
    no name of CoreDNS's grammar. dns-version.Z exists only for TXT.
    """
    rel = name[: -len(ZONE)].rstrip(".").split(".") if name != ZONE else []
    if rel == ["dns-version"]:
        return qtype != "TXT"
    if empty and not (rel[-1:] == ["svc"] and len(rel) <= 2):
        return True
    return qtype == "TXT" and (empty or rel in ([], ["ns", "dns"]))


def test_zone_flags_errors() -> None:
    bad = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--ttl", "9999"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--ttl must be in range [0, 3600]: 9999" in bad.stderr


def test_unparsable_manifest_is_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed\n")
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--manifests", str(broken)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and str(broken) in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_zone_file_loads_in_knot_and_answers_like_mcsdns(source: str, tmp_path: Path) -> None:
    if shutil.which("knotd") is None or shutil.which("knotc") is None:
        pytest.skip("knotd/knotc not installed (apt-get install knot; .ci/run installs it)")
    manifests, extra = SOURCES[source]
    text = print_zone(manifests, *extra)
    names = sorted({n.derelativize(dns.name.from_text(ZONE)).to_text()
                    for n in dns.zone.from_text(text, origin=ZONE, relativize=False).nodes})
    assert len(names) > 5, text

    knot = Knot(tmp_path, text, domain=ZONE, probe=f"ns.dns.{ZONE}")
    check = subprocess.run(["knotc", "-c", str(tmp_path / "knot.conf"), "zone-check", ZONE],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr

    # Every name, the empty non-terminals above them, and names that exist in neither.
    questions = [(n, t, False) for n in names for t in QTYPES]
    depth = len(ZONE.split("."))
    empty = {".".join(n.split(".")[i:]) for n in names for i in range(1, len(n.split(".")) - depth + 1)} - set(names)
    questions += [(n, t, True) for n in sorted(empty) for t in ("A", "TXT")]
    questions += [(f"nothere.demo.svc.{ZONE}", "A", False), (f"svc1.nowhere.svc.{ZONE}", "SRV", False),
                  (f"x.y.{ZONE}", "AAAA", False)]
    assert any(rel.startswith("svc.") for rel in empty), empty

    with Server("--manifests", str(manifests), "--ns-address", "127.0.0.1", *extra) as server, knot:
        compared = 0
        for name, qtype, is_empty in questions:
            ours, theirs = ask(server.dns_port, name, qtype), ask(knot.port, name, qtype)
            where = f"{name} {qtype}: mcsdns {ours}\n--- knot {theirs}"
            if coredns_quirk(name, qtype, is_empty):
                assert (ours.rcode(), theirs.rcode()) == (dns.rcode.NXDOMAIN, dns.rcode.NOERROR), where
                assert not ours.answer and not theirs.answer, where
                continue
            assert ours.rcode() == theirs.rcode(), where
            assert records(ours.answer) == records(theirs.answer), where
            if qtype == "SRV":
                assert records(ours.additional) == records(theirs.additional), where
            if not ours.answer:
                assert [r.rdtype for r in ours.authority] == [r.rdtype for r in theirs.authority] == [dns.rdatatype.SOA]
            compared += 1
        # The apex SOA: the same record but for the serial (each server's own change counter).
        soas = [ask(port, ZONE, "SOA").answer for port in (server.dns_port, knot.port)]
        ours_soa, knot_soa = ({(r.ttl, rd.replace(serial=0).to_text()) for r in soa for rd in r} for soa in soas)
        assert ours_soa == knot_soa and len(ours_soa) == 1, (ours_soa, knot_soa)
        # The quirks are the few TXT and empty-non-terminal questions; everything else matched exactly.
        assert compared >= 3 * len(names), (compared, len(questions))


def test_readme_example_is_what_zone_prints() -> None:
    readme = (ROOT / "docs" / "operate.md").read_text()  # "The zone as a zone file"
    block = readme.split("$ mcsdns zone | grep '^web.demo'\n", 1)[1].split("```", 1)[0]
    printed = [line for line in print_zone(EXAMPLE).splitlines() if line.startswith("web.demo")]
    assert block.splitlines() == printed


@pytest.mark.kube
def test_zone_from_the_kubernetes_api(testbed, fresh_namespace: str) -> None:
    """`--kubeconfig`: one list of the real API, then the same records as from manifests."""
    from kube_server import endpoint_slice, ensure_crd, service_import

    ensure_crd(testbed)
    ns = fresh_namespace
    testbed.create(service_import(ns, "web", ["10.9.0.1"]))
    testbed.create(service_import(ns, "db", headless=True))
    testbed.create(endpoint_slice(ns, "db-east", "db", "east", [("10.9.1.1", True), ("10.9.1.2", False)]))
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--kubeconfig", str(testbed.kubeconfig_path),
                           "--namespaces", ns, "--ns-address", "127.0.0.1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    zone = dns.zone.from_text(proc.stdout, origin=ZONE, relativize=False)
    def rdatas(name: str, rdtype: str) -> list[str]:
        rrset = zone.get_rrset(f"{name}.{ns}.svc.{ZONE}", rdtype)
        return sorted(rd.to_text() for rd in rrset) if rrset else []
    assert rdatas("web", "A") == ["10.9.0.1"]
    assert rdatas("db", "A") == ["10.9.1.1"]  # the not-ready endpoint is in no answer
    assert rdatas("10-9-1-1.east.db", "A") == ["10.9.1.1"]
    assert rdatas("db", "SRV") == [f"0 100 80 10-9-1-1.east.db.{ns}.svc.{ZONE}"]


def test_zone_with_an_unreachable_api_fails_clearly(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--kubeconfig", str(kubeconfig), "--timeout", "2"],
                          cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "not synced" in proc.stderr and proc.stdout == ""
