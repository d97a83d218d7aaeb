"""The package's shape, computed from the source: no import cycles, no import upward through
the layers, stores that never read each other, only Celery's include loading the task module,
and pure modules that load no Celery. (What the wheel ships: tests/unit/test_compose.py and
tests/integration/test_host_projects.py.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Layers, bottom up: a module may import its own layer and those below, never above.
LAYERS = [
    ("core", ["hookline.core", "hookline.compat"]),
    ("store", ["hookline.store"]),
    ("delivery", ["hookline.delivery", "hookline.celeryconfig", "hookline.broker",
                  "hookline.unacked", "hookline.liveness", "hookline.gauges"]),
    ("worker", ["hookline.worker"]),
    ("faces", ["hookline.enqueue", "hookline.cli", "hookline.contrib", "hookline"]),
    ("entry points", ["app", "tasks", "celeryconfig"]),
]
#: Stores never read each other; these read several, one step above them.
MULTI_STORE_READERS = {"hookline.store.gates", "hookline.store.events"}
STORES = {"hookline.store.endpoints", "hookline.store.deadletter", "hookline.store.history",
          "hookline.store.schedule"}


def _module_files() -> dict[str, Path]:
    paths = [*ROOT.glob("hookline/**/*.py"), *ROOT.glob("app/**/*.py"),
             *ROOT.glob("tasks/**/*.py"), ROOT / "celeryconfig.py"]
    found = {}
    for path in paths:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _module_files()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (at any depth of its code, type-checking
    imports aside)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
                node.body = []
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            imported |= {found for found in map(_resolve, names) if found}
        graph[module] = imported - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_of(module: str) -> int:
    best = (-1, -1)
    for level, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), level))
    assert best[1] >= 0, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_back_through_others() -> None:
    assert cycles(import_graph()) == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {other} "
              f"({LAYERS[layer_of(other)][0]})"
              for module, imported in import_graph().items() for other in imported
              if other != "hookline" and layer_of(other) > layer_of(module)]
    assert upward == []


def test_stores_never_import_each_other() -> None:
    crossing = [(module, other) for module, imported in import_graph().items()
                if module in STORES for other in imported if other in STORES]
    assert crossing == []
    assert set(MODULES) >= MULTI_STORE_READERS


def test_only_celery_include_loads_the_task_module() -> None:
    importers = sorted(module for module, imported in import_graph().items()
                       if "hookline.worker.tasks" in imported)
    assert importers == ["tasks.webhooks"]  # the design card's name for it, nothing else


@pytest.mark.parametrize("module", [*sorted(m for m in MODULES if layer_of(m) == 0),
                                    "hookline", "hookline.store.keys"])
def test_a_pure_module_loads_no_celery_or_kombu(module: str) -> None:
    code = (f"import sys, {module}; "
            "print(sorted(m for m in ('celery', 'kombu', 'redis') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    expected = "['redis']" if module == "hookline.store.keys" else "[]"
    assert loaded in ("[]", expected)
