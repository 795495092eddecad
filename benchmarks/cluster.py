"""Figures of mcsdns in a real one-node cluster (testsupport/cluster.py), stored and printed.

* time from `up` to a Ready node with cluster DNS answering;
* the mcsdns image's size beside CoreDNS's (both built by tools/testbin/build-images.sh);
* pod start to Ready of an mcsdns pod (a `kubectl rollout restart`) at N ServiceImports, each with
  one EndpointSlice of two endpoints;
* the latency a client pod sees for one name through the cluster DNS's stub zone against the same
  query sent to the mcsdns Service directly (kdig's own timing, in the client pod).

usage: python -m benchmarks.cluster [--imports 1000,10000] [--queries 300] [--out FILE]   (as root)
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import re
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO

from testsupport import objects
from testsupport.cluster import (
    Cluster,
    client_sh,
    deployment_ready,
    image_archives,
    kustomize_overlay,
    point_coredns_at,
    start_client,
)
from testsupport.testbed import testbin_cache

from . import provenance

NAMESPACE = "mcsdns"
BULK_NAMESPACE = "bench"


def _time(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def image_size(archive: Path) -> dict:
    """Bytes of an OCI archive's layers: as shipped (gzip where compressed) and unpacked."""
    with tarfile.open(archive) as tar:
        def blob(digest: str) -> IO[bytes]:
            member = tar.extractfile("blobs/sha256/" + digest.split(":", 1)[1])
            assert member is not None
            return member

        index = json.load(tar.extractfile("index.json"))
        manifest = json.load(blob(index["manifests"][0]["digest"]))
        shipped = unpacked = 0
        for layer in manifest["layers"]:
            shipped += layer["size"]
            stream = blob(layer["digest"])
            if layer["mediaType"].endswith("gzip"):
                stream = gzip.GzipFile(fileobj=stream)
            while chunk := stream.read(1 << 20):
                unpacked += len(chunk)
    return {"layers_bytes": shipped, "unpacked_bytes": unpacked}


def add_imports(cl: Cluster, have: int, want: int) -> None:
    """ServiceImports svc-HAVE..svc-WANT-1, each with one EndpointSlice of two ready endpoints."""
    api = cl.api()
    api.apply(objects.namespace(BULK_NAMESPACE))
    for i in range(have, want):
        api.create(objects.service_import(BULK_NAMESPACE, f"svc-{i}", [f"10.{246 + i // 65536}.{i // 256 % 256}.{i % 256}"]))
        api.create(objects.endpoint_slice(BULK_NAMESPACE, f"svc-{i}-c1", f"svc-{i}", "c1",
                                          [(f"10.247.{i // 256 % 256}.{i % 256}", True),
                                           (f"10.248.{i // 256 % 256}.{i % 256}", True)]))


def start_to_ready(cl: Cluster) -> list[float]:
    """`kubectl rollout restart`; seconds from each new pod's start to its Ready condition."""
    before = {p["metadata"]["name"] for p in _pods(cl)}
    cl.kubectl("-n", NAMESPACE, "rollout", "restart", "deployment/mcsdns")
    cl.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/mcsdns", "--timeout=600s", timeout=620)
    durations = []
    for pod in _pods(cl):
        if pod["metadata"]["name"] in before or pod["metadata"].get("deletionTimestamp"):
            continue
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        durations.append((_time(ready["lastTransitionTime"]) - _time(pod["status"]["startTime"])).total_seconds())
    return sorted(durations)


def _pods(cl: Cluster) -> list[dict]:
    out = cl.kubectl("-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=mcsdns", "-o", "json").stdout
    return json.loads(out)["items"]


def latencies(cl: Cluster, server: str, name: str, count: int) -> list[float]:
    """kdig's reported round trip (ms, 0.1 ms resolution) for ``count`` queries of ``name`` at ``server``."""
    script = f"for i in $(seq {count}); do kdig +noall +stats +time=2 @{server} {name}; done"
    out = client_sh(cl, script, timeout=600).stdout
    return [float(m) for m in re.findall(r"\) in ([0-9.]+) ms", out)]


def summary(values: list[float]) -> dict:
    values = sorted(values)
    return {"n": len(values), "median": round(statistics.median(values), 2),
            "p90": round(values[int(len(values) * 0.9) - 1], 2), "max": round(values[-1], 2)}


def run(imports: list[int], queries: int) -> dict:
    cache = testbin_cache()
    archives = image_archives(cache)
    sizes = {name: image_size(archives[name].resolve()) for name in ("mcsdns", "coredns")}
    with tempfile.TemporaryDirectory(prefix="mcsdns-cluster-") as tmp:
        cl = Cluster(Path(tmp) / "cluster", cache)
        started = time.monotonic()
        cl.up()
        up_seconds = time.monotonic() - started
        try:
            cl.kubectl("apply", "-k", str(kustomize_overlay(Path(tmp) / "overlay")))
            cl.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/mcsdns", "--timeout=300s", timeout=320)
            mcsdns_ip = cl.kubectl("-n", NAMESPACE, "get", "service", "mcsdns", "-o",
                                   "jsonpath={.spec.clusterIP}").stdout
            start_client(cl)
            point_coredns_at(cl, mcsdns_ip, Path(tmp) / "corefile")
            cl.api().apply(objects.namespace("demo"))
            cl.api().apply(objects.service_import("demo", "web", ["10.245.0.10"]))
            name = "web.demo.svc.clusterset.local."
            deadline = time.monotonic() + 60
            while "10.245.0.10" not in client_sh(cl, f"dig +short {name}", check=False).stdout:
                if time.monotonic() > deadline:
                    raise RuntimeError("the stub zone never answered")
                time.sleep(1)
            latency = {"through_stub_zone": summary(latencies(cl, "10.96.0.10", name, queries)),
                       "mcsdns_service_directly": summary(latencies(cl, mcsdns_ip, name, queries))}
            ready = {}
            have = 0
            for count in imports:
                add_imports(cl, have, count)
                have = count
                ready[str(count)] = start_to_ready(cl)
                assert deployment_ready(cl.api(), NAMESPACE, "mcsdns")
        finally:
            cl.down()
    return {"up_to_ready_node_and_dns_seconds": round(up_seconds, 1),
            "image_size": sizes,
            "pod_start_to_ready_seconds": ready, "latency_ms": latency, "queries": queries}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--imports", default="1000,10000", help="ServiceImport counts, ascending")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    started = provenance.now()
    figures = run([int(n) for n in args.imports.split(",")], args.queries)
    result = {"command": "python -m benchmarks.cluster " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": started, "commit": provenance.commit(), "machine": provenance.machine(), **figures}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
