"""One HTTP attempt: build the Standard Webhooks request, POST it, read a bounded response.

One pooled ``requests.Session`` per worker thread (connections are reused across events to the
same receiver), connect and read timeouts, redirects never followed, the response body read up
to a cap and the rest discarded unread. Errors are reduced to short categories that never quote
the URL, so a token in a query string cannot leak into logs or the dead-letter queue.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from standardwebhooks import Webhook

from app import __version__
from app.config import settings
from app.endpoints import Endpoint
from app.ssrf import TargetRefused
from app.transport import PinnedAdapter, attempt_deadline

USER_AGENT = f"hookline/{__version__}"
_local = threading.local()
#: Errors that mean the request cannot be made at all: retrying will not help.
_UNUSABLE_URL = (
    requests.exceptions.InvalidURL,
    requests.exceptions.InvalidSchema,
    requests.exceptions.MissingSchema,
)


@dataclass(frozen=True)
class WebhookEvent:
    """One event as a receiver sees it."""

    id: str
    type: str
    payload: Any
    #: When the event was first attempted (Unix seconds): the body's ``timestamp``, the same on
    #: every retry so the body, and a receiver's deduplication, stay stable.
    timestamp: float

    def body(self) -> str:
        when = datetime.fromtimestamp(self.timestamp, tz=UTC).isoformat().replace("+00:00", "Z")
        return json.dumps(
            {"type": self.type, "timestamp": when, "data": self.payload},
            separators=(",", ":"),
            ensure_ascii=False,
        )


@dataclass(frozen=True)
class AttemptResult:
    """What came back from one attempt. ``status`` is None when no response arrived."""

    status: int | None
    latency: float
    retry_after: str | None = None
    error: str = ""
    body_excerpt: str = ""
    #: True when the request could not even be made (bad URL): never worth retrying.
    refused: bool = False


def sign(secrets: tuple[str, ...], event_id: str, sent_at: datetime, body: str) -> str:
    """The ``webhook-signature`` header: one ``v1,...`` signature per secret, space-separated."""
    return " ".join(Webhook(secret).sign(event_id, sent_at, body) for secret in secrets)


def build_headers(endpoint: Endpoint, event: WebhookEvent, body: str) -> dict[str, str]:
    sent_at = datetime.now(tz=UTC)
    return {
        # The connection goes to the address the SSRF guard pinned; the name goes here.
        "Host": urlsplit(endpoint.url).netloc,
        "webhook-id": event.id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": sign(endpoint.signing_secrets(sent_at.timestamp()), event.id,
                                  sent_at, body),
        "Idempotency-Key": event.id,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }


def session() -> requests.Session:
    """This thread's session: its connection pool is reused by every attempt on the thread."""
    current: requests.Session | None = getattr(_local, "session", None)
    if current is None:
        current = requests.Session()
        current.trust_env = False  # no proxy or .netrc credentials picked up from the environment
        adapter = PinnedAdapter(pool_connections=32, pool_maxsize=2, max_retries=0)
        current.mount("http://", adapter)
        current.mount("https://", adapter)
        _local.session = current
    return current


def send(endpoint: Endpoint, event: WebhookEvent) -> AttemptResult:
    """POST ``event`` to ``endpoint`` once. Never raises for network trouble: it is a result.

    The whole attempt (connect, headers, body) gets connect + 2 x read timeout; past that its
    socket is shut, however slowly the receiver trickles bytes.
    """
    config = settings()
    body = event.body()
    headers = build_headers(endpoint, event, body)
    read_timeout = endpoint.read_timeout()
    started = time.monotonic()
    budget = config.connect_timeout + 2 * read_timeout
    ticket = attempt_deadline.arm(budget)
    try:
        return _post(endpoint, body, headers, read_timeout, started, budget, ticket)
    finally:
        attempt_deadline.disarm(ticket)


def _post(endpoint: Endpoint, body: str, headers: dict[str, str], read_timeout: float,
          started: float, budget: float, ticket: int) -> AttemptResult:
    config = settings()
    timed_out = AttemptResult(status=None, latency=budget,
                              error=f"attempt_timeout: no complete answer within {budget:g}s")
    try:
        response = session().post(
            endpoint.url,
            data=body.encode("utf-8"),
            headers=headers,
            timeout=(config.connect_timeout, read_timeout),
            allow_redirects=False,
            stream=True,
        )
    except TargetRefused as refused:
        return AttemptResult(status=None, latency=time.monotonic() - started,
                             error=f"refused: {refused}", refused=True)
    except (requests.RequestException, OSError) as exc:
        if attempt_deadline.expired(ticket):
            return timed_out
        return AttemptResult(status=None, latency=time.monotonic() - started,
                             error=describe_error(exc), refused=isinstance(exc, _UNUSABLE_URL))
    if attempt_deadline.expired(ticket):
        # The deadline cut the headers short: what arrived is no answer.
        response.close()
        return timed_out
    with response:
        try:
            excerpt = read_capped(response, config.max_response_bytes, started + budget)
        except (requests.RequestException, OSError) as exc:
            # The status line arrived; the body broke off. The status still decides.
            excerpt = f"[body unreadable: {describe_error(exc)}]"
    return AttemptResult(
        status=response.status_code,
        latency=time.monotonic() - started,
        retry_after=response.headers.get("Retry-After"),
        body_excerpt=excerpt,
    )


def read_capped(response: requests.Response, cap: int, deadline: float) -> str:
    """Up to ``cap`` bytes of the body as text. A longer body, or one still trickling in at
    ``deadline``, is cut off: the connection is closed instead of drained."""
    kept = bytearray()
    for chunk in response.iter_content(chunk_size=8192):
        kept += chunk[: max(0, cap - len(kept))]
        if len(kept) >= cap and chunk:
            break
        if time.monotonic() > deadline:
            break
    return kept.decode("utf-8", errors="replace")


def describe_error(exc: BaseException) -> str:
    """A short, URL-free description of a failed request."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "connect_timeout"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return "read_timeout"
    if isinstance(exc, requests.exceptions.SSLError):
        return "tls_error"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "connection_closed: response broken off"
    if isinstance(exc, requests.exceptions.ConnectionError):
        reason = exc.args[0] if exc.args else None
        inner = getattr(reason, "reason", reason)
        if isinstance(inner, urllib3.exceptions.NameResolutionError):
            return "dns_error"
        if isinstance(inner, urllib3.exceptions.ProtocolError):
            return "connection_closed"
        if isinstance(inner, urllib3.exceptions.NewConnectionError):
            return "connect_error: connection refused or unreachable"
        return f"connection_error ({type(inner).__name__})"
    if isinstance(exc, _UNUSABLE_URL):
        return "invalid_url"
    if isinstance(exc, OSError) and not isinstance(exc, requests.RequestException):
        if isinstance(exc, socket.gaierror):
            return "dns_error"
        return f"network_error ({type(exc).__name__})"
    return f"request_error ({type(exc).__name__})"
