"""Imports flow downward only, with no circles (docs/design.md): every `bertkit` import in the source, including the
ones inside functions, goes to the same floor or a lower one, and no module reaches itself again. The model class's
`from_pretrained` calls the loader (bertkit.model.checkpoint), which builds the class it is handed without importing
it; opening a folder (`bertkit.model.folder`) sits above both."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# The floors, bottom first (docs/design.md).
FLOORS = ["lazy", "errors", "io", "answers", "progress", "runtime", "dataclass_io", "pretrained", "tokenizer", "data", "model", "training",
          "tasks", "inference", "jobs", "serve", "api", "cli", "__main__"]


def import_graph() -> dict[str, set[str]]:
    """module -> the bertkit modules it imports (a package's submodule when one is named, else the package)."""
    modules = {}
    for path in (SRC / "bertkit").rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bertkit"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                graph[name] |= subs or ({node.module} & modules.keys())
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & modules.keys()
    return graph


def floor(module: str) -> int:
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 else len(FLOORS)


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_every_package_has_a_floor() -> None:
    packages = {p.name.removesuffix(".py") for p in (SRC / "bertkit").iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert packages <= set(FLOORS), packages - set(FLOORS)


def test_imports_only_flow_downward() -> None:
    upward = sorted(f"{m} -> {t}" for m, targets in import_graph().items() for t in targets if floor(t) > floor(m))
    assert not upward


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert found == [], found


def test_a_new_cycle_is_caught() -> None:
    """The check above fails for a new circle anywhere: the loader importing the model class back (the circle
    bert.py <-> checkpoint.py had until 2026-11-28), or reaching a module above it (checkpoint.py once held
    load_model and so imported heads.py, which imports bert.py)."""
    graph = import_graph()

    def with_edges(*edges: tuple[str, str]) -> dict[str, set[str]]:
        out = {k: set(v) for k, v in graph.items()}
        for a, b in edges:
            out.setdefault(a, set()).add(b)
        return out

    back = with_edges(("bertkit.model.checkpoint", "bertkit.model.bert"))  # bert.py calls checkpoint.py
    grown = with_edges(("bertkit.model.checkpoint", "bertkit.model.folder"))  # folder.py imports checkpoint.py
    new = with_edges(("bertkit.tokenizer.basic", "bertkit.tokenizer.wordpiece"),
                     ("bertkit.tokenizer.wordpiece", "bertkit.tokenizer.basic"))
    for graph_with_a_cycle in (back, grown, new):
        assert cycles(graph_with_a_cycle) != []
