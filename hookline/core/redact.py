"""Redacting URLs for anything a person reads: error messages, log lines, CLI output, Flower.

A receiver's URL may carry credentials in its userinfo (``user:pass@``), its query string
(``?token=...``) or its path (``/services/T0/B0/XXXXXXXX``). :func:`url` keeps what tells an
operator which receiver it is (scheme, host, port, plain-word path segments) and replaces the
rest with ``***``; :func:`text` does that to every URL inside free text (an exception's message,
urllib3's ``... with url: /path?token=...``); :func:`scrub` also masks the secret parts of one
known URL wherever they appear (a receiver echoing its path in an error body).
:class:`RedactingFilter` applies :func:`text` to log records, their tracebacks included. Pure:
no Redis, no Celery.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from hookline.core import sentinel

MASK = "***"
#: A path segment shown as it is: a plain word (no digits), short enough not to be a token.
_PLAIN_SEGMENT = re.compile(r"[A-Za-z][A-Za-z_-]{0,14}\Z")
#: A URL's scheme and its ``://``, as far as a malformed URL still shows them.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: A host as :func:`malformed` shows it: a name, an IPv4 address or a bracketed IPv6 one.
_HOST = re.compile(r"(?:[A-Za-z0-9._~%-]*|\[[0-9A-Fa-f:.]*\]?)\Z")
#: A URL with a scheme inside free text.
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
#: urllib3's and http.client's way of naming a request target without its host.
_TARGET_IN_TEXT = re.compile(r"(?P<lead>\burl: |\"(?:GET|POST|PUT|HEAD|DELETE|PATCH) )"
                             r"(?P<target>/[^\s'\"]*)")


def path(target: str) -> str:
    """A request target (``/path?query``) with token-like segments and the query masked."""
    bare, question, _ = target.partition("?")
    bare = bare.partition("#")[0]
    segments = [segment if not segment or _PLAIN_SEGMENT.match(segment) else MASK
                for segment in bare.split("/")]
    return "/".join(segments) + (f"?{MASK}" if question else "")


def url(value: str) -> str:
    """``value`` fit to show: no userinfo, no query values, no token-like path segments. A
    malformed one (no scheme, no host, a port that is no number, a broken IPv6 address) shows
    what can be told of it: :func:`malformed`."""
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return malformed(value)
    if not parts.scheme or not host:
        return malformed(value)
    if ":" in host:
        host = f"[{host}]"
    netloc = (f"{MASK}@" if "@" in parts.netloc else "") + host
    if port is not None:
        netloc += f":{port}"
    target = parts.path + (f"?{parts.query}" if parts.query or "?" in value else "")
    return f"{parts.scheme}://{netloc}{path(target) if target else ''}"


def server(value: str) -> str:
    """A Redis or broker URL fit for an error message: all of it but the password (the user,
    the database kept, unlike :func:`url`); a Sentinel URL as :mod:`hookline.core.sentinel`
    shows it, a malformed one as :func:`malformed` does."""
    if sentinel.is_sentinel(value):  # several hosts: not a URL urlsplit reads
        return sentinel.shown(value)
    try:
        parts = urlsplit(value)
        if parts.password is None:
            return value
        netloc = f"{parts.username or ''}:{MASK}@{parts.hostname or ''}"
        netloc += f":{parts.port}" if parts.port else ""
    except ValueError:
        return malformed(value)
    return urlunsplit(parts._replace(netloc=netloc))


def malformed(value: str) -> str:
    """A URL :func:`url` cannot read, shown by its scheme and host as far as they can be told,
    never what may be a password: everything before the last ``@`` is userinfo (a password
    may hold ``/``, ``?``, ``#`` or ``@``), a port that is no number is masked, a host with
    characters no host has is masked, and what follows the host is a path (:func:`path`)."""
    value = value.strip()
    scheme = _SCHEME.match(value)
    rest = value[scheme.end():] if scheme else value
    _, at, rest = rest.rpartition("@")
    cut = min([index for index in (rest.find(mark) for mark in "/?#") if index >= 0],
              default=len(rest))
    shown = (scheme.group(0) if scheme else "") + (f"{MASK}@" if at else "") + _host(rest[:cut])
    return shown + (path(rest[cut:]) if rest[cut:] else "")


def _host(text: str) -> str:
    """A host and port as :func:`malformed` shows them: each masked unless it looks like one."""
    if text.startswith("["):  # an IPv6 address, its closing bracket there or not
        name, close, after = text.partition("]")
        name += close
        colon, port = (":", after[1:]) if after.startswith(":") else ("", after)
    else:
        name, colon, port = text.partition(":")
    name = name if _HOST.match(name) else MASK
    if not (colon or port):
        return name
    return name + colon + (port if port.isascii() and port.isdigit() else MASK)


def text(value: str) -> str:
    """``value`` with every URL and request target in it redacted."""
    value = _URL_IN_TEXT.sub(lambda match: url(match.group(0)), value)
    return _TARGET_IN_TEXT.sub(lambda match: match.group("lead") + path(match.group("target")),
                               value)


#: Shortest part of a URL :func:`scrub` masks on its own (shorter ones are not secrets, and
#: masking them would garble the text around them).
_SHORTEST_SECRET = 4


def secrets_of(value: str) -> list[str]:
    """The parts of URL ``value`` that may be credentials, as they may appear in text (raw
    and percent-decoded), longest first: userinfo, the query and its values, the fragment,
    token-like path segments."""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return [value] if len(value) >= _SHORTEST_SECRET else []
    found: list[str] = []
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found += [userinfo, *userinfo.split(":")]
    if parts.query:
        found.append(parts.query)
        found += [item for pair in parse_qsl(parts.query, keep_blank_values=True)
                  for item in pair[1:]]
    if parts.fragment:
        found.append(parts.fragment)
    found += [segment for segment in parts.path.split("/")
              if segment and not _PLAIN_SEGMENT.match(segment)]
    found += [unquote(item) for item in found]
    return sorted({item for item in found if len(item) >= _SHORTEST_SECRET},
                  key=lambda item: (-len(item), item))


def scrub(value: str, known_url: str) -> str:
    """``value`` with every URL redacted (:func:`text`) and every secret part of
    ``known_url`` masked wherever it appears."""
    if not value:
        return value
    value = text(value)
    for secret in secrets_of(known_url):
        value = value.replace(secret, MASK)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that redacts URLs in a record's message and traceback (for handlers
    or loggers the caller owns, e.g. a Hookline worker's handlers, where urllib3's debug lines
    and Celery's task failure lines name URLs)."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            # Formatters reuse exc_text rather than format the traceback again.
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = text(record.exc_text)
        return True
