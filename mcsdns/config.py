"""One frozen configuration object, built once from the command line.

Each default is explained where it is declared. `validate()` raises
ConfigError with a message that names the flag, the value and the range, so
the CLI can print it and exit 2 without a traceback.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .zone.reverse import MAX_ZONES, ReverseError, zone_networks

if TYPE_CHECKING:
    from .sources.kube import KubeSettings


class ConfigError(ValueError):
    """A flag value that cannot be used; the message names flag, value and range."""


# A cluster id as the source-cluster label can hold it (a label value, which is what is compared).
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_ZONE = re.compile(r"^([a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?$")


# --------------------------------------------------------------------------- addresses


def parse_hostport(text: str, default_port: int = 53) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT`, `HOST` or `[V6]` -> (host, port); ValueError with a reason."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: missing ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':PORT' after ']'")
        port_text = rest[1:] if rest else ""
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        host, port_text = text, ""  # a bare IPv6 address
    else:
        host, port_text = text, ""
    if not host:
        raise ValueError(f"{text!r}: empty host")
    if port_text == "":
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: port must be 0..65535")
    return host, int(port_text)


def _address_or_hostname(host: str) -> bool:
    """An IP address, or a DNS host name (RFC 1123 labels, a trailing dot allowed) a resolver can look up."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    name = (host[:-1] if host.endswith(".") else host).lower()
    return _ZONE.fullmatch(name) is not None and len(name) <= 253  # the rule --zone is held to


def hostport_text(host: str, port: int) -> str:
    """(host, port) as `HOST:PORT` or `[V6]:PORT` (Go's net.JoinHostPort, as CoreDNS labels and logs them)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_upstreams(texts: list[str]) -> tuple[tuple[str, int], ...] | None:
    """--upstream values -> the upstreams: None when not given (resolv.conf), () for `none` (REFUSED).

    Parsing only; `check_upstreams` (in `Config.validate`) says whether they can be used.
    """
    if not texts:
        return None
    if [t.lower() for t in texts] == ["none"]:
        return ()
    try:
        return tuple(parse_hostport(t, 53) for t in texts)
    except ValueError as exc:
        raise ConfigError(f"--upstream {exc}") from None


def check_upstreams(upstreams: Iterable[tuple[str, int]] | None) -> None:
    """Upstreams must be IP addresses: names would need a resolver to find the resolver."""
    for host, _ in upstreams or ():
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"--upstream {host!r}: must be an IP address (names would need a resolver to find the resolver)") from None


# --------------------------------------------------------------------------- the configuration


def transfer_networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """--transfer-to values as networks (an address alone is its /32 or /128); ValueError names the bad one."""
    out = []
    for cidr in cidrs:
        try:
            out.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise ValueError(f"{cidr!r} is not an address or CIDR (e.g. 10.0.0.0/8, 127.0.0.1)") from None
    return tuple(out)


@dataclass(frozen=True)
class Config:
    # Sources. No manifests and no cluster: the bundled example cluster set.
    manifests: tuple[Path, ...] = ()
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False  # set when KUBERNETES_SERVICE_HOST is present and no kubeconfig is given
    labels: str | None = None  # label selector ANDed onto the MCS slice selector (CoreDNS `labels`)
    resync: float = 600.0  # full relist period: heals any event a watch ever missed
    startup_timeout: float = 5.0  # CoreDNS default: wait this long for sync before answering at all
    delete_grace: float = 0.0  # keep a deleted ServiceImport's answers this long (0: CoreDNS, at once); see kube.py

    # DNS.
    listen: tuple[tuple[str, int], ...] = (("127.0.0.1", 5353),)  # unprivileged, loopback: safe to try
    zones: tuple[str, ...] = ("clusterset.local",)
    ttl: int = 5  # CoreDNS `ttl` default
    namespaces: frozenset[str] | None = None  # None: every namespace that exists
    ns_addresses: tuple[str, ...] = ()  # empty: the pod IP (POD_IP) or the listen addresses
    loadbalance: str = "off"  # "round_robin": rotate A/AAAA answer sets per reply (decision 11; CoreDNS `loadbalance`)
    # Opt-in extensions (decision 13), off by default so every answer stays CoreDNS's:
    local_cluster: str | None = None  # a cluster id or "auto" (KEP-2149 ClusterProperty): its endpoints first, SRV 0/10
    reverse_cidrs: tuple[str, ...] = ()  # serve PTR for clusterset addresses in these CIDRs' reverse zones
    dns_sd: bool = False  # DNS-SD browsing names (RFC 6763)
    ips_from_slices: bool = False  # a ClusterSetIP import with empty spec.ips answers its slices' ready addresses
    # Zone transfers (decision 8, transfer.py): off (every AXFR/IXFR REFUSED, as CoreDNS without `transfer`) until
    # --transfer-to names who may transfer; with a TSIG key, unsigned transfer requests are refused too.
    transfer_to: tuple[str, ...] = ()
    tsig_key_file: Path | None = None
    notify: tuple[tuple[str, int], ...] = ()  # secondaries sent NOTIFY (RFC 1996) after every change
    ixfr_journal_bytes: int = 4 << 20  # IXFR history (journal.py): the records of the last changes, bounded by
    ixfr_journal_age: float = 10800.0  # size and by age (beyond the SOA refresh of 2 h); older serials get AXFR
    max_transfers: int = 16  # transfers written at once over TCP; more are REFUSED (a secondary retries)
    # DNS over TCP (RFC 7766; the policy is tcp.py's). A connection costs a descriptor and a few KB of memory,
    # so the cap bounds both; over it, the connection longest without a complete query makes room (never a
    # refusal). A client holding more than the cap and reopening what is closed makes every accept an
    # eviction, and new connections queue behind its surplus: so the cap sits well above what one client can
    # hold (its memory still small), lowered to fit the open-file limit (TcpLimits.fitted).
    max_tcp_connections: int = 20000
    tcp_idle_timeout: float = 10.0  # seconds without a complete query (CoreDNS's idle timeout); also bounds a stalled reader
    tcp_first_query_timeout: float = 3.0  # seconds from the accept to the first complete query (CoreDNS: a few)
    tcp_max_queries: int = 0  # per connection, then it is closed after the replies; 0 = no limit
    # Per client address; 0 = none. Off by default: behind a node's SNAT, one address carries every pod of the node.
    max_tcp_connections_per_source: int = 0

    # Admin HTTP: /health, /ready, /metrics on one listener (CoreDNS's metrics port).
    http_listen: tuple[str, int] | None = ("127.0.0.1", 9153)
    # /imports and /explain list every imported name to whoever reaches the admin port; "off" answers them 404
    # (metrics and probes unchanged). On by default: `off` is for an admin port that others can reach.
    discovery: str = "on"

    # Forwarding of names outside the zones.
    upstreams: tuple[tuple[str, int], ...] | None = None  # None: from /etc/resolv.conf; () = REFUSED
    upstream_timeout: float = 2.0  # then SERVFAIL to the client
    upstream_policy: str = "random"  # CoreDNS forward's default
    max_concurrent: int = 1000  # in-flight forwarded queries; beyond it REFUSED (CoreDNS forward default)
    forward_0x20: bool = False  # dns-0x20: random letter case upstream, echoed exactly; off, as some upstreams lower-case

    # Lifecycle and logging.
    lameduck: float = 5.0  # keep answering this long after SIGTERM while /ready reports 503
    log_level: str = "INFO"
    log_queries: bool = False
    workers: int = 1

    extra: dict = field(default_factory=dict, compare=False)

    def validate(self) -> "Config":
        if not 0 <= self.ttl <= 3600:
            raise ConfigError(f"--ttl must be in range [0, 3600]: {self.ttl}")
        if not self.zones:
            raise ConfigError("--zone: at least one zone is needed")
        for zone in self.zones:
            if not _ZONE.match(zone) or len(zone) > 253:
                raise ConfigError(f"--zone {zone!r} is not a valid DNS name")
        if self.local_cluster is not None and self.local_cluster != "auto" and not _CLUSTER_ID.match(self.local_cluster):
            raise ConfigError(f"--local-cluster must be auto or a cluster id (1-63 letters, digits, '-', '_', '.', "
                              f"starting and ending with a letter or digit): {self.local_cluster!r}")
        for cidr in self.reverse_cidrs:
            try:
                zone_networks([cidr])
            except ReverseError as exc:
                raise ConfigError(f"--reverse-cidr {exc} (a network address with its prefix length, e.g. 10.96.0.0/12; "
                                  f"at most {MAX_ZONES} reverse zones)") from None
        try:
            zone_networks(self.reverse_cidrs)
        except ReverseError as exc:
            raise ConfigError(f"--reverse-cidr: {exc}") from None
        if self.loadbalance not in ("off", "round_robin"):
            raise ConfigError(f"--loadbalance must be round_robin or off: {self.loadbalance!r}")
        if self.discovery not in ("on", "off"):
            raise ConfigError(f"--discovery must be on or off: {self.discovery!r}")
        if not self.listen:
            raise ConfigError("--listen: at least one address is needed")
        self._check_transfers()
        if self.startup_timeout < 0:
            raise ConfigError(f"--startup-timeout must be >= 0: {self.startup_timeout}")
        if self.resync < 0:
            raise ConfigError(f"--resync must be >= 0 (0 disables): {self.resync}")
        if not 0 <= self.delete_grace <= 60:
            raise ConfigError(f"--delete-grace must be in range [0, 60] seconds (0: off): {self.delete_grace}")
        if self.lameduck < 0 or self.lameduck > 300:
            raise ConfigError(f"--lameduck must be in range [0, 300] seconds: {self.lameduck}")
        check_upstreams(self.upstreams)
        if not 0 < self.upstream_timeout <= 60:
            raise ConfigError(f"--upstream-timeout must be in range (0, 60] seconds: {self.upstream_timeout}")
        if self.upstream_policy not in ("random", "round_robin", "sequential"):
            raise ConfigError(f"--policy must be random, round_robin or sequential: {self.upstream_policy!r}")
        if not 1 <= self.max_concurrent <= 1_000_000:
            raise ConfigError(f"--max-concurrent must be in range [1, 1000000]: {self.max_concurrent}")
        if not 1 <= self.max_tcp_connections <= 1_000_000:
            raise ConfigError(f"--max-tcp-connections must be in range [1, 1000000]: {self.max_tcp_connections}")
        if not 0 < self.tcp_idle_timeout <= 3600:
            raise ConfigError(f"--tcp-idle-timeout must be in range (0, 3600] seconds: {self.tcp_idle_timeout}")
        if not 0 < self.tcp_first_query_timeout <= 3600:
            raise ConfigError(f"--tcp-first-query-timeout must be in range (0, 3600] seconds: {self.tcp_first_query_timeout}")
        if not 0 <= self.max_tcp_connections_per_source <= 1_000_000:
            raise ConfigError("--max-tcp-connections-per-source must be in range [0, 1000000] (0: no cap): "
                              f"{self.max_tcp_connections_per_source}")
        if not 0 <= self.tcp_max_queries <= 1_000_000_000:
            raise ConfigError(f"--tcp-max-queries must be in range [0, 1000000000] (0: no limit): {self.tcp_max_queries}")
        if not 1 <= self.workers <= 64:
            raise ConfigError(f"--workers must be in range [1, 64]: {self.workers}")
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            raise ConfigError(f"--kubeconfig {self.kubeconfig}: no such file")
        for path in self.manifests:
            if not path.exists():
                raise ConfigError(f"--manifests {path}: no such file or directory")
        return self

    def _check_transfers(self) -> None:
        try:
            transfer_networks(self.transfer_to)
        except ValueError as exc:
            raise ConfigError(f"--transfer-to {exc}") from None
        if not 0 <= self.ixfr_journal_bytes <= 1 << 30:
            raise ConfigError(f"--ixfr-journal-bytes must be in range [0, 1073741824]: {self.ixfr_journal_bytes}")
        if not 1 <= self.max_transfers <= 1000:
            raise ConfigError(f"--max-transfers must be in range [1, 1000]: {self.max_transfers}")
        if not 0 < self.ixfr_journal_age <= 7 * 86400:
            raise ConfigError(f"--ixfr-journal-age must be in range (0, 7d] seconds: {self.ixfr_journal_age}")
        if self.notify and not self.transfer_to:
            raise ConfigError("--notify needs --transfer-to (the secondaries must be allowed to transfer)")
        for host, port in self.notify:
            if not _address_or_hostname(host):
                raise ConfigError(f"--notify {hostport_text(host, port)}: {host!r} is neither an IP address nor a host name")
        if self.tsig_key_file is not None:
            from .xfr.tsig import KeyFileError, load_key  # (dnspython's TSIG: loaded only when a key is given)

            if not self.transfer_to:
                raise ConfigError("--tsig-key-file needs --transfer-to (who may transfer): without it transfers are off")
            try:
                load_key(self.tsig_key_file)
            except KeyFileError as exc:
                raise ConfigError(f"--tsig-key-file {exc}") from None

    @property
    def uses_api(self) -> bool:
        return self.kubeconfig is not None or self.in_cluster

    def describe_source(self) -> str:
        if self.manifests:
            return "manifests " + ", ".join(str(p) for p in self.manifests)
        if self.kubeconfig is not None:
            return f"Kubernetes API via {self.kubeconfig}" + (f" (context {self.context})" if self.context else "")
        if self.in_cluster:
            return "Kubernetes API (in-cluster service account)"
        return "the bundled example manifests"


def advertised_addresses(config: Config) -> tuple[str, ...]:
    """The addresses `ns.dns.<zone>` answers with (project decision 7).

    Explicit `--ns-address` wins; in a pod, POD_IPS/POD_IP (downward API); else
    the listen addresses, with a wildcard replaced by this host's address.
    """
    if config.ns_addresses:
        return config.ns_addresses
    pod_ips = os.environ.get("POD_IPS") or os.environ.get("POD_IP")
    if pod_ips:
        return tuple(ip.strip() for ip in pod_ips.split(",") if ip.strip())
    out: list[str] = []
    for host, _ in config.listen:
        if host in ("0.0.0.0", "::", ""):
            try:
                host = socket.gethostbyname(socket.gethostname())
            except OSError:
                host = "127.0.0.1"
        if host not in out:
            out.append(host)
    return tuple(out)


def kube_settings(config: Config) -> KubeSettings:
    """What the Kubernetes source reads of `config`, built here so the sources never import the
    configuration (which knows the DNS side: zones, reverse CIDRs)."""
    from .sources.kube import KubeSettings

    return KubeSettings(config.kubeconfig, config.context, config.in_cluster, config.labels,
                        config.local_cluster == "auto", config.resync, config.delete_grace)
