"""README and docs stand on their own in a clone: every link resolves inside the repository.

A relative link must name a file or directory of the repository (and an
`#anchor` into a Markdown file one of its headings); web links (http, https,
mailto) are fine. No text may send the reader to the project notes outside
the repository (`../shared/...`) or to an issue by number, and a "decision N"
must link the contract that numbers them (docs/dns-contract.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testsupport.mcsdnsserver import ROOT

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "deploy").rglob("*.md"),
               *(ROOT / "benchmarks" / "results").glob("*.md")])
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
WEB = ("http://", "https://", "mailto:")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def links(path: Path) -> list[tuple[int, str]]:
    text = path.read_text()
    out = []
    for m in LINK.finditer(re.sub(r"```.*?```", lambda b: "\n" * b.group().count("\n"), text, flags=re.S)):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1) or m.group(2)))
    return out


def test_docs_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/dns-contract.md", "docs/install.md", "docs/compatibility.md"} <= names


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves_inside_the_repository(path: Path) -> None:
    broken = []
    for line, target in links(path):
        if target.startswith(WEB):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if target.startswith("/") or not dest.is_relative_to(ROOT):
            broken.append((line, target, "leaves the repository"))
        elif not dest.exists():
            broken.append((line, target, "no such file"))
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append((line, target, "no such heading"))
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_reference_outside_the_repository(path: Path) -> None:
    bad = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if re.search(r"\.\./shared|\bshared/(spec|style)\b", line):
            bad.append((number, "project notes outside the repository"))
        if re.search(r"\bissues? #?\d+\b", line, re.I):
            bad.append((number, "an issue by number"))
        if re.search(r"\bdecisions? \d+", line, re.I) and "dns-contract.md" not in line \
                and path.name != "dns-contract.md":
            bad.append((number, "a decision number without a link to docs/dns-contract.md"))
    assert not bad, f"{path.relative_to(ROOT)}: {bad}"


def test_the_checks_catch_what_they_claim(tmp_path: Path) -> None:
    assert slug("7. mcs-api conformance (DNS checks, v0.5.0)") == "7-mcs-api-conformance-dns-checks-v050"
    assert "project-decisions" in anchors(ROOT / "docs" / "dns-contract.md")
    sample = tmp_path / "x.md"
    sample.write_text("[a](../shared/spec/x.md) [b](https://example.org) ![c](img.png)\n```\n[d](e)\n```\n")
    assert [t for _, t in links(sample)] == ["../shared/spec/x.md", "https://example.org", "img.png"]
