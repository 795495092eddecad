"""The README's dig walk-through and docs/operate.md's "What is imported here?", run for real
against `mcsdns serve` (bundled examples).

Each `$ dig ...` line of the walk-through is executed with the test server's
port and its output compared with the lines the document shows (the random
message ID excepted), so the documentation cannot drift from the server.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.mcsdnsserver import ROOT, McsdnsServer
from testsupport.polling import eventually
from testsupport.testbed import stop_popen


def walkthrough(title: str = "## A dig walk-through", page: str = "README.md") -> list[tuple[str, list[str]]]:
    text = (ROOT / page).read_text()
    section = text.split(title, 1)[1].split("```", 2)[1]
    steps: list[tuple[str, list[str]]] = []
    for line in section.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line)
    return steps


def test_walkthrough_is_not_empty():
    assert len(walkthrough()) >= 5


@pytest.fixture(scope="module")
def server():
    with McsdnsServer() as s:
        yield s


@pytest.mark.parametrize("command, expected", walkthrough(), ids=lambda v: v if isinstance(v, str) else "")
def test_readme_dig_examples(server, command, expected):
    if shutil.which("dig") is None:
        pytest.fail("dig is not installed (apt-get install bind9-dnsutils; .ci/run installs it)")
    command = command.replace("-p 5353", f"-p {server.dns_port}")
    out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=10, cwd=ROOT).stdout
    got = [re.sub(r"id: \d+", "id: N", line) for line in out.splitlines() if line.strip()]
    want = [re.sub(r"id: \d+", "id: N", line) for line in expected]
    assert sorted(got) == sorted(want)  # record order is unspecified


DISCOVERY = "## What is imported here?"
OPERATE = "docs/operate.md"


def test_discovery_walkthrough_is_not_empty():
    commands = [command.split()[0] for command, _ in walkthrough(DISCOVERY, OPERATE)]
    assert {"curl", "mcsdns", "dig"} <= set(commands) and len(commands) >= 6


@pytest.fixture(scope="module")
def dnssd_server():
    with McsdnsServer("--dns-sd") as s:
        yield s


@pytest.mark.parametrize("command, expected", walkthrough(DISCOVERY, OPERATE), ids=lambda v: v if isinstance(v, str) else "")
def test_readme_discovery_examples(dnssd_server, command, expected):
    """docs/operate.md's "What is imported here?" walk-through: curl, `mcsdns imports/explain` (this checkout's) and dig."""
    for tool in ("curl", "dig"):
        if command.startswith(tool) and shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (.ci/run installs it)")
    admin = f"127.0.0.1:{dnssd_server.http_port}"
    command = command.replace("-p 5353", f"-p {dnssd_server.dns_port}").replace("127.0.0.1:9153", admin)
    command = re.sub(r"^mcsdns (.*)$", rf"{sys.executable} -m mcsdns \1 --server http://{admin}", command)
    out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = [line for line in out.stdout.splitlines() if line.strip()]
    assert sorted(got) == sorted(expected)  # record order is unspecified


def test_readme_stays_a_three_minute_read():
    """At most 220 lines and no prose paragraph over 120 words: the evidence lives in docs/ and
    benchmarks/results/, the README links to it (code blocks, tables and list items aside)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    long = [p[:60] for p in re.split(r"\n\s*\n", prose)
            if not p.lstrip().startswith(("|", "#", "<!--", "- ")) and len(p.split()) > 120]
    assert long == []


def test_docs_index_lists_every_page():
    """docs/README.md sorts every page of docs/ under Guide, Reference or Evidence."""
    index = (ROOT / "docs" / "README.md").read_text()
    sections = re.split(r"^## ", index, flags=re.M)[1:]
    assert [s.split(":", 1)[0] for s in sections] == ["Guide", "Reference", "Evidence"]
    linked = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages - linked == set(), "docs/README.md does not list these pages"


# --------------------------------------------------------------------------- the first command

EXTERNALLY_MANAGED_PYTHON = Path("/usr/bin/python3")  # a distribution's own Python (Debian's on the CI image)


def first_command() -> str:
    """The README's "Run the server" command, as written."""
    text = (ROOT / "README.md").read_text()
    return text.split("**Run the server**", 1)[1].split("```", 2)[1].strip()


def _externally_managed(python: Path) -> bool:
    if not python.exists():
        return False
    stdlib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True, timeout=30).stdout.strip()
    return (Path(stdlib) / "EXTERNALLY-MANAGED").is_file()


@pytest.mark.slow
def test_the_first_command_works_on_an_externally_managed_python(tmp_path: Path) -> None:
    """The README's first command, as written, on a fresh copy of the tracked files, with `python3` a
    distribution's Python that refuses `pip install` into itself (PEP 668); then it answers the dig
    walk-through's first question. The server runs in a network namespace of its own, so its fixed
    127.0.0.1:5353 is free whatever else this machine runs; every step before it in the host's (PyPI)."""
    if not _externally_managed(EXTERNALLY_MANAGED_PYTHON):
        pytest.skip(f"{EXTERNALLY_MANAGED_PYTHON} is not an externally managed Python (PEP 668); Debian 12's is")
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None or shutil.which("dig") is None:
        pytest.skip("needs root, unshare, nsenter and dig (the server runs in a network namespace of its own)")
    src = tmp_path / "mcsdns"
    for name in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(EXTERNALLY_MANAGED_PYTHON)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV", "PYENV"))}
    env["PATH"] = f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"

    refused = subprocess.run("python3 -m pip install -e .", shell=True, cwd=src, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr

    *install, serve = first_command().split(" && ")
    assert serve == ".venv/bin/mcsdns serve", first_command()
    done = subprocess.run(" && ".join(install), shell=True, cwd=src, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]

    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(["unshare", "-n", "sh", "-c", f'ip link set lo up && exec {serve}'], cwd=src, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        dig = ["nsenter", "-t", str(proc.pid), "-n", "dig", "@127.0.0.1", "-p", "5353", "+short", "+time=1", "+tries=1",
               "web.demo.svc.clusterset.local"]
        eventually(lambda: proc.poll() is None
                   and subprocess.run(dig, capture_output=True, text=True).stdout.split() == ["10.96.10.10"],
                   timeout=60, what=lambda: (tmp_path / "serve.log").read_text())
    finally:
        stop_popen(proc, 10)
        log.close()
    text = (tmp_path / "serve.log").read_text()
    assert "WARNING" not in text and "Traceback" not in text, text
