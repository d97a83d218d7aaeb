"""``sentinel://`` URLs: a Redis whose master Redis Sentinel finds, for ``REDIS_URL`` and for
``HOOKLINE_BROKER_URL``. Pure: parsing, checking and rewriting; no Redis.

One URL names every Sentinel, comma-separated, and the master's credentials and database::

    sentinel://[[username]:password@]host[:port][,host[:port]...][/db]

The port defaults to 26379 and the database to 0. The password is the master's (its
``requirepass``); the Sentinels' own password, if they have one, is
``HOOKLINE_SENTINEL_PASSWORD``, and the master's name is ``HOOKLINE_SENTINEL_MASTER``
(``hookline/core/config.py``). For the broker, :meth:`SentinelURL.kombu_url` gives Celery one
kombu URL and the Sentinels go in the transport options (see there why not kombu's
``sentinel://h1;sentinel://h2`` list).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

SCHEME = "sentinel://"
#: The broker transport option listing every Sentinel as ``[host, port]`` pairs.
SENTINELS_OPTION = "hookline_sentinels"
#: Sentinel's own port when the URL names none.
DEFAULT_PORT = 26379
#: A Sentinel address: a host name, an IPv4 address or a bracketed IPv6 address, then a port.
_ADDRESS = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(?P<port>\d{1,5}))?\Z")
#: What a master name may be: Sentinel takes any word; Hookline takes no spaces or controls.
MASTER_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}\Z")


def is_sentinel(url: str) -> bool:
    return url.startswith(SCHEME)


@dataclass(frozen=True)
class SentinelURL:
    """A parsed ``sentinel://`` URL."""

    sentinels: tuple[tuple[str, int], ...]
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def kombu_url(self) -> str:
        """The URL Celery's broker connection gets: the first Sentinel, with the master's
        credentials and database. The whole list goes in the transport options
        (``hookline_sentinels``), not in kombu's ``a;b;c`` failover list: on a connection
        error kombu moves to the next URL of such a list and takes the transport from its
        scheme, so workers and publishers would go on with kombu's stock transport."""
        userinfo = ""
        if self.username is not None or self.password is not None:
            userinfo = (quote(self.username or "", safe="") + ":"
                        + quote(self.password or "", safe="") + "@")
        host, port = self.sentinels[0]
        return f"{SCHEME}{userinfo}{_host(host)}:{port}/{self.db}"

    def shown(self) -> str:
        """Fit for a log line or an error: the password masked."""
        userinfo = "***@" if self.password is not None or self.username is not None else ""
        hosts = ",".join(f"{_host(host)}:{port}" for host, port in self.sentinels)
        return f"{SCHEME}{userinfo}{hosts}/{self.db}"


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse(url: str) -> SentinelURL:
    """Parse a ``sentinel://`` URL; :class:`ValueError` says what is wrong (never quoting the
    password)."""
    if not is_sentinel(url):
        raise ValueError(f"a Sentinel URL starts with {SCHEME}")
    rest = url[len(SCHEME):]
    if "?" in rest or "#" in rest:
        raise ValueError("a sentinel:// URL takes no query string or fragment: the master's "
                         "name is HOOKLINE_SENTINEL_MASTER, the Sentinels' password "
                         "HOOKLINE_SENTINEL_PASSWORD")
    userinfo, at, hostpart = rest.rpartition("@")
    username: str | None = None
    password: str | None = None
    if at:
        name, colon, secret = userinfo.partition(":")
        username = unquote(name) if name else None
        password = unquote(secret) if colon else None
        if not colon and name:
            # redis-py reads a lone userinfo word as the password, as Redis's own URLs do.
            username, password = None, unquote(name)
    hosts, slash, db_text = hostpart.partition("/")
    db = 0
    if slash and db_text:
        if not db_text.isdigit() or int(db_text) > 10_000:
            raise ValueError(f"the database after '/' must be a number, not {db_text!r}")
        db = int(db_text)
    sentinels = []
    for address in hosts.split(","):
        match = _ADDRESS.match(address.strip())
        if not match:
            raise ValueError(f"{address.strip()!r} is not a Sentinel address (host or "
                             "host:port, several separated by commas)")
        port = int(match.group("port") or DEFAULT_PORT)
        if not 1 <= port <= 65535:
            raise ValueError(f"port {port} of {match.group('host')} is not a TCP port")
        sentinels.append((match.group("host").strip("[]"), port))
    return SentinelURL(tuple(sentinels), db, username, password)


def shown(url: str) -> str:
    """``url`` fit to show, even when it does not parse."""
    try:
        return parse(url).shown()
    except ValueError:
        return f"{SCHEME}***"
