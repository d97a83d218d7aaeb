"""The package's shape, computed from the source: the folders of ``hookline/`` are its layers one
to one, no import cycles (in the package and in ``bench/``), no import upward through the
layers, kombu, billiard and Celery's worker internals only where the transport and the worker
live, no module over the size a reader takes in at one sitting, stores that never read each
other, only Celery's include loading the task module, pure modules that load no Celery, and
tests that never lean on the benchmarks. (What the wheel ships: tests/unit/test_compose.py and
tests/integration/test_host_projects.py.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hookline"

#: The modules at the top of ``hookline/`` that users import by name (the docs name each):
#: ``app.config_from_object("hookline.celeryconfig")`` and ``import hookline.operational``.
#: Everything else lives in a layer's folder.
PUBLIC_MODULES = ["hookline.celeryconfig", "hookline.operational"]
#: Layers, bottom up, each one folder of ``hookline/`` (the faces: four folders, the public
#: modules and the package itself): a module may import its own layer and those below, never
#: above.
LAYERS = [
    ("core", ["hookline.core"]),
    ("store", ["hookline.store"]),
    ("transport", ["hookline.transport"]),
    ("delivery", ["hookline.delivery"]),
    ("outbox", ["hookline.outbox"]),
    ("worker", ["hookline.worker"]),
    ("service", ["hookline.service"]),
    ("faces", ["hookline.api", "hookline.cli", "hookline.contrib", "hookline.console",
               *PUBLIC_MODULES, "hookline"]),
    ("entry points", ["app", "tasks", "celeryconfig"]),
]
#: The only layers that may know kombu, billiard and Celery's worker internals.
CELERY_INTERNALS_ALLOWED = ("hookline.transport", "hookline.worker")
#: Celery's public face, fine in any layer above the core: the app, tasks, signals, errors.
CELERY_PUBLIC = {"celery", "celery.signals", "celery.exceptions", "celery.result"}
#: The most lines a module of the package may have.
MAX_MODULE_LINES = 450
#: Stores never read each other; these read several, one step above them.
MULTI_STORE_READERS = {"hookline.store.gates", "hookline.store.events"}
STORES = {"hookline.store.endpoints", "hookline.store.dead_letter_queue", "hookline.store.history",
          "hookline.store.schedule"}
#: Repository code the package never imports: it ships without it.
REPOSITORY_ONLY = ("app", "tasks", "celeryconfig", "bench", "tests", "examples", "scripts")


def _module_files(patterns: Iterable[str]) -> dict[str, Path]:
    found = {}
    for pattern in patterns:
        for path in ROOT.glob(pattern):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _module_files(["hookline/**/*.py", "app/**/*.py", "tasks/**/*.py", "celeryconfig.py"])
BENCH = _module_files(["bench/**/*.py"])
TESTS = _module_files(["tests/**/*.py"])


def _imports(path: Path, *, type_checking: bool) -> Iterator[str]:
    """The absolute names ``path`` imports (``from a import b`` gives ``a.b``), at any depth
    of its code; ``type_checking``: the ones under ``if TYPE_CHECKING:`` too."""
    tree = ast.parse(path.read_text())
    if not type_checking:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
                node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports (type-checking imports aside)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        imported = {_resolve(name, modules) for name in _imports(path, type_checking=False)}
        graph[module] = {found for found in imported if found} - {module}
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


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    best = (-1, -1)
    for level, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix):
                best = max(best, (len(prefix), level))
    assert best[1] >= 0, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# -- the folders are the layers -------------------------------------------------------------


def test_each_folder_of_the_package_is_one_layer() -> None:
    folders = {f"hookline.{path.name}" for path in PACKAGE.iterdir()
               if path.is_dir() and (path / "__init__.py").exists()}
    layered = {prefix for _, prefixes in LAYERS for prefix in prefixes
               if prefix.startswith("hookline.") and prefix not in PUBLIC_MODULES}
    assert folders == layered


def test_the_top_of_the_package_holds_only_its_public_modules() -> None:
    files = {path.name for path in PACKAGE.iterdir() if path.is_file()}
    expected = {"__init__.py", "py.typed", *(f"{m.rpartition('.')[2]}.py" for m in PUBLIC_MODULES)}
    assert files == expected


def test_no_module_is_longer_than_a_sitting() -> None:
    long = {module: lines for module, path in sorted(MODULES.items())
            if module.startswith("hookline")
            and (lines := path.read_text().count("\n")) > MAX_MODULE_LINES}
    assert long == {}


# -- imports --------------------------------------------------------------------------------


def test_no_module_imports_itself_back_through_others() -> None:
    assert cycles(import_graph()) == []


def test_no_benchmark_imports_itself_back_through_others() -> None:
    assert cycles(import_graph(BENCH)) == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {other} "
              f"({LAYERS[layer_of(other)][0]})"
              for module, imported in import_graph().items() for other in imported
              if layer_of(other) > layer_of(module)]
    assert upward == []


def _modules_imported(path: Path) -> set[str]:
    """The modules ``path`` imports from (``from a.b import c``: ``a.b``), type-checking
    imports included: knowing a library's internals for the type checker is knowing them."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _celery_internal(module: str) -> bool:
    root = module.partition(".")[0]
    return root in ("kombu", "billiard") or (root == "celery" and module not in CELERY_PUBLIC)


def test_celery_public_modules_are_not_taken_for_internals() -> None:
    assert not any(map(_celery_internal, ["celery", "celery.signals", "redis", "click"]))
    assert all(map(_celery_internal, ["celery.worker.request", "kombu.exceptions", "billiard",
                                      "celery.app.amqp"]))


def test_only_the_transport_and_the_worker_know_kombu_billiard_and_celery_internals() -> None:
    knowing = sorted(f"{module} imports {name}" for module, path in MODULES.items()
                     if module.startswith("hookline")
                     and not any(_within(module, p) for p in CELERY_INTERNALS_ALLOWED)
                     for name in _modules_imported(path) if _celery_internal(name))
    assert knowing == []


def test_the_package_imports_no_repository_code() -> None:
    leaning = sorted(f"{module} imports {name}" for module, path in MODULES.items()
                     if module.startswith("hookline")
                     for name in set(_imports(path, type_checking=True))
                     if name.partition(".")[0] in REPOSITORY_ONLY)
    assert leaning == []


def test_tests_never_import_the_benchmarks() -> None:
    leaning = sorted(f"{module} imports {name}" for module, path in TESTS.items()
                     for name in set(_imports(path, type_checking=True))
                     if _within(name, "bench"))
    assert leaning == []


def test_the_store_never_reaches_into_the_transport() -> None:
    """The transport settles through the store, never the other way: no store module imports
    the transport (not even for the type checker), and the gate's receipt is plain data, on
    which the gate calls nothing (it reads its fields; the transport reads the settlement)."""
    reaching = sorted(f"{module} imports {name}" for module, path in MODULES.items()
                      if _within(module, "hookline.store")
                      for name in set(_imports(path, type_checking=True))
                      if _within(name, "hookline.transport"))
    assert reaching == []
    tree = ast.parse(MODULES["hookline.store.gates"].read_text())
    [receipt] = [node for node in tree.body
                 if isinstance(node, ast.ClassDef) and node.name == "Receipt"]
    assert [ast.unparse(decorator) for decorator in receipt.decorator_list] == [
        "dataclass(frozen=True)"]
    assert not [node.name for node in receipt.body if isinstance(node, ast.FunctionDef)]
    calls = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute)
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "receipt"]
    assert calls == []


#: What a process held for a message lived in these maps, registries and callbacks before the
#: transport's ledger (hookline/transport/ledger.py) kept it in one object.
LEDGER_ONLY = re.compile(r"\b(_recorded|_members|_settled|HeldMessages|receipt_for|"
                         r"RecordReceipt|mark_settled|after_settle|wait_for_share)\b")


def test_held_messages_are_kept_in_the_ledger_alone() -> None:
    found = sorted(f"{module}: {match.group(0)}" for module, path in MODULES.items()
                   if module.startswith("hookline")
                   for match in LEDGER_ONLY.finditer(path.read_text()))
    assert found == []


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
