"""Every `mcsdns serve` flag, declared once.

From `SERVE_OPTIONS` come the argparse flags (`add_arguments`; `mcsdns zone` takes a `subset`), the
argparse -> `Config` mapping (`config_values`), the flags table of docs/flags.md and
the flag reference in `deploy/base/mcsdns.flags` and in the Helm chart's values (all rewritten by
`python -m mcsdns.options --all`, and checked by tests/test_options.py). A new flag
is one `Option` here plus its `Config` field; whether a value is in range stays `Config.validate`'s
decision.

A flag's default is its `Config` field's default (explained where the field is
declared), so the parser and `Config()` cannot disagree; `shown_default` is
only how the docs print it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .config import Config, ConfigError, parse_hostport, parse_upstreams

# --------------------------------------------------------------------------- value parsers (argparse `type=`)


def hostport(default_port: int) -> Callable[[str], tuple[str, int]]:
    """`HOST:PORT`, `[V6]:PORT` or `HOST` (with `default_port`) -> (host, port)."""

    def parse(text: str) -> tuple[str, int]:
        try:
            return parse_hostport(text, default_port)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def seconds(text: str) -> float:
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


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


# --------------------------------------------------------------------------- argparse value -> Config value


def _namespaces(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    namespaces = frozenset(n.strip() for n in text.split(",") if n.strip())
    if not namespaces:
        raise ConfigError("--namespaces: give at least one namespace")
    return namespaces


def _zones(values: list[str]) -> tuple[str, ...]:
    """Lower-cased, without the trailing dot, each once, in the order given."""
    return tuple(dict.fromkeys(z.lower().rstrip(".") for z in values))


# --------------------------------------------------------------------------- the declaration


@dataclass(frozen=True)
class Option:
    """One `mcsdns serve` flag: how it parses, which `Config` field it sets, how it is documented."""

    flag: str  # "--ttl"
    field: str  # the Config field it sets
    group: str  # the --help section
    help: str  # the --help text
    doc: str  # docs/flags.md's "meaning" cell (Markdown, links relative to docs/); the flags file shows it as plain text
    shown_default: str  # docs/flags.md's "default" cell (Markdown)
    metavar: str | None = None  # None: a switch (store_true)
    parse: Callable[[str], Any] | None = None  # str -> value, argparse.ArgumentTypeError when malformed
    repeatable: bool = False  # action="append"; none given: the Config default
    bare: str | None = None  # the value of the flag given without one (nargs="?")
    choices: tuple[str, ...] | None = None
    convert: Callable[[Any], Any] | None = None  # the parsed value -> the Config value (default: as parsed)

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def default(self) -> Any:
        """The Config field's default: the one place a default is decided."""
        (f,) = [f for f in dataclasses.fields(Config) if f.name == self.field]
        return f.default

    def usage(self) -> str:
        """`--flag METAVAR` as the docs show it."""
        if self.metavar is None:
            return self.flag
        return f"{self.flag} [{self.metavar}]" if self.bare is not None else f"{self.flag} {self.metavar}"

    def to_config(self, value: Any) -> Any:
        if self.repeatable and not value:
            return self.default  # not given (a given `--upstream none` converts to an empty tuple: kept)
        if self.convert is not None:
            return self.convert(value)
        return tuple(value) if self.repeatable else value


SOURCES, DNS, FORWARDING, OPERATIONS = "sources", "DNS", "forwarding", "operations"

SERVE_OPTIONS: tuple[Option, ...] = (
    Option(
        "--manifests", "manifests", SOURCES, metavar="PATH", parse=Path, repeatable=True,
        help="file or directory of Kubernetes YAML/JSON manifests (repeatable); re-read on change and on SIGHUP. "
        "Without it and without a cluster, the bundled example cluster set is served",
        doc="file or directory of YAML/JSON manifests (repeatable); re-read on change and on SIGHUP",
        shown_default="bundled example"),
    Option(
        "--kubeconfig", "kubeconfig", SOURCES, metavar="PATH", parse=Path,
        help="watch the cluster of this kubeconfig (CoreDNS `kubeconfig`); in a pod the service account is used",
        doc="watch the cluster of this kubeconfig (CoreDNS `kubeconfig`)",
        shown_default="in-cluster if `KUBERNETES_SERVICE_HOST`"),
    Option(
        "--context", "context", SOURCES, metavar="NAME",
        help="kubeconfig context to use",
        doc="kubeconfig context to use", shown_default="the kubeconfig's current context"),
    Option(
        "--labels", "labels", SOURCES, metavar="SELECTOR",
        help="label selector that MCS EndpointSlices must also match (CoreDNS `labels`)",
        doc="label selector MCS EndpointSlices must also match (CoreDNS `labels`)", shown_default="none"),
    Option(
        "--resync", "resync", SOURCES, metavar="DURATION", parse=seconds,
        help="full relist period that heals any missed watch event (default 10m; 0 disables)",
        doc="periodic full relist that heals missed watch events (`0` disables)", shown_default="`10m`"),
    Option(
        "--startup-timeout", "startup_timeout", SOURCES, metavar="DURATION", parse=seconds,
        help="how long to wait for the initial sync before answering at all (CoreDNS `startup_timeout`; default 5s)",
        doc="wait this long for the initial sync before answering (CoreDNS `startup_timeout`)", shown_default="`5s`"),
    Option(
        "--delete-grace", "delete_grace", SOURCES, metavar="DURATION", parse=seconds,
        help="Kubernetes API source: keep answering for a deleted ServiceImport this long, so one deleted and re-created "
        "within it never answers NXDOMAIN (0..60s; default 0: removed at once, as CoreDNS does)",
        doc="API source: keep a deleted ServiceImport's answers this long, so one deleted and re-created within it never "
        "answers NXDOMAIN (0..60s; `0`: removed at once, as CoreDNS)", shown_default="`0`"),
    Option(
        "--listen", "listen", DNS, metavar="HOST:PORT", parse=hostport(5353), repeatable=True,
        help="address for DNS over UDP and TCP, [::1]:5353 for IPv6; a HOST without a port listens on port 5353, "
        "as the default does (repeatable; default 127.0.0.1:5353)",
        doc="DNS over UDP and TCP; `[::1]:5353` for IPv6; a host without a port means port 5353; repeatable",
        shown_default="`127.0.0.1:5353`"),
    Option(
        "--zone", "zones", DNS, metavar="NAME", repeatable=True, convert=_zones,
        help="zone to serve as a multicluster zone (repeatable; default clusterset.local)",
        doc="zone to serve (repeatable)", shown_default="`clusterset.local`"),
    Option(
        "--ttl", "ttl", DNS, metavar="SECONDS", parse=integer,
        help="TTL of every record, 0..3600 (CoreDNS `ttl`; default 5)",
        doc="TTL of every record, 0..3600 (CoreDNS `ttl`)", shown_default="`5`"),
    Option(
        "--namespaces", "namespaces", DNS, metavar="NS,...", convert=_namespaces,
        help="expose only these namespaces (CoreDNS `namespaces`); default all",
        doc="expose only these namespaces (CoreDNS `namespaces`)", shown_default="all"),
    Option(
        "--ns-address", "ns_addresses", DNS, metavar="IP", repeatable=True,
        help="address(es) answered for ns.dns.<zone> and the apex NS (default: POD_IP(S), else the listen address)",
        doc="what `ns.dns.<zone>` and the apex NS answer (repeatable)", shown_default="`POD_IP(S)`, else the listen address"),
    Option(
        "--loadbalance", "loadbalance", DNS, metavar="POLICY", bare="round_robin",
        help="round_robin (or a bare --loadbalance): each reply for a name with several addresses lists its "
        "A/AAAA records starting one further on, so clients that take the first address spread over all of "
        "them (CoreDNS `loadbalance`); the set of records, the other sections and SRV answers do not change. "
        "off (default): a stable order",
        doc="`round_robin` (or a bare `--loadbalance`): rotate A/AAAA answer sets one record per reply (CoreDNS "
        "`loadbalance`); same records, other sections unchanged", shown_default="off"),
    Option(
        "--local-cluster", "local_cluster", DNS, metavar="ID|auto",
        help="list this cluster's endpoints first: headless A/AAAA answers hold the same addresses with "
        "those whose slice's multicluster.kubernetes.io/source-cluster is ID first, and SRV records get "
        "priority 0 (local) or 10 (remote). auto: the id is the spec.value of the KEP-2149 ClusterProperty "
        "cluster.clusterset.k8s.io (about.k8s.io), watched (needs list/watch on clusterproperties: "
        "deploy/components/local-cluster-auto) or read from the manifests. Default off: CoreDNS's answers",
        doc="headless answers list cluster `ID`'s endpoints first, SRV priority 0 local / 10 remote; `auto` reads the "
        "KEP-2149 ClusterProperty (the component `deploy/components/local-cluster-auto` grants its watch)",
        shown_default="off"),
    Option(
        "--reverse-cidr", "reverse_cidrs", DNS, metavar="CIDR", repeatable=True,
        help="answer PTR queries for the addresses of this CIDR (repeatable): authoritative for its "
        "in-addr.arpa/ip6.arpa zones (split on octet/nibble boundaries), PTR for every ClusterSetIP and "
        "ready headless endpoint address, NXDOMAIN for the rest. Default none: reverse names are forwarded",
        doc="serve PTR for ClusterSetIPs and ready headless endpoints in the reverse zones of `CIDR` (repeatable)",
        shown_default="none"),
    Option(
        "--dns-sd", "dns_sd", DNS,
        help="also answer DNS-SD browsing (RFC 6763): PTR b._dns-sd._udp.<zone> lists the namespaces with "
        "imports, PTR _services._dns-sd._udp.<ns>.svc.<zone> their named ports, PTR _<port>._<proto>.<ns>.svc.<zone> "
        "the service instances (each with SRV and an empty TXT). Off by default: those names then answer as in CoreDNS",
        doc="also answer DNS-SD browsing (RFC 6763) over the imports "
        "([What is imported here?](operate.md#what-is-imported-here))", shown_default="off"),
    Option(
        "--ips-from-slices", "ips_from_slices", DNS,
        help="answer a ClusterSetIP ServiceImport whose spec.ips is empty with the ready addresses of its "
        "EndpointSlices (labelled multicluster.kubernetes.io/service-name), as if they were its IPs: for MCS "
        "implementations that import without a clusterset IP (Lighthouse without one). An import with spec.ips is "
        "unchanged. Off by default: such a name is NODATA, as in CoreDNS",
        doc="a ClusterSetIP import with empty `spec.ips` answers its EndpointSlices' ready addresses "
        "([implementations](implementations.md))", shown_default="off"),
    Option(
        "--transfer-to", "transfer_to", DNS, metavar="CIDR", repeatable=True,
        help="allow zone transfers (AXFR, IXFR) of the served zones to clients in this network (repeatable; an address "
        "alone is its /32 or /128). The transfer holds exactly the records the query path answers, per-endpoint "
        "names included. Default none: every transfer REFUSED, as CoreDNS without its `transfer` plugin",
        doc="allow AXFR/IXFR from this network (repeatable): the records the query path answers "
        "([zone transfers](transfers.md))", shown_default="none: REFUSED"),
    Option(
        "--tsig-key-file", "tsig_key_file", DNS, metavar="PATH", parse=Path,
        help="TSIG key (RFC 8945) as one line name:algorithm:base64secret (hmac-sha256 and up); transfer requests must "
        "be signed with it (unsigned: REFUSED) and every reply message is signed. Needs --transfer-to",
        doc="TSIG key `name:algorithm:base64secret`: transfers must be signed with it; needs `--transfer-to`",
        shown_default="none"),
    Option(
        "--notify", "notify", DNS, metavar="HOST:PORT", parse=hostport(53), repeatable=True,
        help="send this secondary a NOTIFY (RFC 1996) after every change, so it transfers the zone at once "
        "(repeatable; coalesced over 50 ms, at most 4 rounds a second, retried 5 times; signed with the TSIG key). "
        "A host name is resolved at every change and each of its addresses notified (a headless Service over "
        "per-node secondaries). Needs --transfer-to",
        doc="secondary sent NOTIFY after every change (repeatable; coalesced, retried, rate-capped; a host name: "
        "each of its addresses, resolved at every change); needs `--transfer-to`", shown_default="none"),
    Option(
        "--ixfr-journal-bytes", "ixfr_journal_bytes", DNS, metavar="BYTES", parse=integer,
        help="keep the records of the last changes, up to this many bytes (wire size), so a secondary that holds "
        "an older serial gets IXFR, only what changed; older, or past --ixfr-journal-age: the whole zone. "
        "0 = no journal",
        doc="IXFR journal: the last changes' records, up to this many bytes; a secondary older than it gets "
        "the whole zone (4 MiB; [zone transfers](transfers.md))", shown_default="`4194304`"),
    Option(
        "--ixfr-journal-age", "ixfr_journal_age", DNS, metavar="DURATION", parse=seconds,
        help="keep a change in the IXFR journal this long (longer than the SOA refresh, 2 h, so a secondary "
        "that missed a NOTIFY still gets IXFR at its refresh)",
        doc="how long a change stays in the IXFR journal", shown_default="`3h`"),
    Option(
        "--max-transfers", "max_transfers", DNS, metavar="N", parse=integer,
        help="zone transfers (AXFR, IXFR) written at once over TCP; a request over it is REFUSED and the secondary "
        "retries (counted busy). The transfers take turns at the event loop, so queries wait for one message of "
        "one of them; more at once make each slower. 1-1000",
        doc="zone transfers written at once; over it REFUSED, which a secondary retries "
        "([zone transfers](transfers.md#transfers-under-abuse))", shown_default="`16`"),
    Option(
        "--max-tcp-connections", "max_tcp_connections", DNS, metavar="N", parse=integer,
        help="open DNS-over-TCP connections at once; a new one over it is still accepted, and the connection "
        "longest without a complete query is closed to make room (lowered to fit the open-file limit)",
        doc="open DNS-over-TCP connections; over it the one longest without a complete query makes room for "
        "the new one (lowered to fit the open-file limit)", shown_default="`20000`"),
    Option(
        "--max-tcp-connections-per-source", "max_tcp_connections_per_source", DNS, metavar="N", parse=integer,
        help="open DNS-over-TCP connections per client address; over it that address's oldest is closed; "
        "0 = no cap (default: a node's SNAT address carries every pod of the node)",
        doc="open DNS-over-TCP connections per client address, over it that address's oldest makes room; `0` = "
        "no cap (one SNAT address can carry a whole node)", shown_default="`0`"),
    Option(
        "--tcp-first-query-timeout", "tcp_first_query_timeout", DNS, metavar="DURATION", parse=seconds,
        help="close a TCP connection that has not sent one complete query this long after it was accepted",
        doc="close a TCP connection whose first complete query has not arrived this long after the accept",
        shown_default="`3s`"),
    Option(
        "--tcp-idle-timeout", "tcp_idle_timeout", DNS, metavar="DURATION", parse=seconds,
        help="close a TCP connection that sends no complete query (or reads no reply) for this long",
        doc="close a TCP connection that completes no query, or reads no reply, for this long", shown_default="`10s`"),
    Option(
        "--tcp-max-queries", "tcp_max_queries", DNS, metavar="N", parse=integer,
        help="queries per TCP connection before it is closed (after the replies); 0 = no limit",
        doc="queries per TCP connection, then it is closed after the replies; `0` = no limit", shown_default="`0`"),
    Option(
        "--upstream", "upstreams", FORWARDING, metavar="HOST[:PORT]", repeatable=True, convert=parse_upstreams,
        help="upstream for names outside the zones (repeatable); default: /etc/resolv.conf; `none` refuses them",
        doc="where other names go (repeatable); `none` refuses them", shown_default="the servers of `/etc/resolv.conf`"),
    Option(
        "--upstream-timeout", "upstream_timeout", FORWARDING, metavar="DURATION", parse=seconds,
        help="per-query upstream timeout, then SERVFAIL (default 2s)",
        doc="per-query upstream timeout, then SERVFAIL", shown_default="`2s`"),
    Option(
        "--policy", "upstream_policy", FORWARDING, metavar="POLICY", choices=("random", "round_robin", "sequential"),
        help="upstream selection policy: random (default), round_robin or sequential (CoreDNS forward `policy`)",
        doc="upstream selection: `random`, `round_robin` or `sequential` (CoreDNS forward `policy`)",
        shown_default="`random`"),
    Option(
        "--max-concurrent", "max_concurrent", FORWARDING, metavar="N", parse=integer,
        help="in-flight forwarded queries; beyond it REFUSED (CoreDNS forward `max_concurrent`; default 1000)",
        doc="in-flight forwarded queries; beyond it REFUSED", shown_default="`1000`"),
    Option(
        "--forward-0x20", "forward_0x20", FORWARDING,
        help="dns-0x20: send each forwarded name with its letters in random case and accept only replies "
        "that echo that spelling exactly (more to guess for a forger); the client gets its own spelling back. "
        "Off by default: an upstream that does not preserve case would have every reply dropped",
        doc="send forwarded names in random letter case (dns-0x20) and accept only replies that echo it exactly",
        shown_default="off"),
    Option(
        "--http-listen", "http_listen", OPERATIONS, metavar="HOST:PORT", parse=hostport(9153),
        help="admin HTTP listener for /health, /ready, /metrics, /imports and /explain (default 127.0.0.1:9153; "
        "`mcsdns imports` and `mcsdns explain` ask it)",
        doc="`/health`, `/ready`, `/metrics`, `/imports`, `/explain`", shown_default="`127.0.0.1:9153`"),
    Option(
        "--discovery", "discovery", OPERATIONS, metavar="on|off", choices=("on", "off"),
        help="on (default): the admin listener also serves /imports and /explain, which list every imported "
        "service name to anyone who can reach it. off: both answer 404 (and `mcsdns imports`/`explain` "
        "fail with that error); /health, /ready and /metrics are unchanged",
        doc="`off`: `/imports` and `/explain` answer 404, so the admin port lists no imported names "
        "([the admin port](install.md#the-admin-port))", shown_default="`on`"),
    Option(
        "--lameduck", "lameduck", OPERATIONS, metavar="DURATION", parse=seconds,
        help="after SIGTERM, keep answering this long while /ready reports 503 and zone transfers but the "
        "journal's IXFRs are refused (default 5s)",
        doc="after SIGTERM, keep answering while `/ready` reports 503 and zone transfers but the journal's IXFRs are refused",
        shown_default="`5s`"),
    Option(
        "--log-level", "log_level", OPERATIONS, metavar="LEVEL", parse=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="DEBUG, INFO (default), WARNING or ERROR",
        doc="`DEBUG`, `INFO`, `WARNING`, `ERROR`", shown_default="`INFO`"),
    Option(
        "--log-queries", "log_queries", OPERATIONS,
        help="log one line per query (CoreDNS log format)",
        doc="one line per query in CoreDNS's log format", shown_default="off"),
    Option(
        "--workers", "workers", OPERATIONS, metavar="N", parse=integer,
        help="processes answering DNS on the same --listen ports (SO_REUSEPORT). One supervisor process "
        "watches (one watch per pod), compiles and serves the one --http-listen port (/ready: every worker "
        "serving; /metrics: query metrics labelled `worker`); it forks the workers after the initial sync "
        "(sharing the table copy-on-write), sends them every change with the answers it compiled for it, and "
        "restarts a worker that dies",
        doc="N DNS processes sharing the DNS ports (`SO_REUSEPORT`) and one table: one supervisor watches, compiles "
        "and serves the admin port (`/ready` when every worker serves; query metrics labelled `worker`), forks "
        "the workers after the initial sync and sends them every change with the answers it compiled (compiled once, "
        "not once per worker); a worker that dies is restarted", shown_default="`1`"),
)  # fmt: skip


# --------------------------------------------------------------------------- the parser and the Config


def subset(flags: tuple[str, ...], helps: dict[str, str] | None = None) -> tuple[Option, ...]:
    """These flags of `serve` (for another subcommand), with its own help where serve's would mislead."""
    by_flag = {opt.flag: opt for opt in SERVE_OPTIONS}
    return tuple(dataclasses.replace(by_flag[f], help=(helps or {}).get(f, by_flag[f].help)) for f in flags)


def add_arguments(parser: argparse.ArgumentParser, options: tuple[Option, ...] = SERVE_OPTIONS, grouped: bool = True,
                  defaults: bool = True) -> None:
    """The flags, in declaration order; `grouped`: in their --help groups (as `serve` shows them).

    `defaults=False` leaves each flag's default to the parser's `argument_default` (flagsfile.py
    passes SUPPRESS, so a parse holds only the flags given)."""
    groups: dict[str, Any] = {}
    for opt in options:
        group: Any = parser
        if grouped:
            group = groups.get(opt.group) or groups.setdefault(opt.group, parser.add_argument_group(opt.group))
        if opt.metavar is None:
            group.add_argument(opt.flag, action="store_true", help=opt.help, **({} if defaults else {"default": argparse.SUPPRESS}))
            continue
        kwargs: dict[str, Any] = {"metavar": opt.metavar, "help": opt.help}
        if opt.parse is not None:
            kwargs["type"] = opt.parse
        if opt.choices is not None:
            kwargs["choices"] = opt.choices
        if opt.repeatable:
            kwargs["action"] = "append"
        if defaults:
            kwargs["default"] = [] if opt.repeatable else opt.default
        if opt.bare is not None:
            kwargs.update(nargs="?", const=opt.bare)
        group.add_argument(opt.flag, **kwargs)


def config_values(args: argparse.Namespace, options: tuple[Option, ...] = SERVE_OPTIONS) -> dict[str, Any]:
    """Parsed flags -> {Config field: value}; ConfigError for a value no field can hold (e.g. `--namespaces ,`)."""
    return {opt.field: opt.to_config(getattr(args, opt.dest)) for opt in options}


# --------------------------------------------------------------------------- the generated docs

REFERENCE = Path("docs/flags.md")  # the flags reference; --all writes it and the two lists below
FLAGS_FILE = Path("deploy/base/mcsdns.flags")
HELM_VALUES = Path("deploy/helm/mcsdns/values.yaml")
README_BEGIN = "<!-- flags: generated from mcsdns/options.py by `python -m mcsdns.options --all` -->"
README_END = "<!-- end of flags -->"
FLAGS_BEGIN = ("# Every flag, its default and meaning (generated from mcsdns/options.py by\n"
               "# `python -m mcsdns.options --flags-file deploy/base/mcsdns.flags`):")
FLAGS_END = "# (end of the generated flag list)"
VALUES_BEGIN = ("  # Every flag, its default and meaning (generated from mcsdns/options.py by\n"
                "  # `python -m mcsdns.options --helm-values deploy/helm/mcsdns/values.yaml`):")
VALUES_END = "  # (end of the generated flag list)"


def readme_table(options: tuple[Option, ...] = SERVE_OPTIONS) -> str:
    """docs/flags.md's flags table, between its markers."""
    lines = [README_BEGIN, "", "| flag | default | meaning |", "|---|---|---|"]
    for opt in options:
        usage = opt.usage().replace("|", "\\|")  # a `|` inside a cell ends it, even in code
        lines.append(f"| `{usage}` | {opt.shown_default} | {opt.doc} |")
    return "\n".join(lines + ["", README_END])


def _as_text(markdown: str) -> str:
    """A README cell as plain text: links keep their words, code loses its backticks."""
    return re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", markdown).replace("`", "")


def _flag_lines(options: tuple[Option, ...], comment: str, item: str) -> list[str]:
    """Every flag as `comment` lines: `item` + its usage and default, then its meaning, wrapped."""
    lines = []
    for opt in options:
        lines.append(f"{comment}{item}{opt.usage()}  (default: {_as_text(opt.shown_default)})")
        indent = comment + " " * (len(item) + 4)
        lines += textwrap.wrap(_as_text(opt.doc), 100, initial_indent=indent, subsequent_indent=indent,
                               break_on_hyphens=False)  # `re-created` stays one word
    return lines


def flags_reference(options: tuple[Option, ...] = SERVE_OPTIONS) -> str:
    """The comment block of deploy/base/mcsdns.flags that lists every flag, its default and meaning."""
    return "\n".join([FLAGS_BEGIN, *_flag_lines(options, "#", "   "), FLAGS_END])


def helm_values_reference(options: tuple[Option, ...] = SERVE_OPTIONS) -> str:
    """The same list as a comment under the Helm chart's `flags:` value (each flag a `- ` list item)."""
    return "\n".join([VALUES_BEGIN, *_flag_lines(options, "  #", " - "), VALUES_END])


def replace_block(text: str, begin: str, end: str, block: str) -> str:
    """`text` with the lines from `begin` to `end` (inclusive) replaced by `block`; ValueError without them."""
    start = text.find(begin)
    stop = text.find(end, start)
    if start < 0 or stop < 0:
        raise ValueError(f"markers not found: {begin!r} ... {end!r}")
    return text[:start] + block + text[stop + len(end):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcsdns.options",
                                     description="Rewrite the generated flag docs from mcsdns/options.py.")
    parser.add_argument("--all", action="store_true",
                        help=f"rewrite all three, run from the checkout's root: {REFERENCE}, {FLAGS_FILE}, {HELM_VALUES}")
    parser.add_argument("--reference", "--readme", metavar="PATH", type=Path, dest="readme",
                        help="rewrite the flags table of this Markdown file (docs/flags.md)")
    parser.add_argument("--flags-file", metavar="PATH", type=Path, help="rewrite the flag list of this flags file")
    parser.add_argument("--helm-values", metavar="PATH", type=Path, help="rewrite the flag list of this chart values file")
    args = parser.parse_args(argv)
    if args.all:
        args.readme, args.flags_file, args.helm_values = REFERENCE, FLAGS_FILE, HELM_VALUES
    if args.readme is None and args.flags_file is None and args.helm_values is None:
        print(readme_table())
        return 0
    for path, begin, end, block in ((args.readme, README_BEGIN, README_END, readme_table()),
                                    (args.flags_file, FLAGS_BEGIN, FLAGS_END, flags_reference()),
                                    (args.helm_values, VALUES_BEGIN, VALUES_END, helm_values_reference())):
        if path is not None:
            path.write_text(replace_block(path.read_text(), begin, end, block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
