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

Two kinds of mixes keep a reply cache from answering for the server (mcsdns
keeps up to 32,768 reply packets; CoreDNS's `cache` keys by name): each name
mix again with every name in random letter case (`<mix>_case`: DNS names are
case-insensitive, the reply echoes the question's spelling, and 200,000 lines
are more distinct packets than any cache holds), and `random_subdomain`, a
flood of unique missing names `<random>.<svc>.<ns>.svc.clusterset.local`
below existing services (what a random-subdomain attack sends).
"""

from __future__ import annotations

import random
from pathlib import Path

from .dataset import CLUSTER, HEADLESS_NS, ZONE, Spec, dashed, endpoint_ip, headless_name, svc_name, vip6

MAX_LINES = 20000
UNCACHED_LINES = 200_000  # lines of the random-case and random-subdomain mixes: > any reply cache

BASE_MIXES = (
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
CASE = "_case"  # suffix: the base mix with each name in random letter case
RANDOM_SUBDOMAIN = "random_subdomain"
MIXES = BASE_MIXES + tuple(m + CASE for m in BASE_MIXES) + (RANDOM_SUBDOMAIN,)

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
    RANDOM_SUBDOMAIN: "A of unique missing names <random>.<svc>.<ns>.svc... below existing services (NXDOMAIN)",
}
DESCRIPTIONS.update({m + CASE: f"{DESCRIPTIONS[m]}, each name in random letter case" for m in BASE_MIXES})


def base_mix(mix: str) -> str:
    """The name mix a random-case mix is built from (`clusterset_a_case` -> `clusterset_a`)."""
    return mix[: -len(CASE)] if mix.endswith(CASE) else mix


def needs_edns(mix: str) -> bool:
    """Whether the mix's answers need EDNS (more than 512 bytes: the 100-endpoint headless service).

    The other mixes are sent as a pod's resolver sends them (glibc and musl: no EDNS unless
    `options edns0`); those plain queries are also what mcsdns's case-folded cache and its
    parse-free lane take. The `realistic` mixes ask for the 100-endpoint service too: without EDNS
    every server answers those with TC set (a resolver would retry over TCP).
    """
    return base_mix(mix) == "headless100_a"


def cached(mix: str) -> bool:
    """Whether the mix repeats few enough packets for a reply cache to hold them all."""
    return mix in BASE_MIXES


def _sample(rng: random.Random, n: int, k: int) -> list[int]:
    return rng.sample(range(n), k) if n > k else list(range(n))


def build(mix: str, spec: Spec, seed: int = 5, uncached_lines: int = UNCACHED_LINES) -> list[str]:
    """The query lines (`name TYPE`) of `mix`; the uncached mixes have `uncached_lines` lines."""
    if mix.endswith(CASE) and base_mix(mix) in BASE_MIXES:
        return random_case(build(base_mix(mix), spec, seed), uncached_lines, random.Random(f"{mix}-{seed}"))
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
    elif mix == RANDOM_SUBDOMAIN:
        n = max(spec.imports, 1)
        lines = [f"{_label(rng)}.{svc_name(spec, rng.randrange(n))} A" for _ in range(uncached_lines)]
    else:
        raise ValueError(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")
    rng.shuffle(lines)
    return lines


_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"


def _label(rng: random.Random) -> str:
    """A random 12-character label (36^12 of them: every one new)."""
    return "".join(rng.choices(_ALNUM, k=12))


def random_case(lines: list[str], count: int, rng: random.Random) -> list[str]:
    """`count` lines cycling through `lines`, each name with every letter upper-cased at random."""
    out = []
    for j in range(count):
        name, _, rest = lines[j % len(lines)].partition(" ")
        bits = rng.getrandbits(len(name))
        out.append("".join(c.upper() if bits >> k & 1 else c for k, c in enumerate(name)) + " " + rest)
    return out


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


def write(mix: str, spec: Spec, directory: Path, uncached_lines: int = UNCACHED_LINES) -> Path:
    path = directory / f"{mix}.txt"
    path.write_text("\n".join(build(mix, spec, uncached_lines=uncached_lines)) + "\n")
    return path


def read(path: Path) -> list[tuple[str, str]]:
    """A query file's lines as (name, type)."""
    out = []
    for line in path.read_text().splitlines():
        name, _, rdtype = line.partition(" ")
        if name:
            out.append((name, rdtype.strip() or "A"))
    return out


def probe_name(spec: Spec) -> str:
    """A name every server must answer with data once it holds the whole data set."""
    return svc_name(spec, spec.imports - 1) if spec.imports else headless_name(spec.headless[0])


__all__ = ["MIXES", "BASE_MIXES", "DESCRIPTIONS", "base_mix", "needs_edns", "cached", "build", "write", "read", "probe_name", "vip6",
           "HEADLESS_NS"]
