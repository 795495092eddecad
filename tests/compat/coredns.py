"""A real CoreDNS (the trimmed build of tools/testbin/build.sh) on free loopback ports.

One process can hold several server blocks (one DNS port each) that share a
`ready` listener: /ready turns 200 once every block's `kubernetes` plugin has
synced. Started and stopped by PID through testbed.Process (which also makes
the kernel kill it if the test process dies).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testsupport.mcsdnsserver import http_get

from testsupport.testbed import free_port

import dns.exception
import dns.message
import dns.query

from testsupport.testbed import Process, testbin_coredns

ZONE = "clusterset.local"


BIND_PATCH = (
    "the trimmed CoreDNS build lacks the `bind` plugin, which the comparison Corefile needs to listen on "
    "loopback only: add `_ \"github.com/coredns/coredns/plugin/bind\"` to the imports and \"bind\" first in "
    "`directives` of tools/testbin/coredns/main.go, then run tools/testbin/build.sh"
)


def find_coredns() -> Path:
    """The CoreDNS binary (MCSDNS_COREDNS overrides); RuntimeError saying how to build it."""
    return testbin_coredns("bind", BIND_PATCH)


def coredns_version(binary: Path | None = None) -> str:
    """`1.14.7` from `coredns -version` (first line `CoreDNS-1.14.7`)."""
    out = subprocess.run([str(binary or find_coredns()), "-version"], capture_output=True, text=True,
                         timeout=30).stdout
    first = out.strip().splitlines()[0] if out.strip() else "unknown"
    return first.removeprefix("CoreDNS-")


@dataclass
class Block:
    """One server block: `kubernetes cluster.local clusterset.local { ... }` on its own port."""

    namespaces: tuple[str, ...] = ()  # the `namespaces` option; empty = all
    port: int = field(default_factory=free_port)


class CoreDNS:
    """`coredns -conf Corefile`, blocks as given, `startup_timeout` as given."""

    def __init__(self, kubeconfig: Path, workdir: Path, blocks: list[Block] | None = None, *,
                 startup_timeout: str = "30s", name: str = "coredns", zone: str = ZONE) -> None:
        self.binary = find_coredns()
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.blocks = blocks or [Block()]
        self.startup_timeout = startup_timeout
        self.ready_port = free_port()
        self.name = name
        self.zone = zone  # the multicluster zone (the conformance suite's --dns-domain)
        self.corefile = workdir / f"Corefile-{name}"
        self.process: Process | None = None

    @property
    def port(self) -> int:
        return self.blocks[0].port

    def corefile_text(self) -> str:
        out = []
        for block in self.blocks:
            ns = f"\n        namespaces {' '.join(block.namespaces)}" if block.namespaces else ""
            out.append(
                f".:{block.port} {{\n"
                f"    bind 127.0.0.1\n"
                f"    errors\n"
                f"    ready 127.0.0.1:{self.ready_port}\n"
                f"    kubernetes cluster.local {self.zone} {{\n"
                f"        kubeconfig {self.kubeconfig}\n"
                f"        multicluster {self.zone}\n"
                f"        startup_timeout {self.startup_timeout}{ns}\n"
                f"    }}\n"
                f"}}\n"
            )
        return "".join(out)

    def start(self, *, wait_ready: bool = True, timeout: float = 60.0) -> "CoreDNS":
        self.corefile.write_text(self.corefile_text())
        self.process = Process(self.name, [str(self.binary), "-conf", str(self.corefile)],
                               self.workdir / f"{self.name}.log")
        self.process.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.process.running():
                raise RuntimeError(f"CoreDNS exited:\n{self.process.tail()}")
            if all(self.answers(b.port) for b in self.blocks) and (not wait_ready or self.ready()[0] == 200):
                return self
            time.sleep(0.1)
        tail = self.process.tail()
        self.stop()
        raise RuntimeError(f"CoreDNS not {'ready' if wait_ready else 'answering'} within {timeout}s:\n{tail}")

    def answers(self, port: int) -> bool:
        try:
            dns.query.udp(dns.message.make_query(self.zone + ".", "SOA"), "127.0.0.1", port=port, timeout=0.3)
            return True
        except (dns.exception.Timeout, OSError):
            return False

    def ready(self) -> tuple[int, str]:
        return http_get(self.ready_port, "/ready")

    def tail(self, lines: int = 40) -> str:
        return self.process.tail(lines) if self.process else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def __enter__(self) -> "CoreDNS":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
