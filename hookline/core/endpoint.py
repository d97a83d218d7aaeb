"""An endpoint: where one subscriber's webhooks go, how they are signed and limited.

The model only: its fields, what they mean for a delivery (the retry policy, the read timeout,
the burst, the secrets that sign now) and its flat form as a Redis hash stores it (strings by
field name; the scripts read some of the fields, e.g. ``rate_interval_ms``). Checking what an
operator gives is ``hookline.core.endpoint_validation``'s; keeping endpoints is
``hookline.store.endpoints``'. Pure: no Redis.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hookline.core import redact, sealing, signing
from hookline.core.config import settings
from hookline.core.errors import InvalidField
from hookline.core.headers import masked
from hookline.core.policy import RetryPolicy, parse_rate
from hookline.core.subscriptions import subscribed

SECRET_PREFIX = signing.HMAC_PREFIX


class EndpointError(InvalidField):
    """Bad endpoint input; the message says what to fix (and :attr:`field` names the field,
    ``endpoint`` when it is the endpoint as a whole)."""

    def __init__(self, message: str, field: str = "endpoint") -> None:
        super().__init__(field, message)


class SealedRecordError(EndpointError):
    """An endpoint whose stored secrets or header values cannot be opened: sealed with a key
    ``HOOKLINE_ENCRYPTION_KEYS`` does not hold, or damaged. Nothing is sent with it."""

    def __init__(self, endpoint_id: str, problem: sealing.SealingError) -> None:
        super().__init__(str(problem), "secrets")
        self.endpoint_id = endpoint_id
        self.missing_key = isinstance(problem, sealing.MissingKey)


#: The fields of an endpoint's hash that hold credentials, sealed when keys are set.
SEALED_FIELDS = ("secrets", "headers")


def _keyring() -> sealing.Keyring:
    return sealing.keyring(settings().encryption_keys)


def seal_field(endpoint_id: str, name: str, plaintext: str) -> str:
    """A credential field's stored form (:mod:`hookline.core.sealing`)."""
    return _keyring().seal(plaintext, sealing.associated_data(endpoint_id, name))


def open_field(endpoint_id: str, name: str, stored: str) -> str:
    """A credential field's plaintext; :class:`SealedRecordError` when it cannot be opened."""
    try:
        return _keyring().open(stored, sealing.associated_data(endpoint_id, name),
                               f"the {name} of endpoint {endpoint_id!r}")
    except sealing.SealingError as exc:
        raise SealedRecordError(endpoint_id, exc) from None


class UnknownEndpoint(EndpointError):
    def __init__(self, endpoint_id: str) -> None:
        super().__init__(f"no endpoint {endpoint_id!r}: add it with 'hookline endpoint add'")
        self.endpoint_id = endpoint_id


@dataclass(frozen=True)
class Endpoint:
    """A receiver of webhooks.

    :param id: the name tasks use, ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``.
    :param url: where events are POSTed (http or https).
    :param secrets: signing secrets, newest first; each one still valid signs every request
        (Standard Webhooks allows several signatures), so a receiver can rotate without loss.
    :param secret_expiry: when an old secret stops signing (Unix seconds), after a rotation.
    :param enabled: False stops all sends (events go to the dead-letter queue).
    :param timeout: read timeout in seconds, or None for ``HOOKLINE_READ_TIMEOUT``.
    :param retry_policy: overrides of the global retry policy's fields.
    :param rate: the most requests per time this receiver accepts from all workers together
        (``50/s``, ``3000/m``), or None for no limit.
    :param burst: how many requests may go out back to back before the rate spaces them;
        None for the default, 100 ms worth of requests (at least 1), which also lets the limiter
        absorb a worker's scheduling delays without losing throughput.
    :param headers: extra request headers (name -> value), sent on every request; values are
        kept like secrets (masked in :meth:`public`).
    :param paused_at: Unix seconds (Redis time) since when the endpoint is paused, or None.
    :param pauses: the latest ended pauses, ((start, end), ...) in Unix seconds.
    :param app: the application it belongs to (``hookline.publish`` reaches it), or None.
    :param event_types: its event-type filter (``order.created``, ``order.*``); empty: every
        type (``hookline.core.subscriptions``).
    :param channels: the channels it listens to; empty: no channel filter.
    :param max_in_flight: the most attempts in flight to it at once across all workers (a hard
        cap that protects its receiver), or None for no cap beyond its fair share of the slots.
    :param ordered: deliveries with the same ordering key go out one at a time, in the order
        they were enqueued (``hookline.core.ordering``).
    :param order_policy: for an ordered endpoint, what a key does when its head is
        dead-lettered: ``block`` (wait for the operator's replay or discard) or ``skip``.
    :param trace_context: send the attempt's W3C ``traceparent`` (and ``tracestate``) to the
        receiver, where traces are on (off by default: it tells a third party the trace's ids).
    """

    id: str
    url: str
    secrets: tuple[str, ...]
    secret_expiry: Mapping[str, float] = field(default_factory=dict)
    enabled: bool = True
    disabled_reason: str = ""
    #: When it was disabled (Unix seconds) and by whom (an actor's name; "" for the worker,
    #: after the receiver's 410), None and "" while enabled.
    disabled_at: float | None = None
    disabled_by: str = ""
    timeout: float | None = None
    retry_policy: Mapping[str, Any] = field(default_factory=dict)
    rate: str | None = None
    burst: int | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # may be credentials
    paused_at: float | None = None
    pauses: tuple[tuple[float, float], ...] = ()
    app: str | None = None
    event_types: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    max_in_flight: int | None = None
    ordered: bool = False
    order_policy: str = "block"
    trace_context: bool = False

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def paused_seconds(self, since: float, until: float) -> float:
        """Seconds of [since, until] the endpoint was paused (the age limit leaves them out)."""
        periods = [*self.pauses, *([(self.paused_at, until)] if self.paused_at else [])]
        return sum(max(0.0, min(end, until) - max(start, since)) for start, end in periods)

    def subscribes_to(self, event_type: str, channels: tuple[str, ...] | list[str]) -> bool:
        """Whether a published event of this type with these channels is for this endpoint."""
        return subscribed(self.event_types, self.channels, event_type, channels)

    def policy(self) -> RetryPolicy:
        return settings().retry_policy.replace(self.retry_policy)

    def held_too_long(self, since: float, now: float) -> bool:
        """Whether a delivery first attempted (or, never attempted, published) at ``since``
        has waited past its max age: a failing endpoint's open breaker holds deliveries
        without attempts, but not for ever (time paused does not count)."""
        return now - since - self.paused_seconds(since, now) > self.policy().max_age

    def read_timeout(self) -> float:
        return self.timeout if self.timeout is not None else settings().read_timeout

    def effective_burst(self) -> int:
        if self.burst is not None:
            return self.burst
        if not self.rate:
            return 1
        return max(1, math.ceil(0.1 / parse_rate(self.rate)))

    def signing_secrets(self, now: float | None = None) -> tuple[str, ...]:
        """The secrets that sign a request sent at ``now``: expired ones are left out."""
        now = time.time() if now is None else now
        return tuple(s for s in self.secrets if self.secret_expiry.get(s, math.inf) > now)

    def to_hash(self) -> dict[str, str]:
        return {
            "url": self.url,
            "secrets": seal_field(self.id, "secrets", json.dumps(
                [[s, self.secret_expiry.get(s)] for s in self.secrets])),
            "enabled": "1" if self.enabled else "0",
            "disabled_reason": self.disabled_reason,
            "disabled_at": "" if self.disabled_at is None else repr(self.disabled_at),
            "disabled_by": self.disabled_by,
            "timeout": "" if self.timeout is None else repr(self.timeout),
            "retry_policy": json.dumps(dict(self.retry_policy)),
            "rate": self.rate or "",
            # What the admit script reads: milliseconds between requests, 0 for no limit.
            "rate_interval_ms": repr(parse_rate(self.rate) * 1000) if self.rate else "0",
            "burst": "" if self.burst is None else str(self.burst),
            "rate_burst": str(self.effective_burst()),
            "created_at": repr(self.created_at),
            "updated_at": repr(self.updated_at),
            "headers": seal_field(self.id, "headers", json.dumps(dict(self.headers))),
            # paused_at and pauses are written by pause_endpoint.lua only, never here: saving
            # an endpoint read before a pause must not undo it.
            "app": self.app or "",
            "event_types": json.dumps(list(self.event_types)),
            "channels": json.dumps(list(self.channels)),
            # Read by admit.lua and consume.lua: 0 for no cap. (inflight and waiting, the
            # counts beside it, are the scripts' own: never written here.)
            "max_in_flight": str(self.max_in_flight or 0),
            # Read by consume.lua: '1' puts each ordering key's deliveries in one line.
            "ordered": "1" if self.ordered else "0",
            "order_policy": self.order_policy,
            "trace_context": "1" if self.trace_context else "0",
        }

    @classmethod
    def from_hash(cls, endpoint_id: str, data: Mapping[str, str]) -> Endpoint:
        timeout = data.get("timeout") or ""
        stored = [item if isinstance(item, list) else [item, None] for item in
                  json.loads(open_field(endpoint_id, "secrets", data.get("secrets") or "[]"))]
        return cls(
            id=endpoint_id,
            url=data["url"],
            secrets=tuple(secret for secret, _ in stored),
            secret_expiry={secret: float(until) for secret, until in stored if until},
            enabled=data.get("enabled", "1") == "1",
            disabled_reason=data.get("disabled_reason", ""),
            disabled_at=float(data["disabled_at"]) if data.get("disabled_at") else None,
            disabled_by=data.get("disabled_by", ""),
            timeout=float(timeout) if timeout else None,
            retry_policy=json.loads(data.get("retry_policy") or "{}"),
            rate=data.get("rate") or None,
            burst=int(data["burst"]) if data.get("burst") else None,
            created_at=float(data.get("created_at") or 0),
            updated_at=float(data.get("updated_at") or 0),
            headers=json.loads(open_field(endpoint_id, "headers", data.get("headers") or "{}")),
            paused_at=int(data["paused_at"]) / 1000.0 if data.get("paused_at") else None,
            pauses=tuple((start / 1000.0, end / 1000.0)
                         for start, end in json.loads(data.get("pauses") or "[]")),
            app=data.get("app") or None,
            event_types=tuple(json.loads(data.get("event_types") or "[]")),
            channels=tuple(json.loads(data.get("channels") or "[]")),
            max_in_flight=int(data.get("max_in_flight") or 0) or None,
            ordered=data.get("ordered") == "1",
            order_policy=data.get("order_policy") or "block",
            trace_context=data.get("trace_context") == "1",
        )

    def public(self) -> dict[str, Any]:
        """Everything but the secrets, which are masked, and the URL's credentials and tokens,
        redacted: safe for listings and logs."""
        return {
            "id": self.id,
            "url": redact.url(self.url),
            "enabled": self.enabled,
            "disabled_reason": self.disabled_reason or None,
            "disabled_at": self.disabled_at,
            "disabled_by": self.disabled_by or None,
            "timeout": self.timeout,
            "retry_policy": dict(self.retry_policy),
            "rate": self.rate,
            "max_in_flight": self.max_in_flight,
            "burst": self.effective_burst() if self.rate else None,
            "secrets": [mask_secret(s) for s in self.secrets],
            "secret_expires_at": [self.secret_expiry.get(s) for s in self.secrets],
            # Each secret's kind (hmac, ed25519) and, for ed25519, the public key the
            # receiver verifies with (not secret), newest first like the secrets.
            "secret_kinds": [signing.secret_kind(s) for s in self.secrets],
            "public_keys": [signing.public_key(s) for s in self.secrets],
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "headers": masked(self.headers),
            "paused": self.paused,
            "paused_at": self.paused_at,
            "app": self.app,
            "event_types": list(self.event_types),
            "channels": list(self.channels),
            "ordered": self.ordered,
            "order_policy": self.order_policy if self.ordered else None,
            "trace_context": self.trace_context,
        }


def mask_secret(secret: str) -> str:
    """The secret's kind by its prefix, the rest starred (:func:`hookline.core.signing.mask`)."""
    return signing.mask(secret)


def generate_secret(kind: str = signing.HMAC) -> str:
    """A new signing secret: an HMAC secret, or an ed25519 key pair's ``whsk_`` key."""
    return signing.generate_signing_key(kind)
