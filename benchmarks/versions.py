"""Initial sync, propagation and RSS on every Kubernetes version of the matrix, one after another (prints figures).

usage: python -m benchmarks.versions [--minors 1.31,1.33,...] [--sizes 10000,50000] [--rounds 3] [--changes 50]

For each minor built by tools/testbin/build-versions.sh (<testbin cache>/versions/<minor>/, all of
them by default) and then the default testbin (unless one of them runs its release), oldest first:
a test bed of that kube-apiserver over the same data, the scale data set loaded once (by the
oldest version) and its etcd data copied for each version and size, as an upgrade would hand it
over; at each size, mcsdns and CoreDNS synced round after round as benchmarks/sync_cost.py times them (start until the last import answers,
pinned to --cpu; RSS once its CPU is quiet after that, `Server.settle`, and when that was), then, at the first size, `--changes` writes timed until each
running server answers them (the suite's propagation). The last lines are the table: per version
and size, each server's median sync and the ratio mcsdns/CoreDNS of the same run, which a loaded
shared machine disturbs least.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import flags, queries
from .dataset import Spec
from .servers import CoreDns, Mcsdns, Server
from .suite import APISERVER_ARGS, Options, Suite, log
from .sync_cost import time_servers

LABELS = ("mcsdns-api", "coredns")
WARM_UP = 5.0  # seconds a fresh API server is left to settle (start-up hooks, controllers) before the timing


def minors_built(cache: Path) -> list[str]:
    versions = cache / "versions"
    found = [p.name for p in versions.glob("1.*") if (p / "bin" / "kube-apiserver").exists()] if versions.is_dir() else []
    return sorted(found, key=lambda minor: tuple(int(part) for part in minor.split(".")))


def same_release(default: Path, caches: list[Path]) -> bool:
    """Whether one of `caches` runs the default testbin's kube-apiserver release."""
    def version(cache: Path) -> str:
        return subprocess.run([str(cache / "bin" / "kube-apiserver"), "--version"], capture_output=True, text=True,
                              timeout=60).stdout.strip()
    mine = version(default)
    return any(version(cache) == mine for cache in caches)


def propagation(suite: Suite, spec: Spec, changes: int, tag: str) -> dict[str, dict]:
    """The suite's propagation of `changes` writes, both servers running over the loaded API."""
    assert suite.testbed is not None and suite.coredns_bin is not None
    kubeconfig = suite.testbed.kubeconfig_path
    servers: dict[str, Server] = {}
    try:
        servers["mcsdns-api"] = Mcsdns("mcsdns-api", suite.work, None, kubeconfig=kubeconfig)
        servers["coredns"] = CoreDns("coredns", suite.work, None, binary=suite.coredns_bin, kubeconfig=kubeconfig)
        for server in servers.values():
            server.start(queries.probe_name(spec), timeout=900)
        time.sleep(1.0)
        result = suite.propagation(spec, servers, changes, tag=tag)
    finally:
        for server in servers.values():
            server.stop()
    return {label: result[label] for label in servers}


def load(suite: Suite, cache: Path, sizes: list[int]) -> dict[int, Path]:
    """Load each size in turn into one test bed of `cache`'s kube-apiserver; a copy of its etcd data per size."""
    from testsupport.testbed import Testbed

    directory = suite.work / "load"
    snapshots: dict[int, Path] = {}
    for size in sizes:
        bed = Testbed(cache, extra_apiserver_args=APISERVER_ARGS, directory=directory)
        bed.start()
        try:
            bed.install_crd("v0.5.0")
            suite.client = bed.api
            log(f"loading {size} imports")
            suite.load_api(Spec(imports=size, headless=(10, 100, 1000)))
        finally:
            bed.stop()  # etcd stopped: its data directory is whole
        snapshots[size] = suite.work / f"etcd-{size}"
        shutil.copytree(directory / "etcd-data", snapshots[size])
        shutil.rmtree(directory / "pki")  # the next start issues its own
    shutil.rmtree(directory)
    return snapshots


def warm_up(bed: Any) -> None:
    """A fresh API server builds its watch caches (a custom resource's on first use): not a server's sync time."""
    from testsupport.testbed import MCS_GROUP

    for path in (f"/apis/{MCS_GROUP}/v1beta1/serviceimports", "/apis/discovery.k8s.io/v1/endpointslices",
                 "/api/v1/namespaces"):
        bed.api.request("GET", path, query={"resourceVersion": "0", "limit": 1})
    time.sleep(WARM_UP)


def run_version(name: str, cache: Path, suite: Suite, snapshots: dict[int, Path], args: argparse.Namespace,
                table: list[str]) -> None:
    from testsupport.testbed import Testbed

    for n, (size, data) in enumerate(snapshots.items()):
        directory = suite.work / f"bed-{name}-{size}".replace(" ", "-")
        shutil.copytree(data, directory / "etcd-data")
        bed = Testbed(cache, extra_apiserver_args=APISERVER_ARGS, directory=directory)
        try:
            bed.start()
            bed.install_crd("v0.5.0")  # there already: waits until this server serves it
            suite.testbed, suite.client, suite.coredns_bin = bed, bed.api, cache / "bin" / "coredns"
            version = bed.api.request("GET", "/version")["gitVersion"]
            warm_up(bed)
            print(f"== kube-apiserver {version} ({name}), {size} imports", flush=True)
            spec = Spec(imports=size, headless=(10, 100, 1000))
            sizing = argparse.Namespace(imports=size, rounds=args.rounds, servers=",".join(LABELS), cpu=args.cpu)
            figures = time_servers(sizing, suite.work, bed.kubeconfig_path, suite.coredns_bin)
            (mine, _, mine_rss, mine_quiet), (theirs, _, theirs_rss, theirs_quiet) = figures["mcsdns-api"], figures["coredns"]
            table.append(f"{version:<9} {size:>6} imports: sync mcsdns {mine:6.2f} s, CoreDNS {theirs:6.2f} s, "
                         f"ratio {mine / theirs:.2f}; RSS mcsdns {mine_rss:.0f} MB, CoreDNS {theirs_rss:.0f} MB; "
                         f"CPU quiet after mcsdns {mine_quiet:.2f} s, CoreDNS {theirs_quiet:.2f} s")
            if n == 0 and args.changes:
                for label, r in propagation(suite, spec, args.changes, f"v{n}").items():
                    line = (f"{version:<9} {size:>6} imports: propagation {label}: p50 {r['p50_ms']} ms, "
                            f"p99 {r['p99_ms']} ms, timeouts {r['timeouts']} of {args.changes}")
                    print(line, flush=True)
                    table.append(line)
        finally:
            bed.stop()
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    from testsupport.testbed import find_testbin

    p = argparse.ArgumentParser(prog="python -m benchmarks.versions", description=__doc__.splitlines()[0])
    p.add_argument("--minors", help="comma-separated minors (default: every one built, then the default testbin)")
    p.add_argument("--sizes", type=flags.sizes, default=(10000, 50000), help="imports per run, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--changes", type=int, default=50, help="writes timed for propagation, at the first size")
    p.add_argument("--cpu", default="1", help="CPU the servers are pinned to while syncing ('' = any)")
    args = p.parse_args(argv)
    default = find_testbin()
    runs = [(minor, default / "versions" / minor) for minor in (args.minors.split(",") if args.minors
                                                                  else minors_built(default))]
    if not args.minors and not same_release(default, [cache for _, cache in runs]):
        runs.append(("default testbin", default))  # (the newest minor's release is the default: run once)
    suite = Suite(Options(out=Path(tempfile.gettempdir())))
    table: list[str] = []
    try:
        snapshots = load(suite, runs[0][1], sorted(args.sizes))
        for name, cache in runs:
            run_version(name, cache, suite, snapshots, args, table)
    finally:
        shutil.rmtree(suite.work, ignore_errors=True)
    print("\n== per version (medians; ratio = mcsdns / CoreDNS, same run)")
    for line in table:
        print(line)


if __name__ == "__main__":
    sys.exit(main())
