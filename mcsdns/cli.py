"""argv -> Config -> a running App. The only place that picks exit codes.

Exit codes: 0 clean stop, 1 runtime failure (e.g. a port in use), 2 bad flags
or configuration.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import re
import signal
import sys
from typing import TYPE_CHECKING

from . import __version__
from .config import Config, ConfigError, kube_settings
from .flagsfile import FlagsFileError, resolve
from .options import add_arguments, config_values, subset

if TYPE_CHECKING:
    from .sources.kube import KubeSource

log = logging.getLogger("mcsdns")


DESCRIPTION = (
    "A DNS server for Kubernetes Multi-Cluster Services: it answers the clusterset.local zone from the "
    "ServiceImports and EndpointSlices of a cluster (or of manifest files), as CoreDNS's multicluster option "
    "does. `mcsdns serve` runs the server (with no flags: the bundled example on 127.0.0.1:5353); `mcsdns zone` "
    "prints the zone; `mcsdns imports` and `mcsdns explain` ask a running server; `mcsdns follow-primary` keeps one mcsdns "
    "pod's address in a CoreDNS secondary's configuration. `mcsdns COMMAND --help` has each command's flags.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcsdns", description=DESCRIPTION)
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
    _zone_arguments(sub.add_parser(
        "zone", help="print the zone as an RFC 1035 zone file",
        description="Print the clusterset zone as an RFC 1035 zone file: every record mcsdns would answer, compiled "
        "from manifests (or one list of the Kubernetes API) exactly as `serve` compiles them. Names that exist only "
        "by CoreDNS's rules (pod.<zone>, namespaces without services) have no records and are not printed."))
    from .admin.client import add_parsers

    add_parsers(sub)  # `imports` and `explain`: clients of a running server's admin API
    from .xfr.follow import add_parser as add_follow_parser

    add_follow_parser(sub)  # `follow-primary`: a secondary's sidecar, no server config
    return parser


# `mcsdns zone` (zonefile.py) takes the source and zone flags of `serve`, declared there; the help says
# what differs for a one-off print. Declared here, not in zonefile.py, whose imports (dnslib,
# prometheus_client, the table) would otherwise delay a server's first requests to the API.
ZONE_OPTIONS = subset(
    ("--manifests", "--kubeconfig", "--context", "--labels", "--ttl", "--namespaces", "--ns-address",
     "--ips-from-slices", "--dns-sd"),
    {"--manifests": "file or directory of manifests (repeatable); default: the bundled example",
     "--kubeconfig": "list the cluster of this kubeconfig once instead",
     "--ns-address": "address(es) of ns.dns.<zone> (default: POD_IP(S), else 127.0.0.1)"},
)


def _zone_arguments(parser: argparse.ArgumentParser) -> None:
    """The `zone` subcommand's flags: the source and zone flags of `serve`, with the same meaning."""
    add_arguments(parser, ZONE_OPTIONS, grouped=False)
    parser.add_argument("--zone", metavar="NAME", default="clusterset.local", help="zone to print (default clusterset.local)")
    parser.add_argument("--timeout", metavar="SECONDS", type=float, default=30.0,
                        help="with --kubeconfig: give up if the first list is not complete after this long (default 30)")


def _zone(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`mcsdns zone`; exit codes as for serve: 0 printed, 1 the source could not be read, 2 bad flags."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        config = Config(zones=(args.zone.lower().rstrip("."),), **config_values(args, ZONE_OPTIONS)).validate()
        if not 0 < args.timeout <= 3600:
            raise ConfigError(f"--timeout must be in range (0, 3600] seconds: {args.timeout}")
    except ConfigError as exc:
        parser.error(str(exc))
    from .xfr.zonefile import ZoneSourceError, run

    try:
        run(config, sys.stdout, args.timeout)
    except ZoneSourceError as exc:
        print(f"mcsdns zone: {exc}", file=sys.stderr)
        return 1
    return 0


def config_from_args(args: argparse.Namespace) -> Config:
    """The parsed `serve` flags -> a validated Config (ConfigError names the flag, value and range)."""
    values = config_values(args)
    in_cluster = values["kubeconfig"] is None and not values["manifests"] and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    return Config(in_cluster=in_cluster, **values).validate()


def main(argv: list[str] | None = None) -> int:
    # Output into a closed pipe (`mcsdns zone | head`, `--help | head`) ends the process quietly, as it
    # ends cat or grep: by SIGPIPE. Python ignores SIGPIPE (a BrokenPipeError traceback instead); the
    # server takes the ignore back before it opens a socket, since a client's closed TCP connection must
    # be an error to handle there, not the end of the process.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    origins: dict[str, str] = {}
    if args.command == "serve" and args.flags_file is not None:
        try:
            args, origins = resolve(argv[argv.index("serve") + 1:], parser.parse_args(["serve"]))
        except FlagsFileError as exc:
            parser.error(str(exc))  # exits 2 with usage and the file, line and reason
    if args.command == "zone":
        return _zone(args, parser)
    run = getattr(args, "run", None)
    if run is not None:  # a client subcommand: no server config
        return run(args)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        parser.error(where_set(str(exc), origins))  # exits 2 with usage, the message and the file and line
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    log.info("mcsdns %s serving %s from %s", __version__, ", ".join(config.zones), config.describe_source())
    try:
        if config.workers > 1:
            from .workers.supervisor import supervise

            return supervise(config, _run_loop)
        _run_loop(_serve(config, _begin_source(config)))
    except ConfigError as exc:  # found while starting, e.g. an --upstream that is this server (a loop)
        log.error("cannot start: %s", exc)
        return 2
    except OSError as exc:
        log.error("cannot start: %s", exc.strerror or exc)
        return 1
    except SourceFailed as exc:
        log.error("stopped after a failure: %s", exc)
        return 1
    return 0


def where_set(message: str, origins: dict[str, str]) -> str:
    """A ConfigError's message (it begins with the flag, e.g. `--ttl must be in range ...`) preceded by
    the flags file and line that set that flag, when a file did."""
    match = re.match(r"(--[a-z0-9-]+)", message)
    origin = origins.get(match.group(1)) if match else None
    return f"{origin}: {message}" if origin else message


def _run_loop(main_coro) -> None:
    """asyncio.run on selector.py's loop (UDP readers called from the selector), or on uvloop when
    MCSDNS_LOOP=uvloop and it is installed (measured: docs/performance.md).

    asyncio is imported here, after `_begin_source`, not at the top: the API server's first lists are
    then asked for ~10 ms sooner (asyncio's imports, inspect's among them, on an idle machine)."""
    import asyncio

    from .serve import selector

    if os.environ.get("MCSDNS_LOOP", "").lower() == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("MCSDNS_LOOP=uvloop but uvloop is not installed: using asyncio's default loop")
        else:
            return uvloop.run(main_coro)
    with asyncio.Runner(loop_factory=selector.new_loop) as runner:  # asyncio.run, on selector.py's loop
        return runner.run(main_coro)


def _begin_source(config: Config) -> KubeSource | None:
    """The Kubernetes source, its first requests sent before the App is imported and built (None: the
    manifests are the source). The API server prepares its first lists meanwhile, which on a server that
    answers lists whole takes longer than the App's imports and construction (~0.1 s): the sync ends
    that much sooner (benchmarks.sync_cost). The App takes it over (`KubeSource.attach`, then `run`).

    The collector is paused here, as `App.start` pauses it for the sync (and resumes it after): the
    threads may convert objects of the lists before `App.start` runs."""
    if not config.uses_api or config.manifests:
        return None
    from .sources.kube import KubeSource

    source = KubeSource(kube_settings(config))
    gc.disable()
    source.begin()
    return source


async def _serve(config: Config, source: KubeSource | None = None) -> None:
    import asyncio

    from .app import App

    app = App(config, source=source)
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
