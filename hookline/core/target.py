"""Which URLs an endpoint may have: checked once, when an endpoint is added or updated, with the
parser the sender uses. Pure: no Redis, no HTTP, no DNS (the address checks are
:mod:`hookline.core.ssrf`'s, run on the host found here).

The sender parses an endpoint's URL with urllib3's ``parse_url`` (the connection) and
``urllib.parse.urlsplit`` (the ``Host`` header). Where the two read a URL differently (a
backslash, a percent-encoded host, a space) the host checked at registration would not be the
host connected to, so a URL is accepted only when it is plain RFC 3986 ASCII and both parsers
agree on its scheme, host and port. Names that can never be a public receiver are refused here
too, before any DNS: the ``localhost`` family (unless ``HOOKLINE_ALLOWED_NETWORKS`` admits
loopback) and private-use names (unless it admits some network). Every message shows the URL
through :func:`hookline.core.redact.url`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from hookline.core import redact
from hookline.core.errors import InvalidField
from hookline.core.ssrf import Network

#: Longest URL accepted, characters.
MAX_URL_LENGTH = 2048
#: Characters a URL may carry as they are (RFC 3986 unreserved, reserved and ``%``).
_URL_CHARACTER = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]")
_BAD_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
#: A DNS host name: dot-separated labels of letters, digits, ``-`` and ``_``.
_HOST_NAME = re.compile(r"\A(?:(?!-)[a-z0-9_-]{1,63}(?<!-)\.)*(?!-)[a-z0-9_-]{1,63}(?<!-)\Z")
#: Names of the local machine: never a receiver, unless loopback is allowed.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "localhost6",
                            "localhost6.localdomain6", "ip6-localhost", "ip6-loopback"})
#: Special-use and private-use domains (RFC 6761, 6762, 7686, 8375, 9476; ICANN's
#: ``internal``): no public receiver lives under them.
PRIVATE_SUFFIXES = ("local", "localdomain", "internal", "home.arpa", "lan", "intranet",
                    "private", "corp", "invalid", "test", "example", "onion", "alt")
_LOOPBACK_ADDRESSES = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


class InvalidURL(InvalidField):
    """An endpoint URL that is malformed, ambiguous or can never be a public receiver."""

    def __init__(self, message: str) -> None:
        super().__init__("url", message)


@dataclass(frozen=True)
class Target:
    """An endpoint URL as the sender will use it."""

    url: str
    scheme: str
    #: Lower case; an IPv6 address without its brackets.
    host: str
    port: int
    #: True when ``host`` is an IP address, not a name.
    literal: bool


def parse_target(url: Any) -> Target:
    """Parse an endpoint URL the way the sender does; raise :class:`InvalidURL` saying what
    is wrong (``url ...`` first)."""
    if not isinstance(url, str) or not url:
        raise InvalidURL("url is required")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidURL(f"url is {len(url)} characters long; the limit is {MAX_URL_LENGTH}")
    _check_characters(url)
    shown = _named(url)
    # urllib3 is the sender's: loaded where an endpoint's URL is checked, not by a web process
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        parsed = parse_url(url)
        split = urlsplit(url)
        split_port = split.port
    except (LocationParseError, ValueError) as exc:
        detail = redact.text(str(exc)).replace(url, redact.url(url))
        raise InvalidURL(f"{shown} is malformed: {detail}") from None
    scheme = (parsed.scheme or "").lower()
    if scheme not in ("http", "https"):
        raise InvalidURL(f"{shown} has scheme {scheme or '(none)'!r}: only http and https "
                         "are allowed")
    if "@" in split.netloc or parsed.auth is not None:
        raise InvalidURL("url must not carry credentials (user:password@); sign with secrets")
    if parsed.fragment is not None or "#" in url:
        raise InvalidURL(f"{shown} has a #fragment, which is never sent")
    host = (parsed.host or "").lower()
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not bare:
        raise InvalidURL(f"{shown} has no host")
    if bare != (split.hostname or "") or parsed.port != split_port:
        raise InvalidURL(f"{shown} is ambiguous: its host or port reads differently to "
                         "different parsers")
    if parsed.port == 0:
        raise InvalidURL(f"{shown} has port 0")
    literal = _check_host(bare, bracketed=bare != host, shown=shown)
    port = parsed.port or (443 if scheme == "https" else 80)
    return Target(url=url, scheme=scheme, host=bare, port=port, literal=literal)


def _named(url: str) -> str:
    """``url <the URL, redacted>`` for a message, or just ``url`` if nothing of it is fit to
    show."""
    shown = redact.url(url)
    return "url" if shown == redact.MASK else f"url {shown}"


def _check_characters(url: str) -> None:
    for position, character in enumerate(url):
        if _URL_CHARACTER.match(character):
            continue
        if character.isspace() or not character.isprintable():
            what = "whitespace or a control character"
        elif not character.isascii():
            what = ("a non-ASCII character (write the host in its xn-- form, percent-encode "
                    "the rest)")
        else:
            what = f"{character!r}, which a URL cannot carry unencoded (percent-encode it)"
        raise InvalidURL(f"url holds {what} at position {position}")
    bad = _BAD_PERCENT.search(url)
    if bad:
        raise InvalidURL(f"url holds a '%' at position {bad.start()} that is not followed by "
                         "two hex digits")


def _check_host(host: str, *, bracketed: bool, shown: str) -> bool:
    """True if ``host`` is an IP address; raise if it is neither an address nor a name."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if bracketed != (address.version == 6):
            raise InvalidURL(f"{shown} has a malformed IP address")
        return True
    if bracketed or not _HOST_NAME.match(host) or len(host) > 253:
        raise InvalidURL(f"{shown} has a host that is not a valid host name")
    if host.rpartition(".")[2].isdigit():
        raise InvalidURL(f"{shown} has a host that is neither a host name nor an IPv4 "
                         "address in dotted-quad form")
    return False


def never_public(host: str, allowed: Iterable[Network] = ()) -> str | None:
    """Why host name ``host`` can never be a public receiver and is not allowed, or None."""
    allowed = tuple(allowed)
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        if any(address in network for network in allowed for address in _LOOPBACK_ADDRESSES
               if address.version == network.version):
            return None
        return f"{host} names this machine (loopback)"
    if allowed:  # an operator who allows private networks may name receivers in them
        return None
    if "." not in host:
        return f"{host} is a single-label name, which is never public"
    for suffix in PRIVATE_SUFFIXES:
        if host == suffix or host.endswith("." + suffix):
            return f"{host} is under .{suffix}, a private or special-use domain"
    return None


def check_endpoint_url(url: Any, *, allowed: Iterable[Network] = (),
                       https_only: bool = False) -> Target:
    """An endpoint URL fit to register: well formed (:func:`parse_target`), https when
    ``https_only``, and not a name that can never be public. Addresses are the SSRF guard's
    (:func:`hookline.core.ssrf.pin_address`, at registration and at every send)."""
    target = parse_target(url)
    if https_only and target.scheme != "https":
        raise InvalidURL(f"{_named(url)} is not https, and HOOKLINE_HTTPS_ONLY is set")
    if not target.literal:
        reason = never_public(target.host, allowed)
        if reason is not None:
            raise InvalidURL(f"url refused: {reason}: Hookline does not send webhooks there "
                             "(an operator can allow a network with HOOKLINE_ALLOWED_NETWORKS)")
    return target
