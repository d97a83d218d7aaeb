"""JSON Schemas of the event catalog (``hookline event-type add NAME --schema FILE``): a schema
is checked once, when it is registered, and every published payload of its type against it.
The checking is the ``jsonschema`` library's (the draft the schema's ``$schema`` names, Draft
2020-12 when it names none); remote ``$ref`` are never fetched. Pure: no Redis, no Celery.
``jsonschema`` itself is loaded where a schema is, not by every process that publishes.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hookline.core.errors import InvalidField
from hookline.core.event import shown

#: Largest schema accepted, bytes of compact JSON (it is kept in Redis and read per publish).
MAX_SCHEMA_BYTES = 64 * 1024


class SchemaError(InvalidField):
    """A schema that is not a valid JSON Schema, or a payload its schema refuses."""


def check_schema(schema: Any) -> str:
    """``schema`` as compact JSON, if it is a JSON Schema its own draft accepts."""
    if not isinstance(schema, dict | bool):
        raise SchemaError("schema", f"a JSON Schema is an object (or true/false), got "
                                    f"{shown(schema)}")
    text = json.dumps(schema, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > MAX_SCHEMA_BYTES:
        raise SchemaError("schema", f"the schema is {len(text.encode())} bytes; the limit is "
                                    f"{MAX_SCHEMA_BYTES}")
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators

    validator = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except schema_errors.SchemaError as exc:
        where = json_path(exc.path)
        raise SchemaError("schema", f"the schema is not a valid JSON Schema at {where}: "
                                    f"{exc.message}") from None
    return text


def json_path(path: Any) -> str:
    """A jsonschema error's path as JSONPath: ``$.order.items[2].price``."""
    written = "$"
    for part in path:
        written += f"[{part}]" if isinstance(part, int) else (
            f".{part}" if str(part).isidentifier() else f"[{json.dumps(str(part))}]")
    return written


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    from jsonschema import validators

    schema = json.loads(schema_text)
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    return cls(schema)


def first_violation(schema_text: str, payload: Any) -> tuple[str, str] | None:
    """Where and why ``payload`` breaks the schema: the JSONPath of the first error (the
    shallowest, then by path) and its message (cut to 200 characters), or None."""
    errors = sorted(_validator(schema_text).iter_errors(payload),
                    key=lambda error: (len(error.path), list(map(str, error.path))))
    if not errors:
        return None
    first = errors[0]
    message = first.message if len(first.message) <= 200 else first.message[:200] + "..."
    return json_path(first.path), message


def violation(schema_text: str, payload: Any) -> str | None:
    """``$.path: message`` of :func:`first_violation`, or None."""
    found = first_violation(schema_text, payload)
    return None if found is None else f"{found[0]}: {found[1]}"
