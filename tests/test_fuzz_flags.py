"""Fuzzing flags: out-of-range and malformed values make `mcsdns serve` exit 2 naming the flag and
the problem, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testsupport.mcsdnsserver import ROOT


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resync", "-1"], "--resync must be >= 0 (0 disables): -1.0"),
        (["--delete-grace", "61s"], "--delete-grace must be in range [0, 60] seconds (0: off): 61.0"),
        (["--lameduck", "400"], "--lameduck must be in range [0, 300] seconds: 400.0"),
        (["--upstream-timeout", "0"], "--upstream-timeout must be in range (0, 60] seconds: 0.0"),
        (["--max-concurrent", "0"], "--max-concurrent must be in range [1, 1000000]: 0"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "--kubeconfig /nonexistent/kubeconfig: no such file"),
        (["--namespaces", ","], "--namespaces: give at least one namespace"),
        (["--listen", "[::1"], "missing ']'"),
        (["--http-listen", "127.0.0.1:http"], "port must be 0..65535"),
        (["--zone", "a" * 64 + ".local"], "is not a valid DNS name"),
    ],
)
def test_flags_out_of_range_name_the_problem(args, message):
    result = subprocess.run([sys.executable, "-m", "mcsdns", "serve", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr

