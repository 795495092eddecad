"""docs/metrics.md's table of every metric family, read from the declarations themselves.

Every family mcsdns exports is declared by a prometheus_client call with a literal name and help
(`CounterMetricFamily("mcsdns_relists", "Full lists ...", labels=[...])` at scrape time, or a
`Counter`/`Gauge`/`Histogram` object), in any module of the package. This module reads those calls
from the source (`ast`, nothing runs), so a new family is in the table as soon as the table is
regenerated, and tests/test_metrics.py fails while the table is stale or a scraped family is
missing from it. The `process_*` families come from prometheus_client's ProcessCollector, whose
own families are listed.

    python -m mcsdns.admin.metrics_doc docs/metrics.md    # rewrite the table between its markers
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # mcsdns/
BEGIN = "<!-- metrics: generated from the declarations in mcsdns/ by `python -m mcsdns.admin.metrics_doc docs/metrics.md` -->"
END = "<!-- end of metrics -->"
# prometheus_client's declaring calls -> the type a scrape shows.
KINDS = {
    "CounterMetricFamily": "counter", "GaugeMetricFamily": "gauge", "HistogramMetricFamily": "histogram",
    "SummaryMetricFamily": "summary", "InfoMetricFamily": "info", "StateSetMetricFamily": "stateset",
    "Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary", "Info": "info",
    "Enum": "stateset",
}
CLIENT_MODULES = ("prometheus_client", "prometheus_client.core", "prometheus_client.metrics_core",
                  "prometheus_client.metrics")


@dataclass(frozen=True)
class Family:
    name: str  # as a scrape shows it: a counter's with `_total`
    kind: str
    labels: tuple[str, ...]
    help: str


class UndocumentableFamily(ValueError):
    """A declaration whose name or help is not a literal string: the table could not list it."""


def _client_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> prometheus_client class, for the classes this module imports from it."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in CLIENT_MODULES:
            for alias in node.names:
                out[alias.asname or alias.name] = alias.name
    return out


def _strings(node: ast.AST | None, names: dict[str, ast.AST]) -> tuple[str, ...] | None:
    """A label list written as a literal, a name assigned one in the same function, or a sum of those."""
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in names:
        return _strings(names[node.id], {k: v for k, v in names.items() if k != node.id})
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _strings(node.left, names), _strings(node.right, names)
        return None if left is None or right is None else left + right
    return None


def _assigned(scope: ast.AST) -> dict[str, ast.AST]:
    """Name -> value of the plain `name = value` assignments in `scope` (the last one of a name)."""
    return {node.targets[0].id: node.value for node in ast.walk(scope)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}


def _family(call: ast.Call, kind: str, where: str, names: dict[str, ast.AST]) -> Family:
    kwargs = {k.arg: k.value for k in call.keywords}
    name = call.args[0] if call.args else kwargs.get("name")
    documentation = call.args[1] if len(call.args) > 1 else kwargs.get("documentation")
    if not all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in (name, documentation)):
        raise UndocumentableFamily(f"{where}: a metric family's name and help must be literal strings "
                                   "(docs/metrics.md is generated from them)")
    label_node = kwargs.get("labels", kwargs.get("labelnames"))
    if label_node is None and len(call.args) > 2 and not kind.endswith("family"):
        label_node = call.args[2]  # Counter(name, help, labelnames)
    labels = () if label_node is None else _strings(label_node, names)
    if labels is None:
        raise UndocumentableFamily(f"{where}: a metric family's label names must be a list of literal strings "
                                   "(or a name assigned one in the same function, or a sum of those)")
    base = name.value.removesuffix("_total") if kind == "counter" else name.value  # type: ignore[union-attr]
    return Family(base + "_total" if kind == "counter" else base, kind, labels,
                  " ".join(documentation.value.split()))  # type: ignore[union-attr]


def declared(package: Path = PACKAGE) -> list[Family]:
    """Every family declared in the package's modules, by name."""
    found: dict[str, Family] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        classes = _client_names(tree)
        module_names = _assigned(tree)
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.id if isinstance(node.func, ast.Name) else None
            cls = classes.get(func or "")
            if cls == "ProcessCollector":
                for family in _process_families():
                    found.setdefault(family.name, family)
            elif cls in KINDS:
                inner = [s for s in scopes if s.lineno <= node.lineno <= (s.end_lineno or s.lineno)]
                names = {**module_names, **(_assigned(max(inner, key=lambda s: s.lineno)) if inner else {})}  # innermost function
                family = _family(node, KINDS[cls], f"{path.relative_to(package.parent)}:{node.lineno}", names)
                found.setdefault(family.name, family)
    return sorted(found.values(), key=lambda f: f.name)


def _process_families() -> list[Family]:
    """What ProcessCollector exports on this platform (Linux: memory, CPU, file descriptors, start time)."""
    from prometheus_client import ProcessCollector

    out = []
    for fam in ProcessCollector(registry=None).collect():
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        out.append(Family(name, fam.type, (), " ".join(fam.documentation.split())))
    return out


def table(families: list[Family] | None = None) -> str:
    """The generated block of docs/metrics.md, markers included."""
    lines = [BEGIN, "", "| family | type | labels | meaning |", "|---|---|---|---|"]
    for f in declared() if families is None else families:
        labels = ", ".join(f"`{label}`" for label in f.labels) or "-"
        lines.append(f"| `{f.name}` | {f.kind} | {labels} | {f.help.replace('|', chr(92) + '|')} |")
    return "\n".join(lines + ["", END])


def main(argv: list[str] | None = None) -> int:
    from ..options import replace_block

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(table())
        return 0
    for name in args:
        path = Path(name)
        path.write_text(replace_block(path.read_text(), BEGIN, END, table()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
