"""dnsperf query files, one per mix, generated from the data set's naming scheme.

Every mix is deterministic (seeded) and spreads its queries over many names,
so a server cannot win by answering one hot name. dnsperf loops over a file,
so every name recurs: that is how real clients behave too.

The `realistic` mix models what pods actually send. A pod's resolver has
`ndots:5` and a search path; glibc asks A and AAAA for every candidate name
and stops at the first name that exists. With a cluster-set search path
(`<ns>.svc.clusterset.local svc.clusterset.local clusterset.local`), looking
up `svc-7.bench-7.svc.clusterset.local` (4 dots < 5) first asks
`svc-7.bench-7.svc.clusterset.local.<ns>.svc.clusterset.local`,
`...svc.clusterset.local.svc.clusterset.local` and
`...clusterset.local.clusterset.local` (all NXDOMAIN) before the name itself;
a short name `svc-7.bench-7` expands to `svc-7.bench-7.<ns>.svc...`
(NXDOMAIN) and then `svc-7.bench-7.svc.clusterset.local`. So most queries are
NXDOMAIN or NODATA, as in a real cluster.
"""

from __future__ import annotations

import random
from pathlib import Path

from .dataset import CLUSTER, HEADLESS_NS, ZONE, Spec, dashed, endpoint_ip, headless_name, svc_name, vip6

MAX_LINES = 20000

# name -> (description, builder)
MIXES = (
    "clusterset_a",
    "aaaa",
    "srv_bare",
    "srv_named",
    "headless10_a",
    "headless100_a",
    "endpoint_a",
    "nxdomain",
    "realistic",
)

DESCRIPTIONS = {
    "clusterset_a": "A of ClusterSetIP services (all imports)",
    "aaaa": "AAAA of ClusterSetIP services (half dual-stack, half NODATA)",
    "srv_bare": "SRV of the service name",
    "srv_named": "SRV of _http._tcp.<service>",
    "headless10_a": "A of a headless service with 10 endpoints",
    "headless100_a": "A of a headless service with 100 endpoints (EDNS, ~1.7 kB answers)",
    "endpoint_a": "A of per-endpoint names (<host>.<cluster>.<svc>...)",
    "nxdomain": "A of names that do not exist (missing services, search-path expansions)",
    "realistic": "search-path expansion of A+AAAA lookups, SRV and headless (~70% NXDOMAIN/NODATA)",
}


def _sample(rng: random.Random, n: int, k: int) -> list[int]:
    return rng.sample(range(n), k) if n > k else list(range(n))


def build(mix: str, spec: Spec, seed: int = 5) -> list[str]:
    rng = random.Random(f"{mix}-{seed}")
    n = spec.imports
    lines: list[str] = []
    if mix == "clusterset_a":
        lines = [f"{svc_name(spec, i)} A" for i in _sample(rng, n, MAX_LINES)]
    elif mix == "aaaa":
        lines = [f"{svc_name(spec, i)} AAAA" for i in _sample(rng, n, MAX_LINES)]
    elif mix == "srv_bare":
        lines = [f"{svc_name(spec, i)} SRV" for i in _sample(rng, n, MAX_LINES)]
    elif mix == "srv_named":
        lines = [f"_http._tcp.{svc_name(spec, i)} SRV" for i in _sample(rng, n, MAX_LINES)]
    elif mix == "headless10_a":
        lines = [f"{headless_name(10)} A"]
    elif mix == "headless100_a":
        lines = [f"{headless_name(100)} A"]
    elif mix == "endpoint_a":
        for h in spec.headless:
            lines += [f"pod-{k}.{CLUSTER}.{headless_name(h)} A" for k in range(h)]
        for i in _sample(rng, n, 2000):
            k = rng.randrange(spec.endpoints)
            lines.append(f"{dashed(endpoint_ip(i, k, spec.endpoints))}.{CLUSTER}.{svc_name(spec, i)} A")
    elif mix == "nxdomain":
        for j in range(MAX_LINES // 2):
            lines.append(f"missing-{j}.{spec.namespace(j)}.svc.{ZONE} A")
        for i in _sample(rng, n, MAX_LINES // 2):
            lines.append(f"{svc_name(spec, i)}.{spec.namespace(rng.randrange(n))}.svc.{ZONE} A")
    elif mix == "realistic":
        lines = realistic(spec, rng)
    else:
        raise ValueError(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")
    rng.shuffle(lines)
    return lines


def _search(spec: Spec, rng: random.Random, name: str, exists_at: int) -> list[str]:
    """The names a glibc resolver asks (A and AAAA each) for `name`, up to the one that exists."""
    pod_ns = spec.namespace(rng.randrange(max(spec.imports, 1)))
    candidates = [f"{name}.{pod_ns}.svc.{ZONE}", f"{name}.svc.{ZONE}", f"{name}.{ZONE}", name]
    return candidates[: exists_at + 1]


def realistic(spec: Spec, rng: random.Random) -> list[str]:
    out: list[str] = []
    n = max(spec.imports, 1)
    while len(out) < MAX_LINES:
        roll = rng.random()
        i = rng.randrange(n)
        if roll < 0.60:  # "svc.ns.svc.clusterset.local": 4 dots < ndots -> three misses first
            for cand in _search(spec, rng, svc_name(spec, i), 3):
                out += [f"{cand} A", f"{cand} AAAA"]
        elif roll < 0.80:  # short name "svc.ns": one miss, then <name>.svc.<zone>
            for cand in _search(spec, rng, f"svc-{i}.{spec.namespace(i)}", 1):
                out += [f"{cand} A", f"{cand} AAAA"]
        elif roll < 0.90:  # a headless service by its full name
            h = rng.choice(spec.headless) if spec.headless else 10
            for cand in _search(spec, rng, headless_name(h), 3):
                out += [f"{cand} A", f"{cand} AAAA"]
        else:  # an absolute SRV lookup (trailing dot: no search path)
            out.append(f"_http._tcp.{svc_name(spec, i)} SRV")
    return out


def write(mix: str, spec: Spec, directory: Path) -> Path:
    path = directory / f"{mix}.txt"
    path.write_text("\n".join(build(mix, spec)) + "\n")
    return path


def probe_name(spec: Spec) -> str:
    """A name every server must answer with data once it holds the whole data set."""
    return svc_name(spec, spec.imports - 1) if spec.imports else headless_name(spec.headless[0])


__all__ = ["MIXES", "DESCRIPTIONS", "build", "write", "probe_name", "vip6", "HEADLESS_NS"]
