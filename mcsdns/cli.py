"""argv -> Config -> a running App. The only place that picks exit codes.

Exit codes: 0 clean stop, 1 runtime failure (e.g. a port in use), 2 bad flags
or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from . import __version__, dispatch
from .config import Config, ConfigError
from .flagsfile import FlagsFileError, resolve
from .options import add_arguments, config_values

log = logging.getLogger("mcsdns")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcsdns", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"mcsdns {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "serve",
        help="serve the clusterset.local zone",
        description="Serve the Kubernetes Multi-Cluster Services DNS zone (clusterset.local) over UDP and TCP, "
        "from manifest files or a live cluster. Option names follow CoreDNS's kubernetes plugin where one exists.",
    )
    add_arguments(s)  # every flag, declared once in options.py
    s.add_argument_group("configuration").add_argument(
        "--flags-file", metavar="PATH",
        help="read serve flags from this file (one flag, or `--flag value`, per line; '#' comments), in its place "
        "on the command line: flags after it win (a repeatable flag given after it replaces the file's values)")
    from .zonefile import add_arguments as zone_arguments

    zone_arguments(sub.add_parser(
        "zone", help="print the zone as an RFC 1035 zone file",
        description="Print the clusterset zone as an RFC 1035 zone file: every record mcsdns would answer, compiled "
        "from manifests (or one list of the Kubernetes API) exactly as `serve` compiles them. Names that exist only "
        "by CoreDNS's rules (pod.<zone>, namespaces without services) have no records and are not printed."))
    from .client import add_parsers

    add_parsers(sub)  # `imports` and `explain`: clients of a running server's admin API
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    """The parsed `serve` flags -> a validated Config (ConfigError names the flag, value and range)."""
    values = config_values(args)
    in_cluster = values["kubeconfig"] is None and not values["manifests"] and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    return Config(in_cluster=in_cluster, **values).validate()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.command == "serve" and args.flags_file is not None:
        try:
            args = resolve(argv[argv.index("serve") + 1:], parser.parse_args(["serve"]))
        except FlagsFileError as exc:
            parser.error(str(exc))  # exits 2 with usage and the file, line and reason
    if args.command == "zone":
        from .zonefile import main as zone_main

        return zone_main(args, parser)
    run = getattr(args, "run", None)
    if run is not None:  # a client subcommand: no server config
        return run(args)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        parser.error(str(exc))  # exits 2 with usage and the message
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log.info("mcsdns %s serving %s from %s", __version__, ", ".join(config.zones), config.describe_source())
    try:
        if config.workers > 1:
            from .supervisor import supervise

            return supervise(config, _run_loop)
        _run_loop(_serve(config))
    except ConfigError as exc:  # found while starting, e.g. an --upstream that is this server (a loop)
        log.error("cannot start: %s", exc)
        return 2
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    except SourceFailed as exc:
        log.error("stopped after a failure: %s", exc)
        return 1
    return 0


def _run_loop(main_coro) -> None:
    """asyncio.run on dispatch.py's loop (UDP readers called from the selector), or on uvloop when
    MCSDNS_LOOP=uvloop and it is installed (measured: docs/performance.md)."""
    if os.environ.get("MCSDNS_LOOP", "").lower() == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("MCSDNS_LOOP=uvloop but uvloop is not installed: using asyncio's default loop")
        else:
            return uvloop.run(main_coro)
    with asyncio.Runner(loop_factory=dispatch.new_loop) as runner:  # asyncio.run, on dispatch.py's loop
        return runner.run(main_coro)


async def _serve(config: Config) -> None:
    from .app import App

    app = App(config)
    loop = asyncio.get_running_loop()
    signals = {"count": 0}

    def on_stop() -> None:
        signals["count"] += 1
        if signals["count"] > 1:
            log.warning("second signal: exiting now")
            os._exit(1)
        app.stop_event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop)
    loop.add_signal_handler(signal.SIGHUP, app.reload)
    await app.run()
    if app.failure is not None:
        raise SourceFailed(f"{type(app.failure).__name__}: {app.failure}")


class SourceFailed(RuntimeError):
    """A root task (the source) died after start-up; the process exits 1."""


if __name__ == "__main__":
    sys.exit(main())
