"""The wheel `python -m build` makes installs in a clean virtual environment and serves from there.

The tracked files are copied out of the checkout (so the build leaves nothing
in it and cannot see untracked files), built into an sdist and a wheel from
that sdist, and the wheel is installed with its declared dependencies into a
new venv without the system's site-packages. Its `mcsdns serve`, started with
no --manifests, serves the bundled example from the installed package, and
its `mcsdns zone` (dnslib) prints it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from testsupport.mcsdnsserver import ROOT, McsdnsServer

pytestmark = pytest.mark.slow  # builds the sdist and wheel and installs them from PyPI into a venv


def run(*cmd: str | Path, cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build", reason="pip install build (the test extra has it)")
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    for name in run("git", "ls-files", cwd=ROOT).splitlines():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    run(sys.executable, "-m", "build", "--outdir", work / "dist", src, cwd=work)
    (wheel,) = (work / "dist").glob("mcsdns-*.whl")
    assert "mcsdns/examples/clusterset.yaml" in zipfile.ZipFile(wheel).namelist()
    env = work / "venv"
    run(sys.executable, "-m", "venv", env, cwd=work)
    run(env / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=work)
    return env


def test_installed_package_is_the_wheel(venv: Path, tmp_path: Path) -> None:
    where = run(venv / "bin" / "python", "-c", "import mcsdns, dnslib; print(mcsdns.__file__)", cwd=tmp_path)
    assert str(venv) in where and str(ROOT) not in where


def test_serve_from_the_wheel_answers_the_bundled_example(venv: Path) -> None:
    server = McsdnsServer()
    server.argv = [str(venv / "bin" / "mcsdns"), "serve", "--listen", f"127.0.0.1:{server.dns_port}",
                   "--http-listen", f"127.0.0.1:{server.http_port}", "--lameduck", "0", "--upstream", "none"]
    with server:
        assert "bundled example" in server.log()
        reply = server.query("web.demo.svc.clusterset.local.", "A")
        assert [rd.address for rrset in reply.answer for rd in rrset] == ["10.96.10.10"]
        reply = server.query("db.demo.svc.clusterset.local.", "A")
        assert sorted(rd.address for rrset in reply.answer for rd in rrset) == ["10.1.1.20", "10.2.1.20"]
        assert server.http("/ready") == (200, "OK")


def test_zone_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    text = run(venv / "bin" / "mcsdns", "zone", "--ns-address", "127.0.0.1", cwd=tmp_path)
    assert "web.demo.svc.clusterset.local. 5       IN      A       10.96.10.10" in text
