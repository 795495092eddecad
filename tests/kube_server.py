"""Helpers for the kube watch scenarios (tests/test_kube_*.py): the real `mcsdns serve`
against the testbed (a serverproc.Server), queried with dnspython over UDP, and object
builders.

A subprocess is closer to reality than the App on a thread: it reads the
kubeconfig, parses flags, handles SIGTERM and exits like the deployed server.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import dns.rcode

from serverproc import Server, eventually  # noqa: F401  (re-exported for the kube tests)
from testbed import Testbed

MCS = "multicluster.x-k8s.io"
ES_API = "discovery.k8s.io/v1"
ZONE = "clusterset.local"
SERVICE_NAME = "multicluster.kubernetes.io/service-name"
SOURCE_CLUSTER = "multicluster.kubernetes.io/source-cluster"

# The rules of the project's ClusterRole: list + watch on exactly what mcsdns reads.
# Kept here as data on purpose (the lead's call for issue 3); deploy/base/rbac.yaml carries the same.
CLUSTER_ROLE_RULES = [
    {"apiGroups": [MCS], "resources": ["serviceimports"], "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]



# --------------------------------------------------------------------------- objects


def service_import(namespace: str, name: str, ips: list[str] | None = None, *, headless: bool = False,
                   api_version: str = f"{MCS}/v1beta1", port: int = 80) -> dict:
    spec: dict[str, Any] = {
        "type": "Headless" if headless else "ClusterSetIP",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
    }
    if ips is not None:
        spec["ips"] = ips
    return {"apiVersion": api_version, "kind": "ServiceImport",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def endpoint_slice(namespace: str, name: str, service: str, cluster: str | None,
                   endpoints: list[tuple[str, bool]], *, labels: dict[str, str] | None = None,
                   annotations: dict[str, str] | None = None) -> dict:
    """An MCS EndpointSlice; `endpoints` are (ip, ready) pairs."""
    all_labels = {SERVICE_NAME: service, **(labels or {})}
    if cluster is not None:
        all_labels[SOURCE_CLUSTER] = cluster
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": all_labels}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": ES_API, "kind": "EndpointSlice", "metadata": meta, "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in endpoints],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }


def ensure_crd(testbed: Testbed, version: str = "v0.5.0") -> None:
    """The session default CRD (v1beta1 + v1alpha1), whatever an earlier test left."""
    testbed.install_crd(version)


# --------------------------------------------------------------------------- the server


class McsDns(Server):
    """`mcsdns serve --kubeconfig ...` (the shared serverproc.Server), with the kube tests' probes."""

    def __init__(self, kubeconfig: Path, log_path: Path, *extra: str, startup_timeout: str = "30s") -> None:
        super().__init__(
            "--kubeconfig", str(kubeconfig), "--startup-timeout", startup_timeout, "--log-level", "INFO", *extra,
            wait_ready=False,  # some scenarios start on purpose without being able to sync
        )
        self.requested_log = log_path

    def __enter__(self) -> McsDns:
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
        _, text = self.http("/metrics")
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.compile(rf"^{re.escape(name)}(\{{(?P<labels>[^}}]*)\}})? (?P<value>\S+)$", re.M)
        for m in pattern.finditer(text):
            got = ",".join(sorted((m.group("labels") or "").split(","))) if m.group("labels") else ""
            if got == want:
                return float(m.group("value"))
        return None

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
