"""`mcsdns follow-primary`: one ready mcsdns pod's address, kept in a file a secondary's configuration imports.

A CoreDNS `secondary` names its primary by address only (a name is refused at start), and each mcsdns
replica counts its own serials, so a secondary follows ONE pod, never the load-balanced Service
(docs/transfers.md, "More than one replica"). This command looks up the headless Service over the pods
(`mcsdns-primaries`) every --interval, chooses one listed address whose server serves the zone's
transfers to this address (its SOA, then an IXFR at that serial answered: synced, not shutting down, and
--transfer-to lets this address in, as it must the secondary beside this command), and writes
--template into --out with MCSDNS_PRIMARY replaced by that address and --port (write, then rename: a
reader sees the old file or the new one, never half of one). It keeps that address while the
name still lists it; when the name no longer does (a rollout, a drained node), it writes another one,
and CoreDNS's `reload` sees the imported file change and transfers the whole zone from the new pod.
While the name does not resolve, or lists no address that serves, the file stays as it is.

Exit codes: 0 (with --once: the file is written), 1 (with --once: no address served), 2 bad flags or
an unreadable template or --out directory.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..options import hostport, seconds

log = logging.getLogger("mcsdns.follow")

PLACEHOLDER = "MCSDNS_PRIMARY"
# A CoreDNS `secondary` directive: what --out holds without --template (import it inside the zone's block).
DEFAULT_TEMPLATE = "secondary {\n    transfer from MCSDNS_PRIMARY\n}\n"
QUERY_TIMEOUT = 2.0  # each lookup and each probe query; a server slower than this is not one to follow


class LookupFailed(Exception):
    """The name could not be looked up (timeout, SERVFAIL, no server): the message says why."""


@dataclass(frozen=True)
class Settings:
    name: str
    server: tuple[str, int] | None
    port: int
    zone: str
    template: str
    out: Path
    interval: float


def interval(text: str) -> float:
    value = seconds(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be in range (0, 3600] seconds: {text}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"must be in range [1, 65535]: {text}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "follow-primary", help="keep one ready mcsdns pod's address in a secondary's configuration file",
        description="Look up NAME (a headless Service over the mcsdns pods, e.g. mcsdns-primaries) every --interval, "
        "choose one listed address that serves the zone's transfers here, and write --template with MCSDNS_PRIMARY replaced by "
        "ADDRESS:PORT into --out (atomically). The address is kept while NAME lists it; when NAME no longer does, "
        "another one is written. For a CoreDNS `secondary` (NodeLocal DNSCache, CoreDNS), whose `reload` re-reads "
        "the imported file: docs/transfers.md.")
    p.add_argument("--name", required=True, help="the name listing the mcsdns pods' addresses (A and AAAA)")
    p.add_argument("--server", metavar="HOST[:PORT]", type=hostport(53),
                   help="the DNS server to ask for NAME (e.g. the cluster DNS Service IP); default: /etc/resolv.conf's")
    p.add_argument("--port", type=port, default=5353, help="the pods' DNS port, written after the address (default 5353)")
    p.add_argument("--zone", default="clusterset.local",
                   help="the zone whose transfers a pod must serve to be chosen (default clusterset.local)")
    p.add_argument("--template", metavar="FILE", type=Path,
                   help="what to write, MCSDNS_PRIMARY standing for ADDRESS:PORT ([V6]:PORT); default a CoreDNS "
                   "`secondary { transfer from MCSDNS_PRIMARY }` directive")
    p.add_argument("--out", metavar="FILE", type=Path, required=True,
                   help="the file to write (its directory must exist); rewritten only when the address changes")
    p.add_argument("--interval", metavar="DURATION", type=interval, default=5.0,
                   help="how often to look NAME up (default 5s)")
    p.add_argument("--once", action="store_true", help="write the file once and exit (1: no address answered)")
    p.set_defaults(run=run)


def settings_from(args: argparse.Namespace) -> Settings:
    """The parsed flags -> Settings; ValueError names the flag and what is wrong."""
    template = DEFAULT_TEMPLATE
    if args.template is not None:
        try:
            template = args.template.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--template {args.template}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
        if PLACEHOLDER not in template:
            raise ValueError(f"--template {args.template}: {PLACEHOLDER} does not occur in it (where the address goes)")
    if not args.out.parent.is_dir():
        raise ValueError(f"--out {args.out}: the directory {args.out.parent} does not exist")
    zone = args.zone.lower().rstrip(".")
    if not zone:
        raise ValueError("--zone: empty")
    return Settings(args.name, args.server, args.port, zone, template, args.out, args.interval)


def sort_key(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(address)
    return ip.version, int(ip)


def lookup(name: str, server: tuple[str, int] | None) -> list[str]:
    """The A and AAAA addresses of `name`, sorted; [] when the name has none; LookupFailed otherwise."""
    import dns.exception
    import dns.resolver

    resolver = dns.resolver.Resolver(configure=server is None)
    if server is not None:
        resolver.nameservers, resolver.port = [server[0]], server[1]
    resolver.timeout = resolver.lifetime = QUERY_TIMEOUT
    found: list[str] = []
    for rdtype in ("A", "AAAA"):
        try:
            found += [r.address for r in resolver.resolve(name, rdtype, search=True)]
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            continue
        except dns.exception.DNSException as exc:
            raise LookupFailed(str(exc) or type(exc).__name__) from None
    return sorted(set(found), key=sort_key)


def serves(address: str, port: int, zone: str) -> bool:
    """Whether the mcsdns at address:port serves `zone`'s transfers to us: it answers the zone's SOA, and
    an IXFR at that serial over TCP gets NOERROR and the SOA back (the SOA alone, while nothing changed).
    A pod shutting down refuses this probe in its lameduck while it still answers queries (xfr/policy.py),
    so a listed pod that a rollout is replacing is not chosen."""
    import dns.exception
    import dns.message
    import dns.query
    import dns.rcode
    import dns.rdatatype

    try:
        reply = dns.query.udp(dns.message.make_query(zone + ".", dns.rdatatype.SOA), address, port=port,
                              timeout=QUERY_TIMEOUT)
        soa = [r for r in reply.answer if r.rdtype == dns.rdatatype.SOA]
        if reply.rcode() != dns.rcode.NOERROR or not soa:
            return False
        probe = dns.message.make_query(zone + ".", dns.rdatatype.IXFR)
        probe.authority.append(soa[0])
        reply = dns.query.tcp(probe, address, port=port, timeout=QUERY_TIMEOUT)
    except (dns.exception.DNSException, OSError, ValueError):
        return False
    return reply.rcode() == dns.rcode.NOERROR and any(r.rdtype == dns.rdatatype.SOA for r in reply.answer)


def render(template: str, address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address else address
    return template.replace(PLACEHOLDER, f"{host}:{port}")


def write_if_changed(out: Path, text: str) -> bool:
    """`text` into `out` (a temporary file beside it, then rename); False when `out` already holds it.

    The temporary name ends in `.tmp`, so an `import DIR/*.conf` never reads it."""
    try:
        if out.read_text() == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass
    temporary = out.with_name(f".{out.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, out)
    return True


class Follower:
    """One pass per interval: keep the current address while listed, else choose and write another."""

    def __init__(self, settings: Settings, lookup: Callable[[str, tuple[str, int] | None], list[str]] = lookup,
                 serves: Callable[[str, int, str], bool] = serves) -> None:
        self.settings = settings
        self.lookup = lookup
        self.serves = serves
        self.current: str | None = None
        self.last_said = ""

    def say(self, level: int, message: str, kind: str | None = None) -> None:
        """Log `message` unless it repeats the last one (a lookup failing every 5 s is one line, not one a
        pass); `kind`, where given, is what counts as a repeat (a failing lookup's detail names whichever
        of its A and AAAA queries failed first, which may change from one pass to the next)."""
        said = kind or message
        if said != self.last_said:
            log.log(level, "%s", message)
            self.last_said = said

    def step(self) -> bool:
        """One pass; True when the file holds a chosen address afterwards."""
        s = self.settings
        try:
            listed = self.lookup(s.name, s.server)
        except LookupFailed as exc:
            self.say(logging.WARNING, f"cannot look {s.name} up ({exc}): keeping {self.describe()}",
                     kind=f"lookup failed: keeping {self.describe()}")
            return self.current is not None
        if self.current is None:
            self.current = self.already_written(listed)
        if self.current is not None and self.current in listed:
            return True
        chosen = next((a for a in listed if self.serves(a, s.port, s.zone)), None)
        if chosen is None:
            why = (f"lists {', '.join(listed)}, none serving transfers of {s.zone} here (unsynced, shutting down, "
                   "or --transfer-to leaves this address out)") if listed else "lists no address"
            self.say(logging.WARNING, f"{s.name} {why}: keeping {self.describe()}")
            return self.current is not None
        try:
            write_if_changed(s.out, render(s.template, chosen, s.port))
        except OSError as exc:
            self.say(logging.ERROR, f"cannot write {s.out} ({exc.strerror or exc}): keeping {self.describe()}")
            return self.current is not None
        gone = f"{self.current} is no longer listed by {s.name}; " if self.current else ""
        self.say(logging.INFO, f"{gone}transferring from mcsdns pod {chosen}:{s.port} (written to {s.out})")
        self.current = chosen
        return True

    def already_written(self, listed: list[str]) -> str | None:
        """The listed address --out already holds (this process restarted): kept rather than switched."""
        try:
            text = self.settings.out.read_text()
        except (OSError, UnicodeDecodeError):
            return None
        return next((a for a in listed if render(self.settings.template, a, self.settings.port) == text), None)

    def describe(self) -> str:
        return f"mcsdns pod {self.current}" if self.current else f"{self.settings.out} unwritten"


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        settings = settings_from(args)
    except ValueError as exc:
        print(f"mcsdns follow-primary: {exc}", file=sys.stderr)
        return 2
    follower = Follower(settings)
    if args.once:
        return 0 if follower.step() else 1
    while True:
        follower.step()
        time.sleep(settings.interval)
