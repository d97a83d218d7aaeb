"""Running the ``hookline`` command in-process and reading what it printed."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner, Result

from hookline.cli import main


def run(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=input)


def succeeds(*args: str, input: str | None = None) -> Result:
    result = run(*args, input=input)
    assert result.exit_code == 0, result.output
    return result


def fails(*args: str, code: int = 1, input: str | None = None) -> Result:
    """The command ends with a one-line error (exit ``code``), not an unhandled exception."""
    result = run(*args, input=input)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    return result


def json_out(*args: str) -> Any:
    return json.loads(succeeds(*args, "--json").stdout)
