"""The documentation: the settings reference lists every variable the package reads, the README
stays a door (at most 200 lines), and neither it nor the site carries history (issue numbers,
commit ids: those go to CHANGELOG.md)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from hookline.core import variables
from hookline.core.config import Settings, load_settings, setting_names

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hookline"
#: A variable name as the source spells it: a string literal, or the start of one.
VARIABLE = re.compile(r"""["'](?P<name>(?:HOOKLINE|CELERY)_[A-Z0-9_]*[A-Z0-9])""")
#: A name read from the environment whatever its prefix.
ENVIRON_READ = re.compile(r"""os\.(?:environ\.get|getenv)\(\s*["'](?P<name>[A-Z][A-Z0-9_]*)["']""")
#: History that belongs in CHANGELOG.md: "issue 23", "issues 12", "#23", and commit ids (7 to 40
#: hex digits with at least one letter and one digit).
ISSUE = re.compile(r"\bissues? \d+|(?<![\w/&#])#\d+\b", re.IGNORECASE)
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def _reference_module():
    """docs/hooks/reference.py, the generator the site's build runs, loaded by path."""
    path = ROOT / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _names_in_source() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        names |= {match["name"] for match in VARIABLE.finditer(text)}
        names |= {match["name"] for match in ENVIRON_READ.finditer(text)}
    # A prefix the source completes at run time (HOOKLINE_* in an error message) is no variable.
    return {name for name in names if not name.endswith("_")}


class _NamesRead(dict[str, str]):
    """An empty environment that remembers every variable name asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.names.add(key)
        return super().get(key, default)


def test_the_loader_reads_exactly_the_declared_variables() -> None:
    """``setting_names()`` comes from the declarations; the loader itself, run on a recording
    environment, asks for the same names (with the Sentinel, cluster and WAIT branches)."""
    asked: set[str] = set()
    for extra in ({}, {"REDIS_URL": "sentinel://h:26379/0", "HOOKLINE_SENTINEL_MASTER": "m"}):
        env = _NamesRead()
        env.update(extra)
        load_settings(env)
        asked |= env.names
    assert asked == set(setting_names())


def test_declared_defaults_are_the_settings_defaults() -> None:
    assert load_settings({}) == Settings()


def test_every_variable_the_package_reads_is_in_the_settings_reference() -> None:
    reference = _reference_module().settings_reference()
    documented = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", reference, re.MULTILINE))
    read = _names_in_source() | set(setting_names())
    assert {"HOOKLINE_MAX_ATTEMPTS", "CELERY_WORKER_POOL", "REDIS_URL"} <= read
    assert read - documented == set()


def test_each_variable_is_declared_once_with_a_meaning() -> None:
    names = [variable.name for variable in variables.ALL]
    assert len(names) == len(set(names))
    assert all(variable.meaning.strip() for variable in variables.ALL)


def test_celery_worker_settings_are_read_and_checked() -> None:
    assert variables.celery_worker_settings({}) == {
        "worker_pool": "threads", "worker_concurrency": 512, "worker_prefetch_multiplier": 1,
        "worker_soft_shutdown_timeout": 30.0}
    from hookline.core.config import ConfigError

    with pytest.raises(ConfigError, match="CELERY_WORKER_CONCURRENCY"):
        variables.celery_worker_settings({"CELERY_WORKER_CONCURRENCY": "many"})


def test_readme_is_a_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the rest into docs/"


def _user_docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("path", _user_docs(), ids=lambda path: str(path.relative_to(ROOT)))
def test_docs_carry_no_issue_numbers_or_commit_ids(path: Path) -> None:
    text = path.read_text()
    found = [match.group(0) for pattern in (ISSUE, COMMIT) for match in pattern.finditer(text)]
    assert found == [], f"{path.name}: history belongs in CHANGELOG.md: {found}"


def test_every_page_is_in_the_navigation() -> None:
    """mkdocs --strict fails on an unlisted page too; this says which, without a build."""
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert {page for page in pages if page not in nav} == set()
