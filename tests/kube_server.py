"""Helpers for the kube watch scenarios (tests/test_kube_*.py): the real `mcsdns serve`
against the testbed (a mcsdnsserver.McsdnsServer), queried with dnspython over UDP. The object
builders are testsupport.objects' (re-exported here).

A subprocess is closer to reality than the App on a thread: it reads the
kubeconfig, parses flags, handles SIGTERM and exits like the deployed server.
"""

from __future__ import annotations

import time
from pathlib import Path

import dns.rcode

# Re-exported for the kube tests: the shared builders, the one `eventually`.
from testsupport.objects import ES_API, MCS, ZONE, endpoint_slice, service_import  # noqa: F401
from testsupport.mcsdnsserver import McsdnsServer, samples  # noqa: F401
from testsupport.polling import eventually  # noqa: F401
from testsupport.testbed import Testbed


# The rules of the project's ClusterRole: list + watch on exactly what mcsdns reads.
# Kept here as data on purpose (the lead's call for issue 3); deploy/base/rbac.yaml carries the same.
CLUSTER_ROLE_RULES = [
    {"apiGroups": [MCS], "resources": ["serviceimports"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]


# --------------------------------------------------------------------------- the CRD


def ensure_crd(testbed: Testbed, version: str = "v0.5.0") -> None:
    """The session default CRD (v1beta1 + v1alpha1), whatever an earlier test left."""
    testbed.install_crd(version)


# --------------------------------------------------------------------------- the server


class KubeServer(McsdnsServer):
    """`mcsdns serve --kubeconfig ...` (the shared mcsdnsserver.McsdnsServer), with the kube tests' probes."""

    def __init__(self, kubeconfig: Path, log_path: Path, *extra: str, startup_timeout: str = "30s") -> None:
        super().__init__(
            "--kubeconfig", str(kubeconfig), "--startup-timeout", startup_timeout, "--log-level", "INFO", *extra,
            wait_ready=False,  # some scenarios start on purpose without being able to sync
        )
        self.requested_log = log_path

    def __enter__(self) -> KubeServer:
        self.start(self.requested_log, timeout=40)
        return self

    def shutdown(self) -> float:
        """SIGTERM; assert a clean exit and return how long it took (shutdown must be prompt)."""
        started = time.monotonic()
        code = self.stop()
        elapsed = time.monotonic() - started
        assert code == 0, f"mcsdns exited with {code}\n{self.tail()}"
        return elapsed

    def tail(self, lines: int = 60) -> str:
        return "--- mcsdns log ---\n" + "\n".join(self.log().splitlines()[-lines:])

    # -- admin HTTP --------------------------------------------------------------

    def ready(self) -> tuple[int, str]:
        return self.http("/ready")

    def wait_until_ready(self, timeout: float = 30.0) -> None:
        eventually(lambda: self.ready()[0] == 200, timeout, what=lambda: f"/ready 200 ({self.ready()})\n{self.tail()}")

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of /metrics, or None."""
        found = [value for got, value in samples(self.http("/metrics")[1], name) if got == labels]  # exactly these labels
        return found[0] if found else None

    # -- DNS -------------------------------------------------------------------

    def answer(self, name: str, rdtype: str = "A") -> tuple[str, list[str]]:
        """(rcode name, sorted answer rdata texts)."""
        reply = self.query(name, rdtype, timeout=1.0)
        rdata = sorted(rd.to_text() for rrset in reply.answer for rd in rrset)
        return dns.rcode.to_text(reply.rcode()), rdata

    def wait_answer(self, name: str, rdtype: str, expected: tuple[str, list[str]],
                    timeout: float = 10.0) -> float:
        """Poll until the answer is `expected`; return the seconds it took."""
        started = time.monotonic()
        expected = (expected[0], sorted(expected[1]))
        eventually(lambda: self.answer(name, rdtype) == expected, timeout, interval=0.01,
                   what=lambda: f"{name} {rdtype} -> {expected}; got {self.answer(name, rdtype)}\n{self.tail()}")
        return time.monotonic() - started




def fqdn(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.{ZONE}"


NXDOMAIN = ("NXDOMAIN", [])
NODATA = ("NOERROR", [])
SERVFAIL = ("SERVFAIL", [])


def a(*ips: str) -> tuple[str, list[str]]:
    return ("NOERROR", sorted(ips))
