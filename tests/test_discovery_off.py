"""`--discovery=off` over real sockets: the admin port stops listing imported names.

/imports and /explain answer 404 saying discovery is off, and `mcsdns imports` /
`mcsdns explain` print that error and exit 1; /health, /ready, /metrics and DNS
are unchanged. With the flag at its default (or `on`) both routes serve as before.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import dns.rcode
import pytest

from inspection import imports
from mcsdns.config import Config, ConfigError
from testsupport.mcsdnsserver import FIXTURES, ROOT, McsdnsServer

CONTRACT = str(FIXTURES / "contract.yaml")
SVC1 = "svc1.testns.svc.clusterset.local"
ROUTES = ("/imports", f"/explain?name={SVC1}&type=A")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcsdns", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)


def _assert_off(server: McsdnsServer) -> None:
    for path in ROUTES:
        status, body = server.http(path)
        assert status == 404, (path, status, body)
        assert "discovery is off" in json.loads(body)["error"], body
        assert SVC1 not in body and "svc1" not in body
    assert server.http("/health") == (200, "OK")
    assert server.http("/ready") == (200, "OK")
    status, metrics = server.http("/metrics")
    assert status == 200 and "coredns_build_info" in metrics and "coredns_dns_requests_total" in metrics
    reply = server.query(SVC1)  # DNS is not what the flag is about
    assert reply.rcode() == dns.rcode.NOERROR and [str(r) for r in reply.answer[0]] == ["10.0.0.1"]


def test_discovery_off_answers_404_and_keeps_probes_and_metrics():
    with McsdnsServer("--manifests", CONTRACT, "--discovery", "off") as server:
        _assert_off(server)


def test_discovery_off_with_workers():
    """The supervisor serves the admin port for the workers: the flag holds there too."""
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("--workers needs SO_REUSEPORT")
    with McsdnsServer("--manifests", CONTRACT, "--discovery=off", "--workers", "2") as server:
        _assert_off(server)


def test_cli_says_discovery_is_off():
    with McsdnsServer("--manifests", CONTRACT, "--discovery=off") as server:
        url = f"http://127.0.0.1:{server.http_port}"
        for args in (("imports",), ("explain", SVC1)):
            out = _cli(*args, "--server", url)
            assert out.returncode == 1 and out.stdout == "", out
            assert "HTTP 404" in out.stderr and "discovery is off" in out.stderr, out.stderr
            assert "Traceback" not in out.stderr


@pytest.mark.parametrize("flags", [(), ("--discovery", "on")], ids=["default", "on"])
def test_discovery_on_serves_both_routes(flags):
    with McsdnsServer("--manifests", CONTRACT, *flags) as server:
        assert ("testns", "svc1") in [(e["namespace"], e["name"]) for e in imports(server)["imports"]]
        status, body = server.http(ROUTES[1])
        assert status == 200 and json.loads(body)["answer"] == [f"{SVC1}. 5 IN A 10.0.0.1"]


def test_bad_discovery_value_is_refused():
    out = _cli("serve", "--discovery", "maybe")
    assert out.returncode == 2 and "--discovery" in out.stderr and "'maybe'" in out.stderr, out.stderr
    with pytest.raises(ConfigError, match=r"--discovery must be on or off: 'yes'"):
        Config(discovery="yes").validate()
