"""Per-endpoint request headers: what a header an operator adds must look like.

A receiver may want a header of its own on every request (an API key its gateway checks, a
tenant id). Hookline owns the headers that make a webhook a webhook (``webhook-*``, the
idempotency key, the body's type and length, the host the request goes to) and the hop-by-hop
ones HTTP reserves for the connection: those are refused, whatever their case.

Values may be credentials. They are kept like signing secrets: stored with the endpoint, never
shown in full, logged or carried in task arguments, and never quoted in an error message here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from hookline.core.errors import InvalidField

#: RFC 7230 ``token``: the characters a header name may hold.
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
#: Longest header name, characters.
MAX_NAME_LENGTH = 64
#: Longest header value, characters.
MAX_VALUE_LENGTH = 1024
#: Most headers on one endpoint.
MAX_HEADERS = 20
#: Headers Hookline sets on every request (lower case).
OWNED = frozenset({"content-type", "content-length", "content-encoding", "host",
                   "idempotency-key", "user-agent", "accept",
                   # an ordered endpoint's (hookline.core.ordering's headers)
                   "hookline-sequence", "hookline-ordering-key"})
#: Hop-by-hop headers (RFC 7230 6.1, RFC 2616 13.5.1) and others about the connection.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "trailers",
                        "transfer-encoding", "upgrade", "expect"})
#: What ``--header`` values are masked as.
MASK = "****"


def is_owned(name: str) -> bool:
    """Whether Hookline sets header ``name`` itself on every request (any case)."""
    lower = name.lower()
    return lower.startswith("webhook-") or lower in OWNED


class InvalidHeader(InvalidField):
    """A header refused; the message names the header, never its value."""

    def __init__(self, message: str) -> None:
        super().__init__("header", message)


def check_header_name(name: object) -> str:
    """``name`` if an operator may set it: an RFC 7230 token, not one Hookline owns."""
    if not isinstance(name, str) or not name:
        raise InvalidHeader("a header name must be a non-empty string")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidHeader(f"header name {name[:MAX_NAME_LENGTH]!r}... is longer than "
                            f"{MAX_NAME_LENGTH} characters")
    if not HEADER_NAME.match(name):
        raise InvalidHeader(f"header name {name!r} is not a valid HTTP header name (letters, "
                            "digits and !#$%&'*+-.^_`|~ only)")
    if is_owned(name):
        raise InvalidHeader(f"header {name!r} is set by Hookline on every request and cannot "
                            "be set per endpoint")
    if name.lower() in HOP_BY_HOP:
        raise InvalidHeader(f"header {name!r} is a hop-by-hop header about the connection and "
                            "cannot be set per endpoint")
    return name


def check_header_value(name: str, value: object) -> str:
    """``value`` if it is a valid header value: printable ASCII (spaces inside allowed), at
    most :data:`MAX_VALUE_LENGTH` characters. The message never quotes the value."""
    if not isinstance(value, str):
        raise InvalidHeader(f"header {name!r}: the value must be a string")
    value = value.strip(" \t")
    if not value:
        raise InvalidHeader(f"header {name!r}: the value must not be empty")
    if len(value) > MAX_VALUE_LENGTH:
        raise InvalidHeader(f"header {name!r}: the value is longer than {MAX_VALUE_LENGTH} "
                            "characters")
    if any(not (" " <= char <= "~") for char in value):
        raise InvalidHeader(f"header {name!r}: the value holds a control character, a line "
                            "break or a non-ASCII character")
    return value


def parse_header(text: str) -> tuple[str, str]:
    """``NAME:VALUE`` (the CLI's ``--header``) as a checked (name, value)."""
    name, colon, value = text.partition(":")
    name = name.strip()
    if not colon:
        raise InvalidHeader(f"header {check_header_name(name)!r}: give it as NAME:VALUE")
    name = check_header_name(name)
    return name, check_header_value(name, value)


def merge_headers(current: Mapping[str, str], added: Iterable[tuple[str, str]] = (),
                  removed: Iterable[str] = ()) -> dict[str, str]:
    """``current`` with ``removed`` names taken out and ``added`` set (names compare without
    case: setting ``x-api-key`` replaces ``X-Api-Key``), every header checked."""
    merged = {name: value for name, value in current.items()}
    for name in removed:
        found = [have for have in merged if have.lower() == str(name).lower()]
        if not found:
            raise InvalidHeader(f"header {name!r} is not set on this endpoint")
        for have in found:
            del merged[have]
    for name, value in added:
        name = check_header_name(name)
        value = check_header_value(name, value)
        for have in [have for have in merged if have.lower() == name.lower()]:
            del merged[have]
        merged[name] = value
    if len(merged) > MAX_HEADERS:
        raise InvalidHeader(f"an endpoint may have at most {MAX_HEADERS} headers")
    return merged


def masked(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` fit to show: names kept, every value masked."""
    return {name: MASK for name in headers}
