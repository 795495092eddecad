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

from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer
from testsupport.zonecompare import ZONE, answers_alike, questions, soa_fields
from upstreams import Knot

EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SOURCES = {"example": (EXAMPLE, ()), "contract": (FIXTURES / "contract.yaml", ("--namespaces", "testns"))}


def print_zone(manifests: Path, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "zone", "--manifests", str(manifests),
                           "--ns-address", "127.0.0.1", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


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

    knot = Knot(tmp_path, text, domain=ZONE, probe=f"ns.dns.{ZONE}")
    check = subprocess.run(["knotc", "-c", str(tmp_path / "knot.conf"), "zone-check", ZONE],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr

    asked, names = questions(text)
    assert names > 5, text
    with McsdnsServer("--manifests", str(manifests), "--ns-address", "127.0.0.1", *extra) as server, knot:
        compared = answers_alike(server.dns_port, knot.port, asked)
        # The apex SOA: the same record but for the serial (each server's own change counter).
        ours_soa, knot_soa = soa_fields(server.dns_port), soa_fields(knot.port)
        assert ours_soa == knot_soa and len(ours_soa) == 1, (ours_soa, knot_soa)
        # The quirks are the few TXT and empty-non-terminal questions; everything else matched exactly.
        assert compared >= 3 * names, (compared, len(asked))


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
