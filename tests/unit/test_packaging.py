"""What the distribution promises: every runtime dependency is used, the extras exist, and the
license file matches the declared license."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

#: Distribution name -> the module Hookline would import.
MODULE_OF = {"prometheus-client": "prometheus_client", "python-json-logger": "pythonjsonlogger"}
#: Declared although Hookline imports nothing of theirs, and why.
NOT_IMPORTED = {
    "billiard": ("Celery's pool library: declared to fence the tested range "
                 "(hookline/transport/compat.py)"),
    "hiredis": "redis-py's C reply parser, loaded by redis-py itself",
}


def distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def imported_top_level_modules() -> set[str]:
    found = set()
    for path in (ROOT / "hookline").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_every_runtime_dependency_is_imported_or_has_a_reason() -> None:
    imported = imported_top_level_modules()
    unused = [name for name in map(distribution, PROJECT["dependencies"])
              if MODULE_OF.get(name, name) not in imported and name not in NOT_IMPORTED]
    assert unused == []
    assert set(NOT_IMPORTED) <= set(map(distribution, PROJECT["dependencies"]))


def test_optional_parts_are_extras_not_runtime_dependencies() -> None:
    runtime = set(map(distribution, PROJECT["dependencies"]))
    extras = PROJECT["optional-dependencies"]
    for extra, package in [("django", "django"), ("flask", "flask"), ("flower", "flower")]:
        assert package in map(distribution, extras[extra])
        assert package not in runtime
    # The naive benchmark contender sends with requests; Hookline sends through urllib3.
    assert "requests" not in runtime


def test_the_license_file_is_the_declared_license() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert (ROOT / "hookline" / "py.typed").exists()
    assert any(url for url in PROJECT["urls"].values())
    assert "Typing :: Typed" in PROJECT["classifiers"]


def test_the_package_version_is_the_declared_one() -> None:
    import hookline
    from hookline.core.version import __version__

    assert hookline.__version__ == __version__ == PROJECT["version"]
