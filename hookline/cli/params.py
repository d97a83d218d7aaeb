"""The command line's own parameter types: a JSON value and a request header, each refused with
click's usage error (naming the option) when malformed."""

from __future__ import annotations

from typing import Any

import click

from hookline.core.errors import InvalidField
from hookline.core.event import parse_json_text, shown
from hookline.core.headers import parse_header


class JsonParam(click.ParamType):
    """A JSON value given on the command line; ``object_only`` demands a JSON object."""

    name = "JSON"

    def __init__(self, *, object_only: bool = False) -> None:
        self.object_only = object_only

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if not isinstance(value, str):
            return value
        field = (param.name if param is not None and param.name else "value").replace("_", " ")
        try:
            parsed = parse_json_text(field, value)  # its depth measured first, on the text
        except InvalidField as exc:
            self.fail(str(exc), param, ctx)
        if self.object_only and not isinstance(parsed, dict):
            self.fail(f"{shown(value)} must be a JSON object, e.g. '{{\"max_attempts\": 5}}'",
                      param, ctx)
        return parsed



class HeaderParam(click.ParamType):
    """``NAME:VALUE``: a request header for every request to the endpoint. The value is
    never echoed back, in an error either."""

    name = "NAME:VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return parse_header(value)
        except InvalidField as exc:
            self.fail(str(exc), param, ctx)

