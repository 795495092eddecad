"""What the docs name stays what exists: metric names, Kubernetes versions, the README's commands.

- Every `mcsdns_*` / `coredns_*` name in README.md and docs/ is one a real server's /metrics exports:
  a sample name (a counter with its `_total`, a histogram's `_bucket`/`_sum`/`_count`) or a
  histogram's family name; a counter named without `_total` is not a name anyone can query.
- Every Kubernetes version the docs say is tested is one `tools/testbin/` builds (a `kube-<minor>/`
  wrapper module), and the counts the docs give are those of the modules.
- Every command block of the README is one a test runs: each block is claimed below by the test that
  runs it, and each line of the install block by the step of tests/test_cluster.py (or the build
  script it relies on) that runs it. A new block or line fails here until a test runs it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from testsupport.mcsdnsserver import ROOT, McsdnsServer

sys.path.insert(0, str(Path(__file__).parent))
from test_monitoring import exported_names  # noqa: E402
from upstreams import dead_port  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
METRIC = re.compile(r"\b(?:mcsdns|coredns)_[a-z0-9_]*[a-z0-9]\b")


def named_metrics() -> dict[str, set[str]]:
    """{metric name: the pages naming it}."""
    names: dict[str, set[str]] = {}
    for page in PAGES:
        for name in METRIC.findall(page.read_text()):
            names.setdefault(name, set()).add(page.relative_to(ROOT).as_posix())
    return names


def test_the_metric_names_are_found() -> None:
    names = named_metrics()
    assert len(names) >= 30 and "mcsdns_objects_rejected_total" in names


def test_every_metric_name_in_the_docs_is_exported() -> None:
    """Scraped from a server with every optional family on: transfers, DNS-SD, a reverse zone and an
    upstream (a dead one; the forwarder's families exist without a reply)."""
    with McsdnsServer("--transfer-to", "127.0.0.1", "--dns-sd", "--reverse-cidr", "10.96.0.0/16",
                "--upstream", dead_port()) as server:
        server.query("web.demo.svc.clusterset.local.", "A")
        status, text = server.http("/metrics")
    assert status == 200
    exported = exported_names(text)
    families = set(re.findall(r"^# TYPE (\S+) (?:histogram|summary)$", text, re.M))
    missing = {name: sorted(pages) for name, pages in named_metrics().items() if name not in exported | families}
    assert missing == {}, f"named in the docs, not exported by mcsdns: {missing}"


# --------------------------------------------------------------------------- Kubernetes versions

MINORS = sorted((p.name.removeprefix("kube-") for p in (ROOT / "tools" / "testbin").glob("kube-1.*")),
                key=lambda minor: tuple(map(int, minor.split("."))))
DEFAULT = re.search(r"k8s\.io/kubernetes v(1\.\d+)\.", (ROOT / "tools/testbin/kube/go.mod").read_text()).group(1)
WORDS = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def expand(text: str) -> list[str]:
    """`1.31 and 1.33-1.37`, `1.31, 1.33, 1.34 and 1.35` -> the minors they name."""
    minors: list[str] = []
    for first, last in re.findall(r"1\.(\d+)(?:-1\.(\d+))?", text):
        minors += [f"1.{n}" for n in range(int(first), int(last or first) + 1)]
    return minors


def all_text() -> str:
    return "\n".join(" ".join(page.read_text().split()) for page in PAGES)


def test_every_kubernetes_version_said_to_be_tested_is_built() -> None:
    text = all_text()
    claims = re.findall(r"[Tt]ested on Kubernetes ((?:\**1\.\d+(?:-1\.\d+)?\**(?:,? (?:and )?)?)+)", text)
    claims += re.findall(r"tested against kube-apiserver \*\*([^*]+)\*\*", text)
    assert len(claims) >= 2, claims
    for claim in claims:
        assert expand(claim) == MINORS, (claim, MINORS)
    rows = set(re.findall(r"^\| (1\.\d+)\.\d+ \|", "\n".join(page.read_text() for page in PAGES), re.M))
    assert rows == set(MINORS), (rows, MINORS)  # the install page's tables: one row per built minor
    for minor in re.findall(r"\b(1\.\d+) is not tested", text):
        assert minor not in MINORS, minor


def test_the_docs_count_the_minors_tools_testbin_builds() -> None:
    text = all_text()
    counts = re.findall(r"each of the (\w+) Kubernetes minors", text) + re.findall(r"builds all (\w+)\b", text)
    assert counts and all(WORDS[c] == len(MINORS) for c in counts), (counts, MINORS)
    besides = re.findall(r"the (\w+) minors besides (?:the default )?(1\.\d+)", text)
    assert besides and all(WORDS[n] == len(MINORS) - 1 and m == DEFAULT for n, m in besides), (besides, DEFAULT)


# --------------------------------------------------------------------------- the README's commands


def readme_blocks() -> list[str]:
    return re.findall(r"^```\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)


def source(*paths: str) -> str:
    return "\n".join((ROOT / p).read_text() for p in paths)


# Each README block, by its first line, and the test that runs it.
RUNNERS = {
    "python3 -m venv .venv": ("tests/test_readme.py", "test_the_first_command_works_on_an_externally_managed_python"),
    ".ci/run": (".ci/run", "python3 -m pytest"),  # the CI's own command
    "$ dig @127.0.0.1 -p 5353": ("tests/test_readme.py", "def test_readme_dig_examples"),
    "buildah bud -t <registry>/mcsdns:0.1.0": ("tests/test_cluster.py", "test_helm_install_runs_ready_after_sync"),
}

# Each line of the install block and where the cluster test (or the build it runs on) runs it.
INSTALL_STEPS = {
    "buildah bud -t <registry>/mcsdns:0.1.0 -f Containerfile . && buildah push <registry>/mcsdns:0.1.0":
        ("tools/testbin/build-images.sh", r'buildah bud .*\n\s*-f "\$repo/Containerfile"'),
    "(cd deploy/base && kustomize edit set image mcsdns=<registry>/mcsdns:0.1.0)":
        ("testsupport/cluster.py", r"as `kustomize edit set image mcsdns=IMAGE` would"),
    "kubectl apply -k deploy/ --server-side":
        ("tests/test_cluster.py", r'kubectl\(cluster, "apply", "-k", str\(kustomize_overlay\(.*"--server-side"'),
    "kubectl -n mcsdns rollout status deployment/mcsdns":
        ("tests/test_cluster.py", r'"rollout", "status", f"deployment/\{name\}"'),
    "# or: helm install mcsdns deploy/helm/mcsdns --namespace mcsdns --create-namespace \\":
        ("tests/test_cluster.py", r'"install", "mcsdns",\s*str\(ROOT / "deploy" / "helm" / "mcsdns"\), "--namespace", NS, '
                                  r'"--create-namespace"'),
    "#       --set image.repository=<registry>/mcsdns --set image.tag=0.1.0":
        ("tests/test_cluster.py", r'"--set", f"image.repository=\{IMAGE.split\(\':\'\)\[0\]\}", "--set", "image.tag=dev"'),
    "#     kubectl label namespace mcsdns pod-security.kubernetes.io/enforce=restricted":
        ("tests/test_cluster.py", r'"label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted"'),
    "MCSDNS_IP=$(kubectl -n mcsdns get service mcsdns -o jsonpath='{.spec.clusterIP}')":
        ("tests/test_cluster.py", r'"get", "service", name, "-o", "jsonpath=\{.spec.clusterIP\}"'),
    "kubectl -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}' > Corefile":
        ("testsupport/cluster.py", r'"-n", "kube-system", "get", "configmap", "coredns", "-o",\s*"jsonpath=\{.data.Corefile\}"'),
    "printf 'clusterset.local:53 {\\n    errors\\n    cache 5\\n    forward . %s\\n}\\n' \"$MCSDNS_IP\" >> Corefile":
        ("testsupport/cluster.py", r'clusterset.local:53 \{\{\\n    errors\\n    cache 5\\n    forward . \{mcsdns_ip\}\\n\}\}\\n'),
    "kubectl -n kube-system create configmap coredns --from-file=Corefile --dry-run=client -o yaml | kubectl replace -f -":
        ("testsupport/cluster.py", r'"create", "configmap", "coredns", f"--from-file=\{corefile\}",\s*"--dry-run=client", "-o", "yaml"'
                                   r'[\s\S]*"replace", "-f", "-"'),
    "kubectl -n kube-system rollout restart deployment/coredns":
        ("testsupport/cluster.py", r'"-n", "kube-system", "rollout", "restart", "deployment/coredns"'),
    "kubectl run dig --rm -it --restart=Never --image=<an image with dig> -- dig +short web.demo.svc.clusterset.local":
        ("tests/test_cluster.py", r'dig\(cluster, "\+short", f"web.\{DEMO\}.svc.\{ZONE\}"\)'),
}


def test_every_readme_block_is_run_by_a_test() -> None:
    blocks = readme_blocks()
    assert len(blocks) == len(RUNNERS), [b.splitlines()[0] for b in blocks]
    for block in blocks:
        first = block.splitlines()[0]
        claimed = [key for key in RUNNERS if first.startswith(key)]
        assert claimed, f"no test runs this README block: {first!r}"
        path, mark = RUNNERS[claimed[0]]
        assert mark in source(path), (first, path, mark)


def test_every_line_of_the_install_block_is_a_step_of_the_cluster_test() -> None:
    (block,) = [b for b in readme_blocks() if b.startswith("buildah bud")]
    lines = [line for line in block.splitlines() if line.strip()]
    assert set(lines) == set(INSTALL_STEPS), set(lines) ^ set(INSTALL_STEPS)
    for line, (path, pattern) in INSTALL_STEPS.items():
        assert re.search(pattern, source(path)), (line, path, pattern)


@pytest.mark.parametrize("page", ["README.md", "docs/install.md"])
def test_the_helm_install_is_the_same_everywhere(page: str) -> None:
    """README's Helm lines are docs/install.md's: the same flags and the namespace label after."""
    text = " ".join((ROOT / page).read_text().replace("#", " ").replace("\\\n", " ").split())
    assert ("helm install mcsdns deploy/helm/mcsdns --namespace mcsdns --create-namespace "
            "--set image.repository=<registry>/mcsdns --set image.tag=0.1.0") in text
    assert "kubectl label namespace mcsdns pod-security.kubernetes.io/enforce=restricted" in text


def test_the_image_is_built_the_same_way_everywhere() -> None:
    """README and docs/install.md build with buildah, as CI does (tools/testbin/build-images.sh)."""
    for page in ("README.md", "docs/install.md"):
        text = (ROOT / page).read_text()
        assert "buildah bud -t " in text and "podman build" not in text, page
    assert "cannot build" not in (ROOT / "docs" / "install.md").read_text()
