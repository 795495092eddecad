"""Real secondaries of mcsdns on loopback: Knot 3 (`knotd`) and BIND 9 (`named`), with TSIG, and
CoreDNS's `secondary` plugin (the testbin CoreDNS), which has no TSIG.

Each writes its own configuration into a work directory, transfers the clusterset zone (or the
`zone` given) from the primary (mcsdns) at `primary_port`, signed with `key` (name, algorithm, base64
secret) where it can sign, and serves it on a free loopback port. `serial()` is the serial it serves (None
before the first transfer). Stopped by PID (SIGTERM, then SIGKILL) however the test ends.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from testsupport.polling import eventually
from testsupport.testbed import free_port, stop_popen, testbin_coredns

ZONE = "clusterset.local."


class Secondary:
    """The common part: the process, its log, the loaded zone's serial."""

    binary = ""
    name = ""
    tsig = True  # it signs its transfer requests with `key`

    def __init__(self, workdir: Path, primary_port: int, key: tuple[str, str, str], load_timeout: float = 30,
                 zone: str = ZONE) -> None:
        self.zone = zone  # the zone it is a secondary of (absolute, with the trailing dot)
        self.executable = self.find_binary()
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.primary_port = primary_port
        self.key = key
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"{self.name}.log"
        self.load_timeout = load_timeout

    package = ""
    conf_name = ""
    flags: tuple[str, ...] = ()  # before `-c <conf>`
    conf_flag = "-c"

    def find_binary(self) -> str:
        """The installed binary's path; RuntimeError naming the Debian package when it is missing."""
        binary = shutil.which(self.binary) or f"/usr/sbin/{self.binary}"
        if not Path(binary).exists():
            raise RuntimeError(f"{self.binary} is not installed (apt-get install {self.package})")
        return binary

    def config(self, key_name: str, algorithm: str, secret: str) -> str:
        """The server's configuration file: listen on self.port, transfer self.zone from the primary with the key."""
        raise NotImplementedError

    def argv(self) -> list[str]:
        conf = self.dir / self.conf_name
        conf.write_text(self.config(*self.key))
        return [*self.flags, self.conf_flag, str(conf)]

    def serial(self) -> int | None:
        """The SOA serial it answers with authority (AA), or None (no zone yet, or not answering)."""
        try:
            reply = dns.query.udp(dns.message.make_query(self.zone, "SOA"), "127.0.0.1", port=self.port, timeout=0.5)
        except Exception:
            return None
        if reply.rcode() != dns.rcode.NOERROR or not reply.flags & dns.flags.AA or not reply.answer:
            return None
        return reply.answer[0][0].serial

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "Secondary":
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([self.executable, *self.argv()], stdout=self._log, stderr=subprocess.STDOUT)
        try:
            eventually(lambda: self.proc.poll() is None and self.serial() is not None, timeout=self.load_timeout,
                       what=lambda: f"{self.name} loading the zone from mcsdns: {self.log()[-3000:]}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            stop_popen(self.proc, 10)
            self._log.close()


class KnotSecondary(Secondary):
    binary, name, package, conf_name = "knotd", "knot", "knot", "knot.conf"

    def config(self, key_name: str, algorithm: str, secret: str) -> str:
        return (
            f'server:\n    rundir: "{self.dir}"\n    listen: 127.0.0.1@{self.port}\n'
            "    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n"
            f"key:\n  - id: {key_name}\n    algorithm: {algorithm}\n    secret: {secret}\n"
            f"remote:\n  - id: primary\n    address: 127.0.0.1@{self.primary_port}\n    key: {key_name}\n"
            f"acl:\n  - id: notify\n    address: 127.0.0.1\n    key: {key_name}\n    action: notify\n"
            f'database:\n    storage: "{self.dir}"\n'
            "log:\n  - target: stderr\n    any: info\n"
            f"zone:\n  - domain: {self.zone}\n    master: primary\n    acl: notify\n"
            f'    storage: "{self.dir}"\n    zonefile-sync: -1\n    zonefile-load: none\n    journal-content: none\n')


class BindSecondary(Secondary):
    binary, name, package, conf_name = "named", "bind", "bind9", "named.conf"
    flags = ("-g", "-n", "1")  # foreground, logging to stderr; one worker thread

    def config(self, key_name: str, algorithm: str, secret: str) -> str:
        return (
            f'options {{\n  directory "{self.dir}";\n  pid-file "{self.dir}/named.pid";\n'
            f'  session-keyfile "{self.dir}/session.key";\n  managed-keys-directory "{self.dir}";\n'
            f"  listen-on port {self.port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n"
            "  recursion no;\n  dnssec-validation no;\n  minimal-responses no-auth;\n  check-names secondary ignore;\n"
            "  notify no;\n};\ncontrols { };\n"
            f'key "{key_name}" {{ algorithm {algorithm}; secret "{secret}"; }};\n'
            f'zone "{self.zone.rstrip(".")}" {{\n  type secondary;\n  file "{self.dir}/zone.db";\n'
            f"  primaries port {self.primary_port} {{ 127.0.0.1 key {key_name}; }};\n"
            f"  allow-notify {{ 127.0.0.1; }};\n}};\n")


class CoreDNSSecondary(Secondary):
    """CoreDNS's `secondary` plugin (plugin/secondary, serving through plugin/file's lookup).

    What its source (CoreDNS 1.14.7, plugin/file/secondary.go, notify.go, file.go) does, which
    docs/transfers.md repeats: it asks AXFR only, never IXFR, so every change costs a whole zone;
    it signs nothing (no TSIG: `key` is ignored, and mcsdns must run without `--tsig-key-file`); a
    NOTIFY is acknowledged and acted on only when its source address is a `transfer from` address
    (the port is not compared), and then it asks the primary's SOA over TCP and transfers if that
    serial is newer (RFC 1982); otherwise it checks at the SOA refresh (+ up to 5 s jitter).
    """

    binary, name, conf_name = "coredns", "coredns", "Corefile"
    tsig = False
    conf_flag = "-conf"

    def find_binary(self) -> str:
        return str(testbin_coredns("secondary", "no `secondary` plugin: rebuild it with tools/testbin/build.sh"))

    def config(self, key_name: str, algorithm: str, secret: str) -> str:
        return (f"{self.zone}:{self.port} {{\n    bind 127.0.0.1\n"
                f"    secondary {{\n        transfer from 127.0.0.1:{self.primary_port}\n    }}\n}}\n")
