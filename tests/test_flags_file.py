"""`mcsdns serve --flags-file PATH` through the real CLI: the container's own command.

A file's flags take effect where `--flags-file` stands (flags after it win, a repeatable flag given
after it replaces the file's values); a bad file is a usage error that names the file and the line,
exit 2, never a traceback.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mcsdns.cli import build_parser, config_from_args
from mcsdns.flagsfile import resolve
from testsupport.mcsdnsserver import ROOT, McsdnsServer
from testsupport.testbed import free_port


def serve(*argv: str):
    """The Config `mcsdns serve ARGV` runs with, flags files read, as cli.main reads them."""
    parser = build_parser()
    parser.parse_args(["serve", *argv])  # the command line itself must parse first, as in main
    return config_from_args(resolve(list(argv), parser.parse_args(["serve"]))[0])


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flags"
    path.write_text(text)
    return path


def test_the_file_sets_flags_and_later_flags_win(tmp_path: Path) -> None:
    path = write(tmp_path, "# the ConfigMap\n--listen=0.0.0.0:5353\n--ttl 30  # seconds\n\n"
                           "--zone=clusterset.local\n--zone example.local\n--log-queries\n")
    config = serve("--flags-file", str(path))
    assert config.listen == (("0.0.0.0", 5353),) and config.ttl == 30 and config.log_queries
    assert config.zones == ("clusterset.local", "example.local")  # repeated in one file: both
    config = serve("--ttl=7", f"--flags-file={path}", "--listen", "127.0.0.1:5400", "--zone", "other.local")
    assert config.ttl == 30  # the file comes after --ttl=7
    assert config.listen == (("127.0.0.1", 5400),)  # given after the file: replaces, not adds
    assert config.zones == ("other.local",)
    assert serve("--flags-file", str(path), "--ttl", "9").ttl == 9


BAD = [
    ("--ttl 30\n--bogus 1\n", "line 2", "unrecognized arguments: --bogus 1"),
    ("# one\n--listen\n", "line 2", "argument --listen: expected one argument"),
    ("--ttl abc\n", "line 1", "'abc' is not an integer"),
    ("--ttl\n30\n", "line 1", "argument --ttl: expected one argument"),
    ("ttl=30\n", "line 1", "'ttl=30' is not a flag"),
    ('--namespaces "demo\n', "line 1", "No closing quotation"),
    ("--tt 5\n", "line 1", "unrecognized arguments: --tt"),  # a file names flags in full
    ("--flags-file other\n", "line 1", "cannot name another one"),
    ("--policy fastest\n", "line 1", "invalid choice: 'fastest'"),
]


@pytest.mark.parametrize("text, line, reason", BAD, ids=[b[2] for b in BAD])
def test_a_bad_line_is_a_usage_error_naming_the_file_and_line(tmp_path: Path, text: str, line: str, reason: str) -> None:
    path = write(tmp_path, text)
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--flags-file", str(path)],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert f"--flags-file {path}, {line}" in proc.stderr and reason in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("usage:")


@pytest.mark.parametrize("content", [None, b"--ttl 5\n\xff\n"], ids=["missing", "not UTF-8"])
def test_an_unreadable_file_is_a_usage_error(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "flags"
    if content is not None:
        path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--flags-file", str(path)],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 2 and f"--flags-file {path}: cannot read it" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_value_out_of_range_in_the_file_names_the_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "--ttl 99999\n")
    proc = subprocess.run([sys.executable, "-m", "mcsdns", "serve", "--flags-file", str(path)],
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 2 and "--ttl must be in range [0, 3600]: 99999" in proc.stderr, proc.stderr


def test_a_server_started_from_a_flags_file_serves_its_flags(tmp_path: Path) -> None:
    """The file's TTL and zone; the address given after it replaces the file's, which stays unbound."""
    file_port = free_port()
    path = write(tmp_path, f"--listen=127.0.0.1:{file_port}\n--ttl=42\n--zone=clusterset.local\n--upstream=none\n")
    server = McsdnsServer()
    server.argv = [sys.executable, "-m", "mcsdns", "serve", "--flags-file", str(path),
                   f"--listen=127.0.0.1:{server.dns_port}", f"--http-listen=127.0.0.1:{server.http_port}", "--lameduck=0"]
    with server:
        reply = server.query("web.demo.svc.clusterset.local.", "A")
        assert [(rrset.ttl, rd.address) for rrset in reply.answer for rd in rrset] == [(42, "10.96.10.10")]
        assert server.query("example.org.", "A").rcode() == 5  # --upstream=none: REFUSED
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.1", file_port))  # nobody listens on the file's address
