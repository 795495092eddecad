"""deploy/monitoring/: the Grafana dashboard and the alerting rules use only metrics mcsdns exports.

* Every metric name in every dashboard query (and template variable) and
  every rule expression is extracted and looked up in the /metrics of a real
  `mcsdns serve` watching the real kube-apiserver, with a forwarder configured
  (so the source and forward families are all there). Names that are not
  exported fail the test, by name.
* `promtool check rules` and `promtool test rules` (Debian's prometheus
  package): each alert fires on a crafted series, none on healthy ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testsupport.mcsdnsserver import ROOT

MONITORING = ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "mcsdns-dashboard.json"
RULES = MONITORING / "mcsdns-alerts.yaml"
RULE_TESTS = MONITORING / "mcsdns-alerts.test.yaml"

KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan", "atan2"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, labels, keywords and ranges left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries ($__rate_interval, 5m)
    text = GROUPING.sub(" ", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[m.end():].lstrip().startswith("("):
            continue  # a function (or an aggregation without a grouping clause)
        if m.group().lower() in KEYWORDS or (m.start() and text[m.start() - 1] in "0123456789."):
            continue
        names.add(m.group())
    return names


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", query)
            assert m, f"template variable {var['name']}: {query}"
            exprs.append(m.group(1))
    return exprs


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def exported_names(metrics_text: str) -> set[str]:
    """Sample names of /metrics, including those of families that have no sample yet (from `# TYPE`)."""
    names = set()
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()
            if kind == "counter":  # the text format names a counter family with its `_total`
                names.add(family if family.endswith("_total") else family + "_total")
            else:
                names.update(family + s for s in suffixes.get(kind, ("",)))
        elif line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group())
    return names


def test_extractor_finds_names_not_functions_or_labels() -> None:
    expr = ('sum by (job, le) (rate(a_bucket{job=~"$job", rcode="x"}[$__rate_interval])) / ignoring(le) '
            'sum without (x) (b_total offset 5m) > 0.5 and on (instance) absent(c) or histogram_quantile(0.99, d)')
    assert metric_names(expr) == {"a_bucket", "b_total", "c", "d"}


def test_dashboard_and_rules_parse() -> None:
    assert len(dashboard_queries()) >= 20 and len(rule_exprs()) >= 10
    referenced = set().union(*map(metric_names, dashboard_queries() + rule_exprs()))
    # The areas the dashboard must cover, by the families that carry them.
    for name in ("coredns_dns_requests_total", "coredns_dns_responses_total", "coredns_dns_request_duration_seconds_bucket",
                 "coredns_proxy_request_duration_seconds_count", "mcsdns_forward_upstream_up", "mcsdns_synced",
                 "mcsdns_watch_restarts_total", "mcsdns_relists_total", "mcsdns_objects_rejected_total",
                 "mcsdns_compiled_answers", "coredns_kubernetes_dns_programming_duration_seconds_bucket"):
        assert name in referenced, name


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not found (apt-get install prometheus; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def test_promtool_check_rules() -> None:
    proc = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in proc.stdout


def test_promtool_unit_tests_fire_every_alert() -> None:
    proc = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                          timeout=120, cwd=MONITORING)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case["alert_rule_test"] if not t["exp_alerts"]}
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert fired == alerts and quiet == alerts


@pytest.mark.kube
def test_every_referenced_metric_is_exported(testbed, fresh_namespace: str, tmp_path: Path) -> None:
    from kube_server import KubeServer, a, ensure_crd, fqdn, service_import
    from upstreams import dead_port

    ensure_crd(testbed)
    testbed.create(service_import(fresh_namespace, "web", ["10.9.0.1"]))
    with KubeServer(testbed.kubeconfig_path, tmp_path / "mcsdns.log", "--upstream", dead_port()) as server:
        server.wait_until_ready()
        server.wait_answer(fqdn("web", fresh_namespace), "A", a("10.9.0.1"))
        server.query("outside.example.", "A", timeout=5)  # one forwarded query (it fails: the upstream is dead)
        status, text = server.http("/metrics")
    assert status == 200
    exported = exported_names(text)
    sources = {"dashboard": dashboard_queries(), "rules": rule_exprs()}
    missing = sorted({(where, name) for where, exprs in sources.items() for e in exprs for name in metric_names(e)
                      if name not in exported})
    assert not missing, f"metrics referenced but not exported by mcsdns: {missing}"
