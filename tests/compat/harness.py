"""What the differential fixtures are made of: mcsdns as a subprocess against the
testbed, loading and removing API objects, and the two server pairs.

MCSDNS_COMPAT_SEED picks the generated cluster set (default 7).
MCSDNS_COMPAT_SOURCE=manifests runs mcsdns from a dump of the API objects instead
of --kubeconfig (a debugging aid; CI uses the watch).
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testsupport.mcsdnsserver import McsdnsServer
from testsupport.testbed import ApiError, Testbed

from . import compare
from .coredns import CoreDNS
from .generator import MCS, Dataset

SEED = int(os.environ.get("MCSDNS_COMPAT_SEED", "7"))
SOURCE = os.environ.get("MCSDNS_COMPAT_SOURCE", "kube")
NS_ADDRESS = "127.0.0.1"  # mcsdns --ns-address (decision ns-address)


# --------------------------------------------------------------------------- API objects


def load(testbed: Testbed, objects: list[dict]) -> None:
    """Namespaces first, then everything else, a few writes at a time."""
    for obj in objects:
        if obj["kind"] == "Namespace":
            testbed.apply(obj)
    rest = [o for o in objects if o["kind"] != "Namespace"]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(testbed.apply, rest))


def unload(testbed: Testbed, objects: list[dict]) -> None:
    """Delete what `load` created, except namespaces (nothing would finalize them)."""
    def delete(obj: dict) -> None:
        meta = obj["metadata"]
        try:
            testbed.delete(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        except ApiError:
            pass

    if not testbed.apiserver or not testbed.apiserver.running():
        return
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(delete, [o for o in objects if o["kind"] != "Namespace"]))


def dump_api(testbed: Testbed, path: Path) -> Path:
    """Every object mcsdns reads, as the API serves it, into one manifests file."""
    docs = []
    for api_version, kind in (("v1", "Namespace"), (f"{MCS}/v1alpha1", "ServiceImport"),
                              ("discovery.k8s.io/v1", "EndpointSlice")):
        try:
            items = testbed.list(api_version, kind)["items"]
        except ApiError:
            items = []
        for item in items:
            item["apiVersion"], item["kind"] = api_version, kind
            docs.append(item)
    path.write_text(yaml.safe_dump_all(docs))
    return path


def merge(name: str, *datasets: Dataset) -> Dataset:
    out = Dataset(name, [o for d in datasets for o in d.objects])
    for d in datasets:
        for key, tags in d.tags.items():
            out.tags[key] |= tags
        out.twins.update(d.twins)
        out.missing_namespaces += d.missing_namespaces
    return out


# --------------------------------------------------------------------------- mcsdns


class CompatServer(McsdnsServer):
    """`mcsdns serve` against the testbed (or, for debugging, a dump of it): the mcsdns side of each
    differential pair (CoreDNS is the other), with --upstream none and the contract's --ns-address."""

    def __init__(self, testbed: Testbed, workdir: Path, name: str, *args: str, wait_ready: bool = True) -> None:
        self.testbed = testbed
        self.workdir = workdir
        self.name = name
        self.manifests = workdir / f"{name}.yaml" if SOURCE == "manifests" else None
        source = (["--manifests", str(self.manifests)] if self.manifests
                  else ["--kubeconfig", str(testbed.kubeconfig_path)])
        super().__init__(*source, "--upstream", "none", "--ns-address", NS_ADDRESS, *args, wait_ready=wait_ready)

    def start(self, log_path: Path | None = None, timeout: float = 60) -> "CompatServer":
        if self.manifests:
            dump_api(self.testbed, self.manifests)
        return super().start(log_path or self.workdir / f"{self.name}.log", timeout)

    def refresh(self) -> None:
        """Manifests mode only: re-dump the API and have the server re-read it."""
        if self.manifests and self.proc is not None:
            dump_api(self.testbed, self.manifests)
            self.signal(signal.SIGHUP)




# --------------------------------------------------------------------------- the pairs


@dataclass
class Unsynced:
    """A CoreDNS and an mcsdns started while the ServiceImport CRD did not exist."""

    coredns: CoreDNS
    mcsdns: CompatServer
    contract: Dataset
    diffs: list[compare.Difference] = field(default_factory=list)
    ready_before: tuple[int, int] = (0, 0)
    servfail: dict[str, tuple[str, str]] = field(default_factory=dict)  # qname -> (coredns, mcsdns) rcode

    @property
    def ports(self) -> tuple[int, int]:
        return (self.coredns.port, self.mcsdns.dns_port)


@dataclass
class World:
    """The loaded data sets and the servers over them (CoreDNS first in every port pair)."""

    testbed: Testbed
    coredns: CoreDNS
    mcsdns_all: CompatServer
    mcsdns_testns: CompatServer
    contract: Dataset
    generated: Dataset
    everything: Dataset
    workdir: Path
    created: list[dict] = field(default_factory=list)

    @property
    def ports_all(self) -> tuple[int, int]:
        return (self.coredns.blocks[0].port, self.mcsdns_all.dns_port)

    @property
    def ports_testns(self) -> tuple[int, int]:
        return (self.coredns.blocks[1].port, self.mcsdns_testns.dns_port)

    def apply(self, obj: dict) -> dict:
        """Create or update an object; it is deleted when the suite ends."""
        self.created.append(obj)
        return self.testbed.apply(obj)

    def refresh(self) -> None:
        for server in (self.mcsdns_all, self.mcsdns_testns):
            server.refresh()
