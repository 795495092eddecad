"""argparse types and flags the benchmark commands share, so a rate means the same thing to every one of them."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .queries import MIXES


def rate(text: str) -> float:
    """A q/s flag: a finite number >= 0 (0: that run is skipped), or argparse's usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"a rate is a finite number of queries per second >= 0, not {text!r}")
    return value


def rates(text: str) -> tuple[float, ...]:
    """Comma-separated rates, each above 0 (a fixed-rate measurement needs a load), at least one."""
    values = tuple(rate(x) for x in text.split(",") if x.strip())
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"one or more rates above 0, comma-separated, not {text!r}")
    return values


def sizes(text: str) -> tuple[int, ...]:
    """Comma-separated counts (imports per run, endpoints per headless service), each a whole number
    above 0, at least one: `--sizes 10k` or `0` is a usage error before any test bed starts."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"one or more whole numbers above 0, comma-separated, not {text!r}")
    return values


def count(text: str) -> int:
    """One whole number above 0 (a limit handed to the server): `4,8` or `0` is a usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"one whole number above 0, not {text!r}")
    return value


def add_sizes(parser: argparse.ArgumentParser, default: str = "1000,10000") -> None:
    """`--sizes` (ClusterSetIP imports per run) and `--out` (the figures as JSON), as the per-size
    scripts take them (`run_sizes`)."""
    parser.add_argument("--sizes", type=sizes, default=sizes(default), help="ClusterSetIP imports per run, comma-separated")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")


def run_sizes(args: argparse.Namespace, name: str, measure: Callable[[int, Path], dict[str, Any]],
              line: Callable[[int, dict[str, Any]], str], table: Callable[[list[dict[str, Any]]], str]) -> int:
    """Measure each of `args.sizes` in one temporary directory (named after the script), print a
    line per size as it ends, store the figures (`--out`), then print their markdown table."""
    figures = []
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        for size in args.sizes:
            got = measure(size, Path(tmp))
            figures.append(got)
            print(line(size, got), flush=True)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    print(table(figures))
    return 0


def mixes(text: str) -> tuple[str, ...]:
    """Comma-separated query mixes, each one `queries.MIXES` knows: a typo is a usage error before
    anything starts, not a traceback once the servers are up."""
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [n for n in names if n not in MIXES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"unknown mix {', '.join(unknown) or text!r}; known: {', '.join(MIXES)}")
    return names


def add_markdown(parser: argparse.ArgumentParser, doc: str) -> None:
    """`--markdown JSON`: print the table `doc` quotes from a stored run, and run nothing."""
    parser.add_argument("--markdown", type=Path, metavar="JSON",
                        help=f"print the table {doc} quotes from a stored run, and run nothing")


def print_markdown(parser: argparse.ArgumentParser, path: Path, render: Callable[[dict], str]) -> int:
    """The `--markdown` run: the stored run's table on stdout, or a usage error naming what is wrong with it."""
    try:
        print(render(json.loads(path.read_text())), end="")
    except (OSError, ValueError, KeyError, StopIteration) as exc:
        parser.error(f"--markdown {path}: {exc}")
    return 0
