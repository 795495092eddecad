"""`mcsdns serve --flags-file PATH`: serve flags read from a file (the Deployment's ConfigMap).

The file holds one flag, or `--flag value`, per line (several per line also parse: each line is
split like a shell would), `#` starts a comment, quotes keep spaces in a value. The flags take
effect where `--flags-file` stands on the command line: a later flag wins over an earlier one, so
command-line flags after it win over the file's. A repeatable flag (`--listen`, `--zone`, ...)
collects its values within one source (the command line before the file, the file, the command
line after it), and a later source that gives it replaces the earlier list: `--listen` on the
command line moves the server off the file's address instead of adding a second one.

Each line is parsed on its own by the real `serve` flags (options.py), so a bad line is refused
with its file and line number, before anything starts; `cli.main` turns `FlagsFileError` into a
usage error (exit 2).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .options import add_arguments

FLAG = "--flags-file"


class FlagsFileError(ValueError):
    """A flags file that cannot be read or holds a bad line; the message names the file and line."""


class _Refused(Exception):
    """argparse's complaint about one line, raised instead of exiting."""


class _LineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit: the caller says where instead
        raise _Refused(message)


def _parser(allow_abbrev: bool) -> argparse.ArgumentParser:
    """The serve flags with no defaults: a parsed namespace holds only the flags actually given."""
    parser = _LineParser(prog="mcsdns serve", add_help=False, allow_abbrev=allow_abbrev,
                         argument_default=argparse.SUPPRESS)
    add_arguments(parser, grouped=False, defaults=False)
    return parser


def read(path: str, origins: dict[str, str] | None = None) -> dict[str, object]:
    """The flags of the file at `path` as {dest: value}, only those it sets; FlagsFileError if bad.

    `origins`, when given, gets {flag: "--flags-file PATH, line N (LINE)"} for each flag the file sets
    (a repeatable flag: its last line), so a value refused later (out of range) can name its line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FlagsFileError(f"{FLAG} {path}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    parser = _parser(allow_abbrev=False)  # a file names every flag in full
    namespace = argparse.Namespace()
    for number, line in enumerate(text.splitlines(), 1):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:  # an unclosed quote
            raise FlagsFileError(f"{FLAG} {path}, line {number} ({line.strip()}): {exc}") from None
        if not tokens:
            continue
        if tokens[0].split("=", 1)[0] == FLAG:
            raise FlagsFileError(f"{FLAG} {path}, line {number}: a flags file cannot name another one")
        if not tokens[0].startswith("--"):
            raise FlagsFileError(f"{FLAG} {path}, line {number}: {tokens[0]!r} is not a flag "
                                 "(one flag, or `--flag value`, per line)")
        try:
            parser.parse_args(tokens, namespace=namespace)  # repeatable flags collect across lines
            this_line = parser.parse_args(tokens)  # what this line alone sets
        except _Refused as exc:
            raise FlagsFileError(f"{FLAG} {path}, line {number} ({line.strip()}): {exc}") from None
        if origins is not None:
            flags = _flags(parser)
            for dest in vars(this_line):
                origins[flags[dest]] = f"{FLAG} {path}, line {number} ({line.strip()})"
    return vars(namespace)


def _flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{dest: its long flag} of the parser's options."""
    return {action.dest: action.option_strings[-1] for action in parser._actions if action.option_strings}


def resolve(serve_argv: list[str], defaults: argparse.Namespace) -> tuple[argparse.Namespace, dict[str, str]]:
    """`serve`'s argv (already parsed once, so its own flags are valid) with every flags file read in
    place, and {flag: the file and line} of each flag whose value a file set.

    `defaults` is what `serve` parses from no flags at all; each source's flags replace what the
    sources before it set, a repeatable flag's whole list included.
    """
    values: dict[str, object] = {}
    origins: dict[str, str] = {}
    cli = _parser(allow_abbrev=True)  # as argparse read the command line
    segment: list[str] = []
    tokens = iter(serve_argv)
    for token in tokens:
        name, eq, inline = token.partition("=")
        if not (len(name) > 2 and FLAG.startswith(name)):  # argparse took an unambiguous prefix too
            segment.append(token)
            continue
        _given_here(_cli_values(cli, segment), values, origins, cli)
        segment = []
        values.update(read(inline if eq else next(tokens), origins))
    _given_here(_cli_values(cli, segment), values, origins, cli)
    return argparse.Namespace(**{**vars(defaults), **values}), origins


def _given_here(given: dict[str, object], values: dict[str, object], origins: dict[str, str],
                parser: argparse.ArgumentParser) -> None:
    """Command-line flags replace earlier values and their file origins."""
    values.update(given)
    flags = _flags(parser)
    for dest in given:
        origins.pop(flags[dest], None)


def _cli_values(parser: argparse.ArgumentParser, segment: list[str]) -> dict[str, object]:
    if not segment:
        return {}
    try:
        return vars(parser.parse_args(segment))
    except _Refused as exc:  # not expected: the whole command line parsed already
        raise FlagsFileError(str(exc)) from None
