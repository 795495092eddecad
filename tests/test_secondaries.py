"""Knot 3 and BIND 9 as secondaries of mcsdns: they load the zone by a TSIG-signed AXFR and answer as mcsdns does.

For the bundled example and the contract's fixture (manifests source), each secondary
transfers the zone from a running `mcsdns serve --transfer-to 127.0.0.1 --tsig-key-file`
and is then asked, beside mcsdns, every question test_zonefile asks of a zone file server
(testsupport/zonecompare.py): the same records for every name and type, the CoreDNS quirks
as exactly those. The secondary's serial is mcsdns's own.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from testsupport.secondaries import BindSecondary, KnotSecondary
from testsupport.serverproc import FIXTURES, ROOT, Server
from testsupport.zonecompare import ZONE, answers_alike, ask, questions, soa_fields
from test_zonefile import print_zone

EXAMPLE = ROOT / "mcsdns" / "examples" / "clusterset.yaml"
SOURCES = {"example": (EXAMPLE, ()), "contract": (FIXTURES / "contract.yaml", ("--namespaces", "testns"))}
SECONDARIES = {"knot": KnotSecondary, "bind": BindSecondary}
SECRET = base64.b64encode(bytes(range(100, 132))).decode()


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("kind", sorted(SECONDARIES))
def test_secondary_loads_the_zone_with_tsig_and_answers_like_mcsdns(kind: str, source: str, tmp_path: Path) -> None:
    manifests, extra = SOURCES[source]
    (tmp_path / "key").write_text(f"xfr-key:hmac-sha256:{SECRET}\n")
    asked, names = questions(print_zone(manifests, *extra))
    with Server("--manifests", str(manifests), "--ns-address", "127.0.0.1", *extra, "--transfer-to", "127.0.0.1",
                "--tsig-key-file", str(tmp_path / "key")) as server:
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
    with Server("--manifests", str(EXAMPLE), "--transfer-to", "127.0.0.1", "--tsig-key-file", str(tmp_path / "key")) as server:
        knot = KnotSecondary(tmp_path / "knot", server.dns_port, ("xfr-key", "hmac-sha256", wrong), load_timeout=8)
        with pytest.raises(AssertionError, match="loading the zone"):
            with knot:
                pass
        assert "TSIG" in knot.log() or "BADSIG" in knot.log() or "failed" in knot.log(), knot.log()
        _, metrics = server.http("/metrics")
    assert 'result="badsig"' in metrics, metrics
