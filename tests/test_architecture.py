"""The dependency rules of docs/architecture.md, read from the package's own imports.

Every `import` and `from ... import` in mcsdns/ counts, wherever it is written (module level,
inside a function, under `if TYPE_CHECKING:`): a lazy or type-only import is still a dependency
a reader has to follow. The rules:

* no cycle among mcsdns modules;
* nothing imports `app` or `cli` (the assembly and the entry point) but the entry points
  (`cli` builds the App, `__main__` runs the CLI);
* `sources/` never imports the DNS side, directly or through another module: it turns
  Kubernetes objects into store changes and knows nothing of names, packets or answers;
* the pure core (the vocabulary, names, compile, reverse) imports only itself, the object model
  and computation-only standard modules, and calls no I/O builtin;
* `vocab` is the bottom: it imports nothing from mcsdns;
* docs/architecture.md names every module, so the map stays complete.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mcsdns"

ENTRY_POINTS = {"mcsdns.app": {"mcsdns.cli", "mcsdns.workers.supervisor"}, "mcsdns.workers.supervisor": {"mcsdns.cli"},
                "mcsdns.cli": {"mcsdns.__main__"}}  # module -> who may import it
DNS_SIDE = {f"mcsdns.{m}" for m in (
    "zone.vocab", "zone.names", "zone.compiler", "zone.reverse", "zone.dnssd", "zone.wire", "zone.table", "serve.resolve", "serve.transport", "forward.forwarder",
    "forward.replycheck", "serve.querylog", "metrics", "admin.discovery", "admin.server", "xfr.zonefile", "app", "workers.supervisor", "workers.sharing", "workers.updates", "cli",
    "xfr.transfer", "xfr.tsigkey", "xfr.notify", "serve.tcp", "xfr.journal",
)}  # fmt: skip
PURE = {f"mcsdns.{m}" for m in ("zone.vocab", "zone.names", "zone.compiler", "zone.reverse")}
PURE_MAY_IMPORT = PURE | {"mcsdns.objects"}  # the object model: plain dataclasses and their validation
PURE_STDLIB = {"__future__", "dataclasses", "typing", "enum", "bisect", "ipaddress", "struct", "collections",
               "functools", "itertools", "re"}  # fmt: skip
IO_BUILTINS = {"open", "print", "input", "exec", "eval", "breakpoint"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> tuple[set[str], set[str]]:
    """(mcsdns modules, other top-level modules) that `path` imports anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    ours: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "mcsdns":
                    ours.add(alias.name)
                else:
                    others.add(top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "mcsdns":
                others.add(target.split(".")[0])
                continue
            for alias in node.names:  # `from . import compile` names a module; `from .wire import X` does not
                sub = f"{target}.{alias.name}"
                ours.add(sub if (ROOT / (sub.replace(".", "/") + ".py")).is_file() else target)
    ours.discard(name)
    return ours, others


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p)[0] for p in sorted(PACKAGE.rglob("*.py"))}


def cycles(deps: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in deps.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(deps):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_cycles():
    """The rule below can fail: a cycle through three modules and a self-contained pair are found."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_nothing_imports_the_assembly_or_the_entry_point():
    wrong = [(m, dep) for m, deps in graph().items() for dep in deps
             if dep in ENTRY_POINTS and m not in ENTRY_POINTS[dep]]  # fmt: skip
    assert wrong == []


def reachable(deps: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in deps.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_sources_never_import_the_dns_side():
    """Not even through another module (the sources once reached `reverse` and `compile` through `config`)."""
    deps = graph()
    wrong = [(m, sorted(reachable(deps, m) & DNS_SIDE)) for m in deps if m.startswith("mcsdns.sources")]
    assert [w for w in wrong if w[1]] == []


@pytest.mark.parametrize("module", sorted(PURE))
def test_the_pure_core_does_no_io(module: str):
    path = ROOT / (module.replace(".", "/") + ".py")
    ours, others = imports_of(path)
    assert ours <= PURE_MAY_IMPORT, f"{module} imports {sorted(ours - PURE_MAY_IMPORT)}"
    assert others <= PURE_STDLIB, f"{module} imports {sorted(others - PURE_STDLIB)}"
    calls = {node.func.id for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}  # fmt: skip
    assert not calls & IO_BUILTINS, f"{module} calls {sorted(calls & IO_BUILTINS)}"


def test_the_vocabulary_is_the_bottom():
    assert imports_of(PACKAGE / "zone" / "vocab.py")[0] == set()


def test_the_architecture_document_names_every_module():
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    missing = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "__init__.py" and f"`{p.relative_to(PACKAGE)}`" not in text]  # fmt: skip
    assert missing == [], "docs/architecture.md does not describe these modules"
