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
from pathlib import Path

from . import __version__
from .config import Config, ConfigError
from .transport import parse_hostport

log = logging.getLogger("mcsdns")


def _hostport(default_port: int):
    def parse(text: str) -> tuple[str, int]:
        try:
            return parse_hostport(text, default_port)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _seconds(text: str) -> float:
    """`5`, `5s`, `500ms`, `2m` -> seconds (CoreDNS-style durations accepted)."""
    t = text.strip().lower()
    try:
        if t.endswith("ms"):
            return float(t[:-2]) / 1000
        if t.endswith("s"):
            return float(t[:-1])
        if t.endswith("m"):
            return float(t[:-1]) * 60
        if t.endswith("h"):
            return float(t[:-1]) * 3600
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 5s, 500ms, 10m)") from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


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
    src = s.add_argument_group("sources")
    src.add_argument("--manifests", metavar="PATH", action="append", type=Path, default=[],
                     help="file or directory of Kubernetes YAML/JSON manifests (repeatable); re-read on change and on SIGHUP. "
                     "Without it and without a cluster, the bundled example cluster set is served")
    src.add_argument("--kubeconfig", metavar="PATH", type=Path, default=None,
                     help="watch the cluster of this kubeconfig (CoreDNS `kubeconfig`); in a pod the service account is used")
    src.add_argument("--context", metavar="NAME", default=None, help="kubeconfig context to use")
    src.add_argument("--labels", metavar="SELECTOR", default=None,
                     help="label selector that MCS EndpointSlices must also match (CoreDNS `labels`)")
    src.add_argument("--resync", metavar="DURATION", type=_seconds, default=600.0,
                     help="full relist period that heals any missed watch event (default 10m; 0 disables)")
    src.add_argument("--startup-timeout", metavar="DURATION", type=_seconds, default=5.0,
                     help="how long to wait for the initial sync before answering at all (CoreDNS `startup_timeout`; default 5s)")
    dns = s.add_argument_group("DNS")
    dns.add_argument("--listen", metavar="HOST:PORT", action="append", type=_hostport(53), default=[],
                     help="address for DNS over UDP and TCP, [::1]:5353 for IPv6 (repeatable; default 127.0.0.1:5353)")
    dns.add_argument("--zone", metavar="NAME", action="append", default=[],
                     help="zone to serve as a multicluster zone (repeatable; default clusterset.local)")
    dns.add_argument("--ttl", metavar="SECONDS", type=_int, default=5, help="TTL of every record, 0..3600 (CoreDNS `ttl`; default 5)")
    dns.add_argument("--namespaces", metavar="NS,...", default=None,
                     help="expose only these namespaces (CoreDNS `namespaces`); default all")
    dns.add_argument("--ns-address", metavar="IP", action="append", default=[],
                     help="address(es) answered for ns.dns.<zone> and the apex NS (default: POD_IP(S), else the listen address)")
    fwd = s.add_argument_group("forwarding")
    fwd.add_argument("--upstream", metavar="HOST[:PORT]", action="append", default=[],
                     help="upstream for names outside the zones (repeatable); default: /etc/resolv.conf; `none` refuses them")
    fwd.add_argument("--upstream-timeout", metavar="DURATION", type=_seconds, default=2.0,
                     help="per-query upstream timeout, then SERVFAIL (default 2s)")
    fwd.add_argument("--policy", metavar="POLICY", default="random", choices=("random", "round_robin", "sequential"),
                     help="upstream selection policy: random (default), round_robin or sequential (CoreDNS forward `policy`)")
    fwd.add_argument("--max-concurrent", metavar="N", type=_int, default=1000,
                     help="in-flight forwarded queries; beyond it REFUSED (CoreDNS forward `max_concurrent`; default 1000)")
    ops = s.add_argument_group("operations")
    ops.add_argument("--http-listen", metavar="HOST:PORT", type=_hostport(9153), default=("127.0.0.1", 9153),
                     help="admin HTTP listener for /health, /ready and /metrics (default 127.0.0.1:9153)")
    ops.add_argument("--lameduck", metavar="DURATION", type=_seconds, default=5.0,
                     help="after SIGTERM, keep answering this long while /ready reports 503 (default 5s)")
    ops.add_argument("--log-level", metavar="LEVEL", default="INFO", type=str.upper,
                     choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="DEBUG, INFO (default), WARNING or ERROR")
    ops.add_argument("--log-queries", action="store_true", help="log one line per query (CoreDNS log format)")
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    namespaces = None
    if args.namespaces is not None:
        namespaces = frozenset(n.strip() for n in args.namespaces.split(",") if n.strip())
        if not namespaces:
            raise ConfigError("--namespaces: give at least one namespace")
    upstreams: tuple | None = None
    if args.upstream:
        if [u.lower() for u in args.upstream] == ["none"]:
            upstreams = ()
        else:
            try:
                upstreams = tuple(parse_hostport(u, 53) for u in args.upstream)
            except ValueError as exc:
                raise ConfigError(f"--upstream {exc}") from None
    zones = tuple(z.lower().rstrip(".") for z in args.zone) or ("clusterset.local",)
    in_cluster = args.kubeconfig is None and not args.manifests and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    return Config(
        manifests=tuple(args.manifests),
        kubeconfig=args.kubeconfig,
        context=args.context,
        in_cluster=in_cluster,
        labels=args.labels,
        resync=args.resync,
        startup_timeout=args.startup_timeout,
        listen=tuple(args.listen) or (("127.0.0.1", 5353),),
        zones=tuple(dict.fromkeys(zones)),
        ttl=args.ttl,
        namespaces=namespaces,
        ns_addresses=tuple(args.ns_address),
        http_listen=args.http_listen,
        upstreams=upstreams,
        upstream_timeout=args.upstream_timeout,
        upstream_policy=args.policy,
        max_concurrent=args.max_concurrent,
        lameduck=args.lameduck,
        log_level=args.log_level,
        log_queries=args.log_queries,
    ).validate()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
        asyncio.run(_serve(config))
    except OSError as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
