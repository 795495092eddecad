"""In CI (CI=true) a test that would skip fails with its reason (tests/conftest.py); elsewhere it skips.

A real pytest run in a subprocess, with the suite's conftest loaded as a plugin, on a
file whose tests skip the two ways the suite does (pytest.skip in a test or fixture,
a skipif mark).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.mcsdnsserver import ROOT

PROBE = '''
import pytest

@pytest.fixture
def unicorn():
    pytest.skip("needs a unicorn (apt-get install unicorn)")

def test_needs_a_unicorn(unicorn):
    pass

@pytest.mark.skipif(True, reason="needs a pony")
def test_needs_a_pony():
    pass

def test_runs():
    pass
'''


def run_probe(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    # The suite's conftest (tests/) and the test-support package it imports (the repository root).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         str(tmp_path / "test_probe.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_in_ci_a_skip_fails_with_its_reason(tmp_path: Path) -> None:
    result = run_probe(tmp_path, "true")
    assert result.returncode != 0, result.stdout
    assert "needs a unicorn (apt-get install unicorn)" in result.stdout
    assert "needs a pony" in result.stdout
    assert "CI=true runs every test" in result.stdout
    assert "1 passed" in result.stdout and "skipped" not in result.stdout.splitlines()[-1], result.stdout


@pytest.mark.slow
def test_outside_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    for ci in (None, "", "false"):
        result = run_probe(tmp_path, ci)
        assert result.returncode == 0, result.stdout
        assert "1 passed, 2 skipped" in result.stdout.splitlines()[-1], result.stdout
