"""The fenced code blocks of a documentation page, with the marker comment right above each.

A shell block in the docs is either run by a test or marked as not runnable here, with the
reason, by an HTML comment on the line just above its opening fence (readers of the site do not
see it):

    <!-- run by: tests/integration/test_guides.py -->
    <!-- not run: needs a Docker engine -->

``tests/unit/test_docs.py`` checks that every shell block has one (or, on a page whose wording
other work owns, an entry in its table), and that a named test exists and reads the page.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

#: The languages of a shell block.
SHELL = frozenset({"sh", "bash", "shell", "console", "zsh"})
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>run by|not run):\s*(?P<what>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line of its opening fence (from 1), its language, its
    text (indent removed) and the marker above it (``("run by", "tests/...")``, ``("not run",
    reason)`` or None)."""

    page: Path
    line: int
    lang: str
    text: str
    marker: tuple[str, str] | None

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    def commands(self) -> list[str]:
        """The block's commands, one per line: ``\\`` continuations joined; blank lines and
        whole-line comments dropped (a trailing comment stays: shlex drops it)."""
        commands, pending = [], ""
        for line in self.text.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command, pending = (pending + line).strip(), ""
            if command and not command.startswith("#"):
                commands.append(command)
        return commands


def code_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent = len(opening["indent"])
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith("```"):
            body.append(lines[end][indent:])
            end += 1
        above = MARKER.match(lines[index - 1]) if index else None
        blocks.append(Block(page, index + 1, opening["lang"].lower(), "\n".join(body),
                            (above["kind"], above["what"]) if above else None))
        index = end + 1
    return blocks


def words(command: str) -> list[str]:
    """A command line as the shell splits it, its trailing comment dropped."""
    return shlex.split(command, comments=True)


#: The first words of a shell command in the docs.
COMMAND_WORDS = frozenset({"hookline", "celery", "python", "python3", "pip", "make", "export",
                           "docker", "curl", "flask", "django-admin", "redis-server", "cd"})


def indented_commands(page: Path) -> list[tuple[int, str]]:
    """(line, text) of each indented code block (four spaces after a blank line, outside a
    fence and a list) that starts with a shell command: such a block cannot carry a marker."""
    found: list[tuple[int, str]] = []
    in_fence = in_list = False
    previous_blank = True
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence, previous_blank = not in_fence, False
            continue
        if in_fence:
            continue
        if not stripped:
            previous_blank = True
            continue
        if re.match(r"\s*(?:[-*+]|\d+\.)\s", line):
            in_list = True
        elif not line.startswith(" "):
            in_list = False
        if (previous_blank and line.startswith("    ") and not in_list
                and stripped.split()[0] in COMMAND_WORDS):
            found.append((number, stripped))
        previous_blank = False
    return found
