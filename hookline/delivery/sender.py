"""One HTTP attempt: build the Standard Webhooks request, POST it, read a bounded response.

One set of urllib3 connection pools per worker thread (connections are reused across events to
the same receiver), connect and read timeouts, redirects never followed, the response body read
up to a cap and the rest discarded unread. Errors are reduced to short categories that never quote
the URL, so a token in a query string cannot leak into logs or the dead-letter queue.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)

from hookline.core import ordering, tracing
from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.headers import is_owned
from hookline.core.policy import classify
from hookline.core.signing import signature
from hookline.core.ssrf import TargetRefused
from hookline.core.version import __version__
from hookline.delivery.http import InvalidTarget, PinnedPools, attempt_deadline, status_of

USER_AGENT = f"hookline/{__version__}"
_local = threading.local()


@dataclass(frozen=True)
class WebhookEvent:
    """One event as a receiver sees it."""

    id: str
    type: str
    payload: Any
    #: When the event was published (Unix seconds; the message's ``enqueued_at``): the body's
    #: ``timestamp``, fixed at publish, so the body is byte-identical on every attempt, retry,
    #: redelivery after a crash and replay.
    timestamp: float
    #: For an ordered endpoint: the event's ordering key and its place in the key's line,
    #: sent as ``Hookline-Ordering-Key`` and ``Hookline-Sequence`` (a receiver sees a gap).
    ordering_key: str | None = None
    sequence: int | None = None
    #: Which attempt this is (1 for the first; None where unknown), for the attempt's span:
    #: not part of the event a receiver sees, so not compared.
    attempt: int | None = field(default=None, compare=False)

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
    """The ``webhook-signature`` header: one signature per secret, space-separated: ``v1,...``
    for an HMAC secret, ``v1a,...`` for an ed25519 key (:mod:`hookline.core.signing`)."""
    return " ".join(signature(secret, event_id, sent_at, body) for secret in secrets)


def build_headers(endpoint: Endpoint, event: WebhookEvent, body: str) -> dict[str, str]:
    """The request's headers: the endpoint's own (``--header``) first, then Hookline's, which
    no endpoint header can replace (they are refused at registration; a stored one of the same
    name in another case is dropped here too)."""
    sent_at = datetime.now(tz=UTC)
    owned = {
        # The connection goes to the address the SSRF guard pinned; the name goes here.
        "Host": urlsplit(endpoint.url).netloc,
        "webhook-id": event.id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": sign(endpoint.signing_secrets(sent_at.timestamp()), event.id,
                                  sent_at, body),
        "Idempotency-Key": event.id,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Accept": "*/*",
    }
    if event.sequence is not None:
        owned[ordering.SEQUENCE_HEADER] = str(event.sequence)
        owned[ordering.KEY_HEADER] = event.ordering_key or endpoint.id
    if not endpoint.headers:
        return owned
    extra = {name: value for name, value in endpoint.headers.items() if not is_owned(name)}
    return {**extra, **owned}


def pools() -> PinnedPools:
    """This thread's connection pools, reused by every attempt on the thread."""
    current: PinnedPools | None = getattr(_local, "pools", None)
    if current is None:
        current = _local.pools = PinnedPools(num_pools=32, maxsize=2)
    return current


def send(endpoint: Endpoint, event: WebhookEvent) -> AttemptResult:
    """POST ``event`` to ``endpoint`` once. Never raises for network trouble: it is a result.

    The whole attempt (connect, headers, body) gets connect + 2 x read timeout; past that its
    socket is shut, however slowly the receiver trickles bytes. Where traces are on, the
    attempt is a CLIENT span (``hookline.core.tracing``).
    """
    if tracing.tracer() is None:
        body = event.body()
        return _send(endpoint, build_headers(endpoint, event, body), body)
    with (tracing.client(endpoint.id, endpoint.url, event.id, event.attempt) as span,
          tracing.http_instrumentation_suppressed()):
        body = event.body()
        headers = build_headers(endpoint, event, body)
        if endpoint.trace_context:  # opt-in: it tells the receiver this trace's ids
            headers.update(tracing.receiver_headers())
        result = _send(endpoint, headers, body)
        tracing.record_attempt(span, result.status, result.error, attempt_outcome(result))
        return result


def attempt_outcome(result: AttemptResult) -> str:
    """What one attempt's answer means (``hookline.outcome`` of its span): the outcome table's
    ``delivered``, ``retry``, ``gone`` or ``rejected``, or ``refused`` (never sent)."""
    if result.refused:
        return "refused"
    return "retry" if result.status is None else classify(result.status).value


def _send(endpoint: Endpoint, headers: dict[str, str], body: str) -> AttemptResult:
    config = settings()
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
        response = pools().post(endpoint.url, body.encode("utf-8"), headers,
                                connect_timeout=config.connect_timeout,
                                read_timeout=read_timeout)
    except TargetRefused as refused:
        return AttemptResult(status=None, latency=time.monotonic() - started,
                             error=f"refused: {refused}", refused=True)
    except InvalidTarget:
        return AttemptResult(status=None, latency=time.monotonic() - started,
                             error="invalid_url", refused=True)
    except (HTTPError, OSError) as exc:
        if attempt_deadline.expired(ticket):
            return timed_out
        return AttemptResult(status=None, latency=time.monotonic() - started,
                             error=describe_error(exc))
    if attempt_deadline.expired(ticket):
        # The deadline cut the headers short: what arrived is no answer.
        _discard(response)
        return timed_out
    try:
        excerpt = read_capped(response, config.max_response_bytes, started + budget)
    except (HTTPError, OSError) as exc:
        # The status line arrived; the body broke off. The status still decides.
        excerpt = f"[body unreadable: {describe_error(exc, reading=True)}]"
        _discard(response)
    return AttemptResult(
        status=response.status,
        latency=time.monotonic() - started,
        retry_after=response.headers.get("Retry-After"),
        body_excerpt=excerpt,
    )


def _discard(response: urllib3.BaseHTTPResponse) -> None:
    """Close the connection under an answer not read to its end (it cannot be reused)."""
    with contextlib.suppress(Exception):
        response.close()
    with contextlib.suppress(Exception):
        response.release_conn()


def read_capped(response: urllib3.BaseHTTPResponse, cap: int, deadline: float) -> str:
    """Up to ``cap`` bytes of the body as text. A body read to its end gives the connection
    back for reuse; a longer one, or one still trickling in at ``deadline``, is cut off: the
    connection is closed instead of drained."""
    kept = bytearray()
    while True:
        chunk = response.read(8192, decode_content=False)  # never inflate a compressed body
        if not chunk:
            response.release_conn()  # read to its end: the connection can be reused
            break
        kept += chunk[: max(0, cap - len(kept))]
        if len(kept) >= cap or time.monotonic() > deadline:
            _discard(response)
            break
    return kept.decode("utf-8", errors="replace")


def _malformed(exc: BaseException) -> str | None:
    """``malformed_response: ...`` when ``exc`` (or what it wraps: urllib3 puts http.client's
    error in a ProtocolError) says the receiver's answer broke HTTP's rules, else None. A
    connection the receiver closed before answering is not malformed (``RemoteDisconnected``)."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, http.client.HTTPException) and not isinstance(
                error, http.client.RemoteDisconnected | http.client.IncompleteRead):
            status = status_of(error)
            after = f" after status {status}" if status is not None else ""
            text = str(error)
            limit = re.search(r"more than (\d+)", text)
            over = f" (over {limit.group(1)}{'' if text.endswith('headers') else ' bytes'})" \
                if limit else ""
            if isinstance(error, http.client.LineTooLong):
                what = ("status line too long" if "status line" in text
                        else "header line too long") + over
            elif text.startswith("got more than") and text.endswith("headers"):
                what = "too many headers" + over
            elif isinstance(error, http.client.BadStatusLine):
                what = "bad status line"
            else:
                what = type(error).__name__
            return f"malformed_response: {what}{after}"
        pending += [arg for arg in error.args if isinstance(arg, BaseException)]
        pending += [link for link in (error.__cause__, error.__context__) if link is not None]
    return None


def describe_error(exc: BaseException, *, reading: bool = False) -> str:
    """A short, URL-free description of a failed request (``reading``: of its body)."""
    malformed = _malformed(exc)
    if malformed is not None:
        return malformed
    # Most specific first: urllib3's NameResolutionError is a NewConnectionError, which is a
    # ConnectTimeoutError.
    if isinstance(exc, NameResolutionError | socket.gaierror):
        return "dns_error"
    if isinstance(exc, NewConnectionError):
        return "connect_error: connection refused or unreachable"
    if isinstance(exc, ConnectTimeoutError):
        return "connect_timeout"
    if isinstance(exc, ReadTimeoutError):
        return "read_timeout"
    if isinstance(exc, SSLError):
        return "tls_error"
    if isinstance(exc, ProtocolError):
        return "connection_closed: response broken off" if reading else "connection_closed"
    if isinstance(exc, HTTPError):
        return f"connection_error ({type(exc).__name__})"
    return f"network_error ({type(exc).__name__})"
