"""Every runnable benchmark script answers `--help` and refuses a bad flag with usage, not a traceback.

The scripts are run by hand (docs/performance.md gives each command); a mistyped argument must get
argparse's error (exit 2), as `mcsdns serve` does, and never a ValueError from parsing argv itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                 if p.stem != "__main__" and 'if __name__ == "__main__"' in p.read_text())


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_scripts_are_found() -> None:
    assert {"compile_cost", "decode_cost", "sync_cost", "resolve_cost"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_and_a_bad_flag(script: str) -> None:
    shown = _run(f"benchmarks.{script}", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "usage:" in shown.stdout
    refused = _run(f"benchmarks.{script}", "--no-such-flag")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "usage:" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("flag", ["--common-rate", "--cost-rate"])
@pytest.mark.parametrize("value", ["-5", "nan", "inf", "fast"])
def test_a_rate_flag_refuses_what_is_not_a_rate(flag: str, value: str) -> None:
    """A negative or non-finite rate would reach dnsperf's -Q (or skip the run unnoticed): usage error."""
    refused = _run("benchmarks", "run", flag, value)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"argument {flag}" in refused.stderr and "Traceback" not in refused.stderr


def test_an_unknown_mix_is_a_usage_error() -> None:
    refused = _run("benchmarks", "run", "--mixes", "clusterset_a,no_such_mix", "--skip-scale", "--skip-propagation")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "unknown mix 'no_such_mix'" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("command", [("benchmarks.transfer_cost",), ("benchmarks.transfer_abuse",), ("benchmarks.ixfr_follow",), ("benchmarks.versions",),
                                     ("benchmarks", "run", "--skip-throughput")])
@pytest.mark.parametrize("value", ["10k", "0", "1000,-5", ","])
def test_a_sizes_flag_refuses_what_is_not_a_count(command: tuple[str, ...], value: str, tmp_path: Path) -> None:
    """`--sizes` is parsed before any test bed or server starts: a typo is argparse's usage error
    (exit 2) naming the flag, never a ValueError once a run of an hour is under way. (Should the
    check be lost, the run's report goes to a temporary directory, not over the stored results.)"""
    out = ("--out", str(tmp_path)) if command[0] == "benchmarks" else ()
    refused = _run(*command, *out, "--sizes", value)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "argument --sizes" in refused.stderr and "whole numbers above 0" in refused.stderr
    assert "Traceback" not in refused.stderr


@pytest.mark.parametrize("value", ["4,8", "0", "many"])
def test_transfer_abuse_max_transfers_is_one_count(value: str) -> None:
    """The server takes one --max-transfers: a list is a usage error, not its first value quietly used."""
    refused = _run("benchmarks.transfer_abuse", "--max-transfers", value)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "argument --max-transfers" in refused.stderr and "one whole number above 0" in refused.stderr
    assert "Traceback" not in refused.stderr
