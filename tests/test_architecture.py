"""The dependency rules of docs/architecture.md, read from the package's own imports.

Every `import` and `from ... import` in mcsdns/ counts, wherever it is written (module level,
inside a function, under `if TYPE_CHECKING:`): a lazy or type-only import is still a dependency
a reader has to follow. The rules are stated by package (the folders of mcsdns/), so a new module
is held to its folder's rules without a list to update:

* no cycle among mcsdns modules;
* nothing imports `app` or `cli` (the assembly and the entry point) but the entry points
  (`cli` builds the App, `workers/supervisor` builds one per process, `__main__` runs the CLI);
* `sources/` never reaches the DNS side (`zone/`, `serve/`, `forward/`, `xfr/`, `admin/`,
  `workers/`, `metrics`, `app`, `cli`), directly or through another module: it turns Kubernetes
  objects into store changes and knows nothing of names, packets or answers;
* `zone/` does no I/O: it reaches only itself, `objects` and `store`, imports only
  computation-only standard modules (plus what the table needs for its log lines, its clock and
  its collector pause), uses `socket` only to convert addresses, and calls no I/O builtin;
* the pure core of `zone/` (the vocabulary, names, the compiler, reverse) imports only itself,
  the object model and computation-only standard modules;
* `zone/vocab` is the bottom: it imports nothing from mcsdns;
* no module imports another's private name (`from .wire import _x`): what crosses a module
  boundary is public, so its owner sees who depends on it;
* every folder of mcsdns/ is one of the packages these rules know;
* docs/architecture.md names every module, so the map stays complete.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mcsdns"

PACKAGES = {"sources", "zone", "serve", "forward", "xfr", "admin", "workers"}  # docs/architecture.md
ENTRY_POINTS = {"mcsdns.app": {"mcsdns.cli", "mcsdns.workers.supervisor"}, "mcsdns.workers.supervisor": {"mcsdns.cli"},
                "mcsdns.cli": {"mcsdns.__main__"}}  # module -> who may import it
DNS_PACKAGES = PACKAGES - {"sources"}
DNS_TOP = {"mcsdns.metrics", "mcsdns.app", "mcsdns.cli"}  # top-level modules of the DNS side
ZONE_MAY_REACH = {"mcsdns.objects", "mcsdns.store"}  # the object model and the store the table reads
PURE = {f"mcsdns.zone.{m}" for m in ("vocab", "names", "compiler", "reverse")}
PURE_MAY_IMPORT = PURE | {"mcsdns.objects"}  # the object model: plain dataclasses and their validation
PURE_STDLIB = {"__future__", "dataclasses", "typing", "enum", "bisect", "ipaddress", "struct", "collections",
               "functools", "itertools", "re"}  # fmt: skip
# zone/ beyond the pure core: sys.maxsize; socket.inet_pton (address text -> bytes, see SOCKET_CONVERSIONS);
# the table's log lines, its clock (SOA serial, compile slices) and its pause of the collector.
ZONE_STDLIB = PURE_STDLIB | {"sys", "socket", "logging", "time", "gc"}
SOCKET_CONVERSIONS = {"inet_pton", "inet_ntop", "AF_INET", "AF_INET6"}
IO_BUILTINS = {"open", "print", "input", "exec", "eval", "breakpoint"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(module: str) -> str | None:
    """`mcsdns.zone.table` -> `zone`; a top-level module (`mcsdns.app`, `mcsdns`) -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


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
            for alias in node.names:  # `from .zone import compiler` names a module; `from .zone.wire import X` does not
                sub = f"{target}.{alias.name}"
                ours.add(sub if (ROOT / (sub.replace(".", "/") + ".py")).is_file() else target)
    ours.discard(name)
    return ours, others


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def graph() -> dict[str, set[str]]:
    return {name: imports_of(path)[0] for name, path in modules().items()}


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


def entry_point_breaks(deps: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, entry point) for every import of `app`/`cli`/the supervisor by a module not allowed to."""
    return [(m, dep) for m, ds in deps.items() for dep in sorted(ds)
            if dep in ENTRY_POINTS and m not in ENTRY_POINTS[dep]]  # fmt: skip


def dns_side(module: str) -> bool:
    return package_of(module) in DNS_PACKAGES or module in DNS_TOP


def sources_breaks(deps: dict[str, set[str]]) -> list[tuple[str, list[str]]]:
    """(sources module, the DNS-side modules it reaches) for every one that reaches some."""
    found = [(m, sorted(d for d in reachable(deps, m) if dns_side(d))) for m in deps if package_of(m) == "sources"]
    return [f for f in found if f[1]]


def zone_breaks(deps: dict[str, set[str]]) -> list[tuple[str, list[str]]]:
    """(zone module, what it reaches outside zone/, objects and store) for every one that reaches more."""
    found = [(m, sorted(d for d in reachable(deps, m) if package_of(d) != "zone" and d not in ZONE_MAY_REACH))
             for m in deps if package_of(m) == "zone"]  # fmt: skip
    return [f for f in found if f[1]]


def test_the_rules_can_fail():
    """Each graph rule finds a break in a graph made to have one, and none in a graph without."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert entry_point_breaks({"mcsdns.zone.table": {"mcsdns.app"}, "mcsdns.cli": {"mcsdns.app"}}) == [
        ("mcsdns.zone.table", "mcsdns.app")]
    through_config = {"mcsdns.sources.kube": {"mcsdns.config"}, "mcsdns.config": {"mcsdns.zone.reverse"}}
    assert sources_breaks(through_config) == [("mcsdns.sources.kube", ["mcsdns.zone.reverse"])]
    assert sources_breaks({"mcsdns.sources.kube": {"mcsdns.store"}, "mcsdns.store": {"mcsdns.objects"}}) == []
    assert zone_breaks({"mcsdns.zone.table": {"mcsdns.store", "mcsdns.serve.resolve"}}) == [
        ("mcsdns.zone.table", ["mcsdns.serve.resolve"])]
    assert zone_breaks({"mcsdns.zone.table": {"mcsdns.store", "mcsdns.zone.wire"}}) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_nothing_imports_the_assembly_or_the_entry_point():
    assert entry_point_breaks(graph()) == []


def test_sources_never_reach_the_dns_side():
    """Not even through another module (the sources once reached `reverse` and `compile` through `config`)."""
    assert sources_breaks(graph()) == []


def test_zone_reaches_only_itself_the_objects_and_the_store():
    assert zone_breaks(graph()) == []


@pytest.mark.parametrize("module", sorted(m for m in modules() if package_of(m) == "zone"))
def test_zone_does_no_io(module: str):
    path = modules()[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    others = imports_of(path)[1]
    allowed = PURE_STDLIB if module in PURE else ZONE_STDLIB
    assert others <= allowed, f"{module} imports {sorted(others - allowed)}"
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not calls & IO_BUILTINS, f"{module} calls {sorted(calls & IO_BUILTINS)}"
    socket_uses = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                   and isinstance(node.value, ast.Name) and node.value.id == "socket"}  # fmt: skip
    assert socket_uses <= SOCKET_CONVERSIONS, f"{module} uses socket.{sorted(socket_uses - SOCKET_CONVERSIONS)}"


@pytest.mark.parametrize("module", sorted(PURE))
def test_the_pure_core_imports_only_itself_and_the_objects(module: str):
    ours = imports_of(modules()[module])[0]
    assert ours <= PURE_MAY_IMPORT, f"{module} imports {sorted(ours - PURE_MAY_IMPORT)}"


def test_the_vocabulary_is_the_bottom():
    assert imports_of(PACKAGE / "zone" / "vocab.py")[0] == set()


def private_imports(path: Path) -> list[str]:
    """The `_private` names `path` imports from other mcsdns modules (`__version__` and the like are public)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("mcsdns")):
            found += [alias.name for alias in node.names
                      if alias.name.startswith("_") and not (alias.name.startswith("__") and alias.name.endswith("__"))]
    return found


def test_private_imports_are_found(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from .wire import _check, public\nfrom mcsdns import __version__\nfrom os import _exit\n")
    assert private_imports(sample) == ["_check"]


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_private_name_crosses_a_module(module: str):
    assert private_imports(modules()[module]) == [], f"{module} imports a private name of another module"


def test_every_folder_is_a_package_with_rules():
    folders = {p.parent.name for p in PACKAGE.glob("*/*.py")}
    assert folders == PACKAGES, "a new folder of mcsdns/ needs its place in the rules (and docs/architecture.md)"
    assert all((PACKAGE / name / "__init__.py").is_file() for name in PACKAGES)


def test_the_architecture_document_names_every_module():
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    missing = [str(p.relative_to(ROOT)) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "__init__.py" and f"`{p.relative_to(PACKAGE)}`" not in text]  # fmt: skip
    assert missing == [], "docs/architecture.md does not describe these modules"
    for name in sorted(PACKAGES):
        assert f"`{name}/`" in text, f"docs/architecture.md does not describe the package {name}/"
