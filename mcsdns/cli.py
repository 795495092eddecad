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
from .config import Config, ConfigError, parse_hostport, parse_upstreams

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
    src.add_argument("--delete-grace", metavar="DURATION", type=_seconds, default=0.0,
                     help="Kubernetes API source: keep answering for a deleted ServiceImport this long, so one deleted and re-created within it "
                     "never answers NXDOMAIN (0..60s; default 0: removed at once, as CoreDNS does)")
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
    dns.add_argument("--loadbalance", metavar="POLICY", nargs="?", const="round_robin", default="off",
                     help="round_robin (or a bare --loadbalance): each reply for a name with several addresses lists its "
                     "A/AAAA records starting one further on, so clients that take the first address spread over all of "
                     "them (CoreDNS `loadbalance`); the set of records, the other sections and SRV answers do not change. "
                     "off (default): a stable order")
    dns.add_argument("--local-cluster", metavar="ID|auto", default=None,
                     help="list this cluster's endpoints first: headless A/AAAA answers hold the same addresses with "
                     "those whose slice's multicluster.kubernetes.io/source-cluster is ID first, and SRV records get "
                     "priority 0 (local) or 10 (remote). auto: the id is the spec.value of the KEP-2149 ClusterProperty "
                     "cluster.clusterset.k8s.io (about.k8s.io), watched (needs list/watch on clusterproperties: "
                     "deploy/components/local-cluster-auto) or read from the manifests. Default off: CoreDNS's answers")
    dns.add_argument("--reverse-cidr", metavar="CIDR", action="append", default=[],
                     help="answer PTR queries for the addresses of this CIDR (repeatable): authoritative for its "
                     "in-addr.arpa/ip6.arpa zones (split on octet/nibble boundaries), PTR for every ClusterSetIP and "
                     "ready headless endpoint address, NXDOMAIN for the rest. Default none: reverse names are forwarded")
    dns.add_argument("--dns-sd", action="store_true",
                     help="also answer DNS-SD browsing (RFC 6763): PTR b._dns-sd._udp.<zone> lists the namespaces with "
                     "imports, PTR _services._dns-sd._udp.<ns>.svc.<zone> their named ports, PTR _<port>._<proto>.<ns>.svc.<zone> "
                     "the service instances (each with SRV and an empty TXT). Off by default: those names then answer as in CoreDNS")
    dns.add_argument("--max-tcp-connections", metavar="N", type=_int, default=1000,
                     help="open DNS-over-TCP connections at once; beyond it new ones are closed at once")
    dns.add_argument("--tcp-idle-timeout", metavar="DURATION", type=_seconds, default=10.0,
                     help="close a TCP connection that sends no complete query (or reads no reply) for this long")
    dns.add_argument("--tcp-max-queries", metavar="N", type=_int, default=0,
                     help="queries per TCP connection before it is closed (after the replies); 0 = no limit")
    fwd = s.add_argument_group("forwarding")
    fwd.add_argument("--upstream", metavar="HOST[:PORT]", action="append", default=[],
                     help="upstream for names outside the zones (repeatable); default: /etc/resolv.conf; `none` refuses them")
    fwd.add_argument("--upstream-timeout", metavar="DURATION", type=_seconds, default=2.0,
                     help="per-query upstream timeout, then SERVFAIL (default 2s)")
    fwd.add_argument("--policy", metavar="POLICY", default="random", choices=("random", "round_robin", "sequential"),
                     help="upstream selection policy: random (default), round_robin or sequential (CoreDNS forward `policy`)")
    fwd.add_argument("--max-concurrent", metavar="N", type=_int, default=1000,
                     help="in-flight forwarded queries; beyond it REFUSED (CoreDNS forward `max_concurrent`; default 1000)")
    fwd.add_argument("--forward-0x20", action="store_true",
                     help="dns-0x20: send each forwarded name with its letters in random case and accept only replies "
                     "that echo that spelling exactly (more to guess for a forger); the client gets its own spelling back. "
                     "Off by default: an upstream that does not preserve case would have every reply dropped")
    ops = s.add_argument_group("operations")
    ops.add_argument("--http-listen", metavar="HOST:PORT", type=_hostport(9153), default=("127.0.0.1", 9153),
                     help="admin HTTP listener for /health, /ready, /metrics, /imports and /explain (default 127.0.0.1:9153; "
                     "`mcsdns imports` and `mcsdns explain` ask it)")
    ops.add_argument("--lameduck", metavar="DURATION", type=_seconds, default=5.0,
                     help="after SIGTERM, keep answering this long while /ready reports 503 (default 5s)")
    ops.add_argument("--log-level", metavar="LEVEL", default="INFO", type=str.upper,
                     choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="DEBUG, INFO (default), WARNING or ERROR")
    ops.add_argument("--log-queries", action="store_true", help="log one line per query (CoreDNS log format)")
    ops.add_argument("--workers", metavar="N", type=_int, default=1,
                     help="processes answering DNS on the same --listen ports (SO_REUSEPORT). One supervisor process "
                     "watches (one watch per pod), compiles and serves the one --http-listen port (/ready: every worker "
                     "serving; /metrics: query metrics labelled `worker`); it forks the workers after the initial sync "
                     "(sharing the table copy-on-write), sends them every change, and restarts a worker that dies")
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
    namespaces = None
    if args.namespaces is not None:
        namespaces = frozenset(n.strip() for n in args.namespaces.split(",") if n.strip())
        if not namespaces:
            raise ConfigError("--namespaces: give at least one namespace")
    upstreams = parse_upstreams(args.upstream)
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
        delete_grace=args.delete_grace,
        listen=tuple(args.listen) or (("127.0.0.1", 5353),),
        zones=tuple(dict.fromkeys(zones)),
        ttl=args.ttl,
        namespaces=namespaces,
        ns_addresses=tuple(args.ns_address),
        loadbalance=args.loadbalance,
        local_cluster=args.local_cluster,
        reverse_cidrs=tuple(args.reverse_cidr),
        dns_sd=args.dns_sd,
        max_tcp_connections=args.max_tcp_connections,
        tcp_idle_timeout=args.tcp_idle_timeout,
        tcp_max_queries=args.tcp_max_queries,
        http_listen=args.http_listen,
        upstreams=upstreams,
        upstream_timeout=args.upstream_timeout,
        upstream_policy=args.policy,
        max_concurrent=args.max_concurrent,
        forward_0x20=args.forward_0x20,
        lameduck=args.lameduck,
        log_level=args.log_level,
        log_queries=args.log_queries,
        workers=args.workers,
    ).validate()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    """asyncio.run, on uvloop when MCSDNS_LOOP=uvloop and it is installed (measured: docs/performance.md)."""
    if os.environ.get("MCSDNS_LOOP", "").lower() == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("MCSDNS_LOOP=uvloop but uvloop is not installed: using asyncio's default loop")
        else:
            return uvloop.run(main_coro)
    return asyncio.run(main_coro)


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
