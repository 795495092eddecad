"""A newcomer's first commands, as they meet them: `mcsdns --help`, a default start, a command piped
into `head`, a port in use, `--listen HOST` without a port, a bad value in a flags file.

Each runs the real `python -m mcsdns` and checks what the user sees: its output and its exit code.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import dns.message
import dns.query
import pytest

from testsupport.mcsdnsserver import ROOT, McsdnsServer
from testsupport.polling import eventually
from testsupport.testbed import free_port

sys.path.insert(0, str(Path(__file__).parent))
from upstreams import dead_port  # noqa: E402


def mcsdns(*argv: str, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mcsdns", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kw)


def test_help_describes_the_command_not_the_module() -> None:
    proc = mcsdns("--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "DNS server for Kubernetes Multi-Cluster Services" in text
    assert "`mcsdns serve` runs the server" in text and "argv -> Config" not in text


def _started(server: McsdnsServer) -> str:
    with server:
        assert server.query("web.demo.svc.clusterset.local.", "A").answer
    return server.log()


def _with_open_files(server: McsdnsServer, limit: int, *args: str) -> McsdnsServer:
    """`server` run under an open-file limit of `limit`, the default --max-tcp-connections (20000) above it."""
    server.argv = ["prlimit", f"--nofile={limit}:{limit}", sys.executable, "-m", "mcsdns", "serve",
                   "--listen", f"127.0.0.1:{server.dns_port}", "--http-listen", f"127.0.0.1:{server.http_port}",
                   "--lameduck", "0", "--upstream", "none", *args]
    return server


def test_a_default_start_warns_about_nothing_the_user_did_not_set() -> None:
    """Under an open-file limit below the default TCP cap the cap is lowered quietly (the flag's help says
    so); a cap the operator asked for and cannot have is still a warning."""
    log = _started(_with_open_files(McsdnsServer(), 4096))
    assert "WARNING" not in log, log
    assert "does not fit the open-file limit" in log  # said, at INFO
    log = _started(_with_open_files(McsdnsServer(), 4096, "--max-tcp-connections", "10000"))
    assert "WARNING mcsdns.serve.tcp: --max-tcp-connections 10000 does not fit the open-file limit" in log, log


@pytest.fixture(scope="module")
def server():
    with McsdnsServer() as s:
        yield s


def _into_a_closed_pipe(argv: list[str]) -> subprocess.CompletedProcess:
    """`mcsdns ARGV | head` where head has already gone: stdout is a pipe whose reader is closed."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "mcsdns", *argv], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=30, cwd=ROOT)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", [["zone"], ["--help"], ["serve", "--help"], ["--version"], ["imports"],
                                  ["explain", "web.demo"], ["imports", "-o", "json"]], ids=" ".join)
def test_output_into_a_closed_pipe_ends_quietly(server: McsdnsServer, argv: list[str]) -> None:
    """As `cat` or `grep` end: by SIGPIPE (the shell shows 141), no traceback, nothing on stderr."""
    if argv[0] in ("imports", "explain"):
        argv = [*argv, "--server", f"http://127.0.0.1:{server.http_port}"]
    proc = _into_a_closed_pipe(argv)
    assert proc.returncode == -signal.SIGPIPE and proc.stderr == "", (proc.returncode, proc.stderr)


def test_zone_piped_into_head_prints_its_first_lines() -> None:
    proc = subprocess.run(f"{sys.executable} -m mcsdns zone | head -2", shell=True, capture_output=True,
                          text=True, timeout=30, cwd=ROOT, executable="/bin/bash")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines()[1] == "$ORIGIN clusterset.local."


def test_a_dns_port_in_use_is_named() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", port))
        proc = mcsdns("serve", "--listen", f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0", "--upstream", "none")
    assert proc.returncode == 1, proc.stderr
    assert f"cannot start: --listen 127.0.0.1:{port} (DNS over UDP and TCP): Address already in use" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_listen_without_a_port_listens_on_5353() -> None:
    """`--listen HOST` means HOST:5353, the documented default port, as --help and docs/flags.md say
    (another loopback address than the default's, so a server already on 127.0.0.1:5353 is no obstacle)."""
    host = "127.0.0.77"
    server = McsdnsServer()
    server.argv = [sys.executable, "-m", "mcsdns", "serve", "--listen", host, "--listen", f"127.0.0.1:{server.dns_port}",
                   "--http-listen", f"127.0.0.1:{server.http_port}", "--lameduck", "0", "--upstream", "none"]
    with server:
        reply = dns.query.udp(dns.message.make_query("web.demo.svc.clusterset.local.", "A"), host, port=5353, timeout=2)
        assert [rd.address for rrset in reply.answer for rd in rrset] == ["10.96.10.10"]
    assert "a HOST without a port listens on port 5353" in " ".join(mcsdns("serve", "--help").stdout.split())
    assert "a host without a port means port 5353" in (ROOT / "docs" / "flags.md").read_text()


def test_a_value_out_of_range_in_a_flags_file_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "flags"
    path.write_text("# the ConfigMap\n--listen=127.0.0.1:5353\n--ttl 99999\n")
    proc = mcsdns("serve", "--flags-file", str(path))
    assert proc.returncode == 2, proc.stderr
    assert f"--flags-file {path}, line 3 (--ttl 99999): --ttl must be in range [0, 3600]: 99999" in proc.stderr
    proc = mcsdns("serve", "--flags-file", str(path), "--ttl", "99998")  # given after the file: the command line's
    assert proc.returncode == 2 and "error: --ttl must be in range [0, 3600]: 99998" in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- a broken manifests file

BROKEN = "apiVersion: v1\nkind: [unclosed\n"
BROKEN_REASON = "invalid YAML/JSON at line 3: did not find expected ',' or ']'"


def imports_cli(server: McsdnsServer, *args: str) -> subprocess.CompletedProcess:
    return mcsdns("imports", "--server", f"http://127.0.0.1:{server.http_port}", *args)


def test_a_manifests_file_broken_at_start_is_named_by_ready_imports_and_the_log(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(BROKEN)
    with McsdnsServer("--manifests", str(path), "--startup-timeout", "0", wait_ready=False) as server:
        status, body = server.http("/ready")
        assert status == 503 and f"{path}: {BROKEN_REASON}" in body, body
        doc = json.loads(server.http("/imports")[1])
        assert doc["synced"] is False and f"{path}: {BROKEN_REASON}" in doc["not_synced"]
        assert doc["rejected"] == [{"kind": "File", "namespace": "", "name": str(path),
                                    "reason": f"{BROKEN_REASON}; nothing from it is served (it never loaded)"}]
        proc = imports_cli(server)
        assert proc.returncode == 1, proc
        assert f"rejected: File {path}: {BROKEN_REASON}; nothing from it is served" in proc.stdout
        assert f"mcsdns imports: the server is not synced: manifests not loaded: {path}: {BROKEN_REASON}" in proc.stderr
        assert imports_cli(server, "-o", "json").returncode == 1
        log = server.log()
    assert f"{path}: invalid YAML/JSON at line 3" in log and "nothing from it is served (it never loaded)" in log
    assert "last good" not in log, log  # there were none


def test_a_manifests_file_broken_while_running_is_listed_as_rejected(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    shutil.copy(ROOT / "mcsdns" / "examples" / "clusterset.yaml", path)
    with McsdnsServer("--manifests", str(path)) as server:
        assert imports_cli(server).returncode == 0
        path.write_text(BROKEN)
        rejected = eventually(lambda: json.loads(server.http("/imports")[1])["rejected"], timeout=10)
        assert rejected == [{"kind": "File", "namespace": "", "name": str(path),
                             "reason": f"{BROKEN_REASON}; keeping its last good objects"}]
        proc = imports_cli(server)
        assert proc.returncode == 0 and proc.stderr == "", proc  # synced: the last good objects serve
        assert f"rejected: File {path}: {BROKEN_REASON}; keeping its last good objects" in proc.stdout
        assert "web" in proc.stdout and server.http("/ready") == (200, "OK")


def test_explain_says_a_short_name_is_outside_the_zone_and_which_name_is_meant() -> None:
    with McsdnsServer("--upstream", dead_port()) as server:
        proc = mcsdns("explain", "web.demo", "--server", f"http://127.0.0.1:{server.http_port}")
    assert proc.returncode == 0, proc.stderr
    first, reason = proc.stdout.splitlines()[:2]
    assert first == "web.demo. A: forwarded (outside the zones served here)"
    assert reason.startswith("web.demo. is outside the zones served here (clusterset.local): it is forwarded")
    assert "web.demo is imported here: ask web.demo.svc.clusterset.local." in reason
