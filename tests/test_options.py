"""Every `mcsdns serve` flag is declared once, in mcsdns/options.py, and what is made from that
declaration agrees with it: docs/flags.md's flags table and deploy/base/mcsdns.flags's flag list are
the generated ones, every Config field has exactly one flag, and the defaults the docs print are the
defaults the server gets."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from mcsdns.cli import build_parser, config_from_args
from mcsdns.config import Config
from mcsdns.options import SERVE_OPTIONS, flags_reference, helm_values_reference, readme_table
from testsupport.mcsdnsserver import ROOT


def serve(*flags: str) -> Config:
    """`mcsdns serve FLAGS` parsed and validated by the real CLI."""
    return config_from_args(build_parser().parse_args(["serve", *flags]))


def test_flags_reference_table_is_the_generated_one() -> None:
    reference = (ROOT / "docs" / "flags.md").read_text()
    assert readme_table() in reference, "docs/flags.md's flags table is stale: python -m mcsdns.options --all"


def test_flags_file_lists_every_flag_as_generated() -> None:
    text = (ROOT / "deploy" / "base" / "mcsdns.flags").read_text()
    assert flags_reference() in text, (
        "deploy/base/mcsdns.flags's flag list is stale: python -m mcsdns.options --flags-file deploy/base/mcsdns.flags")


def test_helm_values_list_every_flag_as_generated() -> None:
    """The chart's values carry the same list, as comments under `flags:` that add no list item."""
    text = (ROOT / "deploy" / "helm" / "mcsdns" / "values.yaml").read_text()
    block = helm_values_reference()
    assert block in text, (
        "deploy/helm/mcsdns/values.yaml's flag list is stale: "
        "python -m mcsdns.options --helm-values deploy/helm/mcsdns/values.yaml")
    assert all(line.startswith("  #") for line in block.splitlines())
    assert all(f"  # - {o.usage()}  (default: " in block for o in SERVE_OPTIONS)
    without = text.replace(block, "")
    assert yaml.safe_load(text)["flags"] == yaml.safe_load(without)["flags"]


def test_every_config_field_has_exactly_one_flag() -> None:
    not_flags = {"in_cluster", "extra"}  # derived from the environment; free-form
    fields = [f.name for f in dataclasses.fields(Config) if f.name not in not_flags]
    assert sorted(o.field for o in SERVE_OPTIONS) == sorted(fields)
    flags = [o.flag for o in SERVE_OPTIONS]
    assert len(set(flags)) == len(flags)


def test_no_flags_give_the_config_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert serve() == Config()


@pytest.mark.parametrize("option", SERVE_OPTIONS, ids=lambda o: o.flag)
def test_the_documented_default_is_the_default(option, monkeypatch: pytest.MonkeyPatch) -> None:
    """A default the docs show as a value (`10m`), given as that flag's value, changes nothing."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    value = re.fullmatch(r"`([^`]+)`", option.shown_default)
    if option.metavar is None or option.shown_default == "off":
        assert option.shown_default == "off" and getattr(Config(), option.field) in (False, None, "off")
    elif value:
        assert getattr(serve(f"{option.flag}={value[1]}"), option.field) == getattr(Config(), option.field)
    else:  # a description ("all", "bundled example"): the flag is not set by default
        assert getattr(Config(), option.field) in (None, ()), option.shown_default


def test_help_shows_every_flag_in_its_group(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    for option in SERVE_OPTIONS:
        section = text.split(f"\n{option.group}:\n", 1)[1].split("\n\n", 1)[0]
        assert re.search(rf"^  {re.escape(option.flag)}\b", section, re.M), option.flag
