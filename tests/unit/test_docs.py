"""The documentation: the settings reference lists every variable the package reads, the README
stays a door (at most 200 lines), and neither it nor the site carries history (issue numbers,
commit ids: those go to CHANGELOG.md)."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
#: hex digits with at least one letter and one digit; the word ed25519 is not one).
ISSUE = re.compile(r"\bissues? \d+|(?<![\w/&#])#\d+\b", re.IGNORECASE)
COMMIT = re.compile(r"\b(?!ed25519\b)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


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


# -- names the docs give: files, modules and commands that exist -----------------------------

#: Folders of the repository whose files the docs name by path.
REPOSITORY_FOLDERS = ("hookline", "tests", "bench", "scripts", "examples", "app", "tasks", "docs",
                      "deploy")
#: A file or folder path in the repository: ``hookline/store/lua/consume.lua``, ``tests/unit/``.
REPOSITORY_PATH = re.compile(rf"(?<![\w./-])(?:{'|'.join(REPOSITORY_FOLDERS)})/[\w./*-]*")
#: ``hookline/<version>``, the User-Agent, is no path.
USER_AGENT = re.compile(r"hookline/\d")
#: A dotted name in the package or the benchmarks (``python -m bench.inflight``): a module, or
#: a module then an attribute.
DOTTED_NAME = re.compile(r"(?<![\w./-])(?:hookline|bench)(?:\.[A-Za-z_]\w*)+")
#: A Lua script named alone (``consume.lua``): one of the package's scripts.
LUA_SCRIPT = re.compile(r"(?<![\w./-])\w+\.lua\b")
#: Fenced code blocks whose lines are not shell commands.
NOT_SHELL = re.compile(r"^\s*```\s*(python|py|pycon|toml|ini|yaml|json|text|diff)\b")
#: A ``hookline`` command at the start of a line, after an optional prompt.
COMMAND_LINE = re.compile(r"^\s*(?:\$\s+)?hookline\s+(?P<rest>\S.*)$")
#: An inline code span.
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _mentions(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(page, mention) for every match of ``pattern`` in README.md and docs/**/*.md."""
    return [(str(path.relative_to(ROOT)), match.group(0).rstrip("."))
            for path in _user_docs() for match in pattern.finditer(path.read_text())]


def _module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a module's own scope, inside if/try/with blocks too."""
    for node in body:
        if isinstance(node, ast.If | ast.Try | ast.With):
            nested = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                nested.extend(handler.body)
            yield from _top_level(nested)
        else:
            yield node


def _defined(path: Path) -> dict[str, ast.AST | str]:
    """Names a module defines: a def or class (its node), an assignment (its node), or an
    import (the full name it stands for, to follow); ``import *`` from the package merged in."""
    names: dict[str, ast.AST | str] = {}
    for node in _top_level(ast.parse(path.read_text()).body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({target.id: node for target in targets if isinstance(target, ast.Name)})
        elif isinstance(node, ast.Import):
            names.update({(alias.asname or alias.name.split(".")[0]): alias.name
                          for alias in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                star = alias.name == "*" and _module_file(node.module.split("."))
                if star:
                    names.update(_defined(star))
                elif alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _class_members(node: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            members.add(statement.name)
        elif isinstance(statement, ast.Assign):
            members |= {target.id for target in statement.targets if isinstance(target, ast.Name)}
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            members.add(statement.target.id)
    return members


def _class_of(value: ast.AST | str, names: dict[str, ast.AST | str]) -> ast.ClassDef | None:
    """The class a name is, or is an instance of (``deliver = DeliverHandle()``), if the
    module defines it."""
    if isinstance(value, ast.ClassDef):
        return value
    call = getattr(value, "value", None)
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
        found = names.get(call.func.id)
        return found if isinstance(found, ast.ClassDef) else None
    return None


def _unresolved(dotted: str) -> str | None:
    """Why ``dotted`` names nothing in the package, or None when it does: its longest module
    prefix exists, the next name is defined there (followed through imports into the package),
    and a member of a class of no bases (or of a module-level instance of one) is defined in
    the class. Read with ast: nothing is imported."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        path = _module_file(parts[:split])
        if path is not None:
            break
    else:
        return "no such module"
    rest = parts[split:]
    if not rest:
        return None
    names = _defined(path)
    value = names.get(rest[0])
    if value is None:
        return f"{'.'.join(parts[:split])} defines no {rest[0]!r}"
    if isinstance(value, str):
        ours = value.split(".")[0] in ("hookline", "bench")
        return _unresolved(".".join([value, *rest[1:]])) if ours else None
    cls = _class_of(value, names)
    if len(rest) > 1 and cls is not None and not cls.bases and rest[1] not in _class_members(cls):
        return f"{cls.name} has no {rest[1]!r}"
    return None


#: Django names that are no module: system check ids (``hookline.E001``,
#: hookline/contrib/django/apps.py) and permissions (``hookline.view_console``,
#: hookline/contrib/django/models.py).
DJANGO_CHECK_ID = re.compile(r"hookline\.(?:[EW]\d{3}|view_console|act_console)")


def _wire_names() -> set[str]:
    """Task and queue names (``hookline.deliver``, ``hookline.retry``): dotted, but no module."""
    tree = ast.parse((PACKAGE / "core" / "messages.py").read_text())
    # And the span attributes' names (``hookline.event.id``): every string of the tracing module.
    spans = ast.parse((PACKAGE / "core" / "tracing.py").read_text())
    return {node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)} | {
        node.value for node in ast.walk(spans)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_every_repository_path_the_docs_name_exists() -> None:
    missing = [(page, path) for page, path in _mentions(REPOSITORY_PATH)
               if not USER_AGENT.match(path) and not any(ROOT.glob(path.rstrip("/")))]
    assert missing == [], f"paths the docs name that the tree does not have: {missing}"


def test_every_lua_script_the_docs_name_exists() -> None:
    missing = [(page, name) for page, name in _mentions(LUA_SCRIPT)
               if not any((PACKAGE / layer / "lua" / name).is_file()
                          for layer in ("store", "transport"))]
    assert missing == [], (f"scripts the docs name that neither hookline/store/lua/ nor "
                           f"hookline/transport/lua/ has: {missing}")


def test_every_dotted_name_the_docs_give_exists_in_the_package() -> None:
    wire = _wire_names()
    wrong = [(page, name, why) for page, name in _mentions(DOTTED_NAME)
             if name not in wire and not DJANGO_CHECK_ID.fullmatch(name)
             and (why := _unresolved(name))]
    assert wrong == [], f"module names the docs give that the package does not have: {wrong}"


def test_the_layout_page_names_every_module_of_the_package() -> None:
    """docs/internals/layout.md walks the package folder by folder: each folder, each module and
    each public module at the top is named there, so a module added or moved shows up."""
    layout = (ROOT / "docs" / "internals" / "layout.md").read_text()
    folders = {path.name for path in PACKAGE.rglob("*") if path.is_dir()
               and (path / "__init__.py").is_file()} - {"lua"}
    modules = {path.stem for path in PACKAGE.rglob("*.py") if path.stem != "__init__"}
    unnamed = sorted(name for name in folders | modules
                     if not re.search(rf"(?<![\w.]){re.escape(name)}\b", layout))
    assert unnamed == [], f"docs/internals/layout.md does not name: {unnamed}"


def _join_continuations(lines: list[str]) -> Iterator[str]:
    """Lines with a shell command's ``\\`` continuations joined, so one command is one line."""
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            yield pending + line
            pending = ""


def _command_lines(path: Path) -> Iterator[str]:
    """What follows ``hookline`` in each command the page shows: a line that starts with it
    (in a shell code block, fenced or indented, or in the README's text; never in a Python
    block), or an inline code span that does."""
    in_fence = skip_fence = False
    for line in _join_continuations(path.read_text().splitlines()):
        if line.lstrip().startswith("```"):
            in_fence, skip_fence = not in_fence, bool(NOT_SHELL.match(line)) and not in_fence
            continue
        if in_fence and skip_fence:
            continue
        match = COMMAND_LINE.match(line)
        if match:
            yield match["rest"]
        elif not in_fence:
            yield from (span[len("hookline "):] for span in CODE_SPAN.findall(line)
                        if span.startswith("hookline "))


def _alternatives(text: str) -> list[str]:
    """``endpoint list|show ID|disable ID [--reason TEXT]`` as its alternatives, split at each
    ``|`` outside brackets; a ``|`` with spaces around it is a pipe, which ends the command, and
    so does a comment."""
    text = re.split(r"\s+#|\s\|\s|&&|;|>", text)[0]
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "|" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _check_tokens(command: Any, path: list[str], tokens: list[str]) -> tuple[list[str], str | None]:
    """Walk ``tokens`` down the click tree from ``command``: each word a group is given names a
    subcommand, each option one the command has. The path walked, and what was wrong."""
    import click

    waiting_for_value = False
    for raw in tokens:
        token = raw.strip("[]")
        if not token.strip(".") or waiting_for_value:  # a value, or "..." for the rest
            waiting_for_value = False
            continue
        if token.startswith("-") and len(token) > 1:
            name = token.split("=")[0]
            options = {opt: param for param in command.params
                       if isinstance(param, click.Option)
                       for opt in (*param.opts, *param.secondary_opts)}
            if name in options:
                param = options[name]
                waiting_for_value = not (param.is_flag or param.count) and "=" not in token
            elif name not in ("-h", "--help") and not command.context_settings.get(
                    "ignore_unknown_options"):
                return path, f"{' '.join(path)} has no option {name}"
        elif isinstance(command, click.Group):
            sub = command.commands.get(token)
            if sub is None:
                return path, f"{' '.join(path)} has no command {token!r}"
            command, path = sub, [*path, token]
    return path, None


def _command_problems(text: str) -> list[str]:
    """What is wrong with ``hookline <text>``. In ``endpoint add|update ID --max-in-flight N``
    the words and options after the last alternative's command belong to every alternative."""
    from hookline.cli.main import main

    alternatives = [shlex.split(part) for part in _alternatives(text)]
    shared = alternatives[-1][1:] if len(alternatives) > 1 else []
    path, problem = _check_tokens(main, ["hookline"], alternatives[0])
    if shared and alternatives[0] and alternatives[0][-1] == path[-1]:
        path, problem = _check_tokens(main, ["hookline"], alternatives[0] + shared)
    problems = [problem] if problem else []
    parent = path[:-1] if len(path) > 1 else path
    group: Any = main
    for name in parent[1:]:
        group = group.commands[name]
    for tokens in alternatives[1:]:
        _, problem = _check_tokens(group, parent, tokens if len(tokens) > 1 else tokens + shared)
        problems += [problem] if problem else []
    return problems


def test_every_hookline_command_the_docs_show_exists() -> None:
    """The click tree, walked without running anything: every ``hookline ...`` line in a code
    block, at the start of a README line or in an inline code span names a command and
    options that exist."""
    wrong = [(str(path.relative_to(ROOT)), text, problem)
             for path in _user_docs() for text in _command_lines(path)
             for problem in _command_problems(text)]
    assert wrong == [], f"commands the docs show that the CLI does not have: {wrong}"


# -- shell blocks: run by a test, or marked as not runnable here ------------------------------

#: Shell blocks on pages whose wording other work owns, identified by (page, first command):
#: what a marker above the block would say. Move an entry into its page as the marker
#: (``<!-- not run: ... -->``, see tests/support/doc_blocks.py) when the page is next edited.
SHELL_BLOCKS_ELSEWHERE = {
    ("README.md", "export REDIS_URL=redis://127.0.0.1:6379/0"):
        "not run: sets the variable for the commands that follow in your own shell",
    ("README.md", "hookline endpoint add shop-42 --url https://example.com/webhooks   # prints "
                  "the signing secret once"):
        "not run: sends to example.com (no internet here); the guides' tests run the same "
        "commands against a loopback receiver",
    ("README.md", "celery -A hookline.worker worker -l info"):
        "run by: tests/integration/test_host_projects.py",
    ("README.md", 'hookline app add acme --name "Acme Corp"'):
        "not run: sends to example.com (no internet here)",
    ("README.md", "hookline stats                                   # queues, scheduled retries, "
                  "dead letters, breakers"):
        "not run: EVENT_ID is a placeholder",
    ("README.md", "export FLOWER_BASIC_AUTH=\"ops:$(python -c 'import secrets; "
                  "print(secrets.token_urlsafe(18))')\""):
        "not run: Flower runs until stopped; tests/integration/test_flower.py starts it with "
        "--address=127.0.0.1 and basic auth",
    ("README.md", "make demo        # a virtualenv, Redis, a worker and a demo receiver; a few "
                  "hundred events"):
        "not run: make's targets, run by CI (.ci/run) and by hand",
    ("docs/getting-started.md", "export REDIS_URL=redis://127.0.0.1:6379/0"):
        "not run: sets the variable for the commands that follow in your own shell",
    ("docs/getting-started.md", "hookline endpoint add shop-42 --url https://example.com/webhooks"
                                "   # prints the secret once"):
        "not run: sends to example.com (no internet here)",
    ("docs/getting-started.md", "export REDIS_PASSWORD=$(openssl rand -hex 24)         # goes "
                                "into REDIS_URL: URL-safe characters"):
        "not run: needs a Docker engine, which this machine does not have",
    ("docs/getting-started.md", "HOOKLINE_ALLOWED_NETWORKS=172.29.77.10/32 docker compose "
                                "--profile demo up -d --build"):
        "not run: needs a Docker engine, which this machine does not have",
    ("docs/getting-started.md", "make demo        # virtualenv, install, Redis, a worker and a "
                                "demo receiver; a few hundred events"):
        "not run: make's targets, run by CI (.ci/run) and by hand",
    ("docs/getting-started.md", "make install                                   # or: pip "
                                "install -e '.[dev,otel]'"):
        "not run: the worker and Flower run until stopped, and the endpoint is example.com",
    # Every block of the page, run in order by its test.
    ("docs/quickstart.md", "*"): "run by: tests/integration/test_quickstart.py",
}


def _shell_blocks() -> list[Any]:
    from tests.support.doc_blocks import code_blocks

    return [block for path in _user_docs() for block in code_blocks(path) if block.is_shell]


def _accounting(block: Any) -> tuple[str, str] | None:
    """What says whether ``block`` runs: its marker, else its entry in the table above."""
    if block.marker is not None:
        return block.marker
    page = str(block.page.relative_to(ROOT))
    entry = SHELL_BLOCKS_ELSEWHERE.get((page, block.first_line)) or SHELL_BLOCKS_ELSEWHERE.get(
        (page, "*"))
    if entry is None:
        return None
    kind, _, what = entry.partition(": ")
    return kind, what


def test_every_shell_block_is_run_by_a_test_or_says_why_not() -> None:
    """Every ```sh (bash, shell, console) block in README.md and docs/ is run by a named test
    that reads the page, or is marked as not runnable here with its reason."""
    unaccounted, wrong = [], []
    for block in _shell_blocks():
        where = f"{block.page.relative_to(ROOT)}:{block.line}"
        accounting = _accounting(block)
        if accounting is None:
            unaccounted.append(f"{where} ({block.first_line[:60]})")
            continue
        kind, what = accounting
        if kind == "not run" and len(what.split()) < 3:
            wrong.append(f"{where}: say why it is not run: {what!r}")
        if kind == "run by":
            test = ROOT / what.split("::")[0]
            page = str(block.page.relative_to(ROOT))
            if not test.is_file():
                wrong.append(f"{where}: no test {what}")
            elif block.page.name != "README.md" and page not in test.read_text():
                wrong.append(f"{where}: {what} does not name {page}, so it cannot run it")
    assert unaccounted == [], (
        "shell blocks neither run by a test nor marked: put <!-- run by: tests/... --> or "
        "<!-- not run: the reason --> on the line above each:\n  " + "\n  ".join(unaccounted))
    assert wrong == [], "\n".join(wrong)


def test_the_table_of_shell_blocks_elsewhere_names_blocks_that_exist() -> None:
    blocks = {(str(block.page.relative_to(ROOT)), block.first_line) for block in _shell_blocks()}
    blocks |= {(page, "*") for page, _ in blocks}
    assert set(SHELL_BLOCKS_ELSEWHERE) - blocks == set()


def test_no_shell_command_hides_in_an_indented_block() -> None:
    """An indented code block cannot carry the marker: shell commands go in a fenced block."""
    from tests.support.doc_blocks import indented_commands

    found = [f"{path.relative_to(ROOT)}:{line}: {text}" for path in _user_docs()
             for line, text in indented_commands(path)]
    assert found == [], "fence these as ```sh blocks (and mark them):\n  " + "\n  ".join(found)
