"""The endpoint registry: where each subscriber's webhooks go and how they are signed.

One Redis hash per endpoint (``hookline:{ep}:endpoint``) plus a set of all ids, and for an
endpoint of an application, a set of that application's endpoint ids
(``hookline:{app:<id>}:endpoints``). Secrets live only here; tasks carry the endpoint id, never
its URL or secret.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import secrets as random_secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hookline.core import redact
from hookline.core.config import MAX_READ_TIMEOUT, settings
from hookline.core.errors import InvalidField
from hookline.core.event import check_endpoint_id, check_text
from hookline.core.headers import masked, merge_headers
from hookline.core.policy import PolicyError, RetryPolicy, parse_rate
from hookline.core.ssrf import Resolver, TargetRefused, pin_address, system_resolve
from hookline.core.subscriptions import (
    MAX_ENDPOINT_CHANNELS,
    SubscriptionError,
    check_app_id,
    parse_channels,
    parse_filters,
    subscribed,
    unknown_filters,
)
from hookline.core.target import check_endpoint_url, parse_target
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.apps import unknown_app_message
from hookline.store.catalog import EventCatalog

#: Names given as a comma-separated string or a sequence (event filters, channels).
Names = str | Sequence[str] | None
SECRET_PREFIX = "whsec_"
#: Longest reason given for disabling an endpoint, characters.
MAX_REASON_LENGTH = 200
#: Longest per-endpoint read timeout, seconds: an attempt must end well inside its lease.
MAX_TIMEOUT = MAX_READ_TIMEOUT
#: How far ahead a paused endpoint's deliveries are parked, seconds (piece_held.lua's
#: PAUSE_PARK_MS): a month, longer than any backoff, Retry-After or cool-down can park one
#: (``hookline.core.policy.MAX_BACKOFF_LIMIT``), so resume knows the parked-for-the-pause ones
#: by their due time alone, and no worker looks at them while the pause lasts.
PAUSE_PARK = 30 * 86400.0
#: Pause periods kept on an endpoint (for the age limit, which leaves paused time out).
PAUSES_KEPT = 50


class EndpointError(InvalidField):
    """Bad endpoint input; the message says what to fix (and :attr:`field` names the field,
    ``endpoint`` when it is the endpoint as a whole)."""

    def __init__(self, message: str, field: str = "endpoint") -> None:
        super().__init__(field, message)


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
    """

    id: str
    url: str
    secrets: tuple[str, ...]
    secret_expiry: Mapping[str, float] = field(default_factory=dict)
    enabled: bool = True
    disabled_reason: str = ""
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
            "secrets": json.dumps([[s, self.secret_expiry.get(s)] for s in self.secrets]),
            "enabled": "1" if self.enabled else "0",
            "disabled_reason": self.disabled_reason,
            "timeout": "" if self.timeout is None else repr(self.timeout),
            "retry_policy": json.dumps(dict(self.retry_policy)),
            "rate": self.rate or "",
            # What the admit script reads: milliseconds between requests, 0 for no limit.
            "rate_interval_ms": repr(parse_rate(self.rate) * 1000) if self.rate else "0",
            "burst": "" if self.burst is None else str(self.burst),
            "rate_burst": str(self.effective_burst()),
            "created_at": repr(self.created_at),
            "updated_at": repr(self.updated_at),
            "headers": json.dumps(dict(self.headers)),
            # paused_at and pauses are written by pause_endpoint.lua only, never here: saving
            # an endpoint read before a pause must not undo it.
            "app": self.app or "",
            "event_types": json.dumps(list(self.event_types)),
            "channels": json.dumps(list(self.channels)),
            # Read by admit.lua and consume.lua: 0 for no cap. (inflight and waiting, the
            # counts beside it, are the scripts' own: never written here.)
            "max_in_flight": str(self.max_in_flight or 0),
        }

    @classmethod
    def from_hash(cls, endpoint_id: str, data: Mapping[str, str]) -> Endpoint:
        timeout = data.get("timeout") or ""
        stored = [item if isinstance(item, list) else [item, None]
                  for item in json.loads(data.get("secrets") or "[]")]
        return cls(
            id=endpoint_id,
            url=data["url"],
            secrets=tuple(secret for secret, _ in stored),
            secret_expiry={secret: float(until) for secret, until in stored if until},
            enabled=data.get("enabled", "1") == "1",
            disabled_reason=data.get("disabled_reason", ""),
            timeout=float(timeout) if timeout else None,
            retry_policy=json.loads(data.get("retry_policy") or "{}"),
            rate=data.get("rate") or None,
            burst=int(data["burst"]) if data.get("burst") else None,
            created_at=float(data.get("created_at") or 0),
            updated_at=float(data.get("updated_at") or 0),
            headers=json.loads(data.get("headers") or "{}"),
            paused_at=int(data["paused_at"]) / 1000.0 if data.get("paused_at") else None,
            pauses=tuple((start / 1000.0, end / 1000.0)
                         for start, end in json.loads(data.get("pauses") or "[]")),
            app=data.get("app") or None,
            event_types=tuple(json.loads(data.get("event_types") or "[]")),
            channels=tuple(json.loads(data.get("channels") or "[]")),
            max_in_flight=int(data.get("max_in_flight") or 0) or None,
        )

    def public(self) -> dict[str, Any]:
        """Everything but the secrets, which are masked, and the URL's credentials and tokens,
        redacted: safe for listings and logs."""
        return {
            "id": self.id,
            "url": redact.url(self.url),
            "enabled": self.enabled,
            "disabled_reason": self.disabled_reason or None,
            "timeout": self.timeout,
            "retry_policy": dict(self.retry_policy),
            "rate": self.rate,
            "max_in_flight": self.max_in_flight,
            "burst": self.effective_burst() if self.rate else None,
            "secrets": [mask_secret(s) for s in self.secrets],
            "secret_expires_at": [self.secret_expiry.get(s) for s in self.secrets],
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "headers": masked(self.headers),
            "paused": self.paused,
            "paused_at": self.paused_at,
            "app": self.app,
            "event_types": list(self.event_types),
            "channels": list(self.channels),
        }


def mask_secret(secret: str) -> str:
    return SECRET_PREFIX + "..." + ("*" * 4)


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(random_secrets.token_bytes(32)).decode()


def validate_endpoint_id(endpoint_id: str) -> str:
    """``endpoint_id`` if valid (:func:`hookline.core.event.check_endpoint_id`)."""
    try:
        return check_endpoint_id(endpoint_id)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_url(url: str) -> str:
    """``url`` if well formed, as the sender will parse it (:mod:`hookline.core.target`)."""
    try:
        return parse_target(url).url
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def check_target(url: str, *, resolve: Resolver = system_resolve) -> str:
    """Refuse a URL the SSRF guard would refuse at send time: http when HOOKLINE_HTTPS_ONLY
    is set, a name that can never be public (``localhost``, ``*.local``, ...), a private,
    loopback, link-local or other non-public address, or a name resolving to one. A name that
    does not resolve now is accepted: it is checked again at every send."""
    config = settings()
    try:
        target = check_endpoint_url(url, allowed=config.allowed_networks,
                                    https_only=config.https_only)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None
    try:
        pin_address(target.host, target.port, config.allowed_networks, resolve=resolve)
    except TargetRefused as refused:
        raise EndpointError(f"url refused: {refused}", "url") from None
    except OSError:
        pass  # DNS may be down now; every send checks again
    return url


def validate_reason(reason: str) -> str:
    """Why an endpoint is disabled: shown in listings, dead letters and log lines."""
    try:
        return check_text("reason", reason, limit=MAX_REASON_LENGTH)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_secret(secret: str) -> str:
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise EndpointError(f"a secret must start with {SECRET_PREFIX!r} followed by base64",
                            "secret")
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        # Pad to a multiple of 4 only: strict decoding rejects padding beyond that.
        raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise EndpointError("the secret after 'whsec_' is not valid base64", "secret") from None
    if not 24 <= len(raw) <= 64:
        raise EndpointError(f"a secret must hold 24 to 64 random bytes, this one holds {len(raw)}",
                            "secret")
    return secret


def validate_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    longest = settings().longest_read_timeout()
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
            0.1 <= timeout <= longest):
        raise EndpointError(
            f"timeout {timeout!r} must be between 0.1 and {longest:g} seconds (at most "
            f"{MAX_TIMEOUT:g}, and an attempt must end within CELERY_VISIBILITY_TIMEOUT)",
            "timeout")
    return float(timeout)


#: Largest burst: beyond this a "rate limit" no longer limits much.
MAX_BURST = 10_000


def validate_rate(rate: str | None) -> str | None:
    """A rate such as ``50/s`` in canonical form; None or ``none`` for no limit."""
    if rate is None or str(rate).strip().lower() in ("", "none"):
        return None
    try:
        parse_rate(rate)
    except PolicyError as exc:
        raise EndpointError(str(exc), "rate") from None
    return str(rate).strip()


def validate_burst(burst: int) -> int:
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        raise EndpointError(f"burst {burst!r} must be an integer from 1 to {MAX_BURST}", "burst")
    return burst


#: The largest --max-in-flight accepted.
MAX_IN_FLIGHT = 100_000


def validate_max_in_flight(value: int | None) -> int | None:
    """A hard cap on attempts in flight (None: none; 0 is accepted by update, to remove it)."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 0 <= value <= MAX_IN_FLIGHT):
        raise EndpointError(f"max_in_flight {value!r} must be an integer from 1 to "
                            f"{MAX_IN_FLIGHT} (0 to remove the cap)", "max_in_flight")
    return value or None


def validate_headers(current: Mapping[str, str], added: Any = (), removed: Any = ()
                     ) -> dict[str, str]:
    """``current`` headers with ``removed`` names taken out and ``added`` (name, value) pairs
    set, each checked (:mod:`hookline.core.headers`); the error never quotes a value."""
    if isinstance(added, Mapping):
        added = list(added.items())
    try:
        return merge_headers(current, added, removed)
    except InvalidField as exc:
        raise EndpointError(str(exc), exc.field) from None


def validate_policy_override(overrides: Mapping[str, Any]) -> dict[str, Any]:
    try:
        settings().retry_policy.replace(overrides)
    except PolicyError as exc:
        raise EndpointError(f"invalid retry policy: {exc}", "retry_policy") from None
    return dict(overrides)


def validate_subscription(event_types: Any, channels: Any) -> tuple[tuple[str, ...],
                                                                      tuple[str, ...]]:
    """An endpoint's event-type filter and channels, checked (None: none)."""
    try:
        return (parse_filters(event_types),
                parse_channels(channels, limit=MAX_ENDPOINT_CHANNELS))
    except SubscriptionError as exc:
        raise EndpointError(str(exc), exc.field) from None


class UnknownApp(EndpointError):
    def __init__(self, app_id: str) -> None:
        super().__init__(unknown_app_message(app_id), "app")
        self.app_id = app_id


class EndpointRegistry:
    """Endpoints in Redis: ``hookline:{ep}:endpoint`` hashes and the endpoint index
    (``hookline:endpoints``; one set per shard on a Redis Cluster, ``keys.endpoint_index_keys``)."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def add(
        self,
        endpoint_id: str,
        url: str,
        *,
        secret: str | None = None,
        timeout: float | None = None,
        retry_policy: Mapping[str, Any] | None = None,
        rate: str | None = None,
        burst: int | None = None,
        headers: Mapping[str, str] | None = None,
        app: str | None = None,
        event_types: Names = None,
        channels: Names = None,
        max_in_flight: int | None = None,
    ) -> Endpoint:
        """Register an endpoint; a secret is generated when none is given. ``headers``: extra
        request headers (name -> value; :mod:`hookline.core.headers` says which are refused).
        ``app`` makes it one of that application's endpoints (the application must exist);
        ``event_types`` and ``channels`` are its subscription
        (``hookline.core.subscriptions``), only meaningful with an ``app``."""
        validate_endpoint_id(endpoint_id)
        filters, listened = validate_subscription(event_types, channels)
        self._check_app(app)
        self._check_catalog(filters)
        now = time.time()
        endpoint = Endpoint(
            id=endpoint_id,
            url=check_target(validate_url(url)),
            secrets=(validate_secret(secret) if secret else generate_secret(),),
            timeout=validate_timeout(timeout),
            retry_policy=validate_policy_override(retry_policy or {}),
            rate=validate_rate(rate),
            burst=None if burst is None else validate_burst(burst),
            created_at=now,
            updated_at=now,
            headers=validate_headers({}, headers or {}),
            app=app,
            event_types=filters,
            channels=listened,
            max_in_flight=validate_max_in_flight(max_in_flight),
        )
        # The index first, then the endpoint in one script that refuses an existing one: the
        # two may sit on different Redis Cluster slots, and an id indexed without its hash
        # (a failure in between) is skipped by every reader, never half an endpoint.
        # The application's index too, before the hash, for the same reason (its readers
        # keep only endpoints whose hash names that application).
        self.redis.sadd(self._index_key(endpoint_id), endpoint_id)
        if app:
            self.redis.sadd(keys.app_endpoints_key(app), endpoint_id)
        script = self.redis.register_script(store.load_script("add_endpoint"))
        flat = [item for pair in endpoint.to_hash().items() for item in pair]
        if not script(keys=[keys.endpoint_key(endpoint_id)], args=flat):
            raise EndpointError(f"endpoint {endpoint_id!r} exists already: use 'endpoint update'")
        return endpoint

    def _check_app(self, app: str | None) -> None:
        if app is None:
            return
        try:
            check_app_id(app)
        except SubscriptionError as exc:
            raise EndpointError(str(exc), "app") from None
        if not self.redis.exists(keys.app_key(app)):
            raise UnknownApp(app)

    def _check_catalog(self, filters: tuple[str, ...]) -> None:
        """Once the event catalog holds any type, a filter must match one of them: a typo
        would otherwise subscribe the endpoint to nothing, silently."""
        if not filters:
            return
        catalog = EventCatalog(self.redis).names()
        unknown = unknown_filters(filters, catalog) if catalog else []
        if unknown:
            raise EndpointError(
                f"event filter {unknown[0]!r} matches no type in the event catalog: register "
                f"the type first ('hookline event-type add'), or see 'hookline event-type list'",
                "events")

    def receivers(self, app_id: str, event_type: str, channels: Sequence[str]) -> list[str]:
        """The ids of application ``app_id``'s enabled endpoints whose subscription matches
        an event of ``event_type`` carrying ``channels``, sorted: two round trips, reading
        only the fields that decide (``hookline.publish``)."""
        ids = sorted(self.redis.smembers(keys.app_endpoints_key(app_id)))
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.hmget(keys.endpoint_key(endpoint_id), "app", "enabled", "event_types",
                       "channels")
        return [endpoint_id for endpoint_id, (owner, enabled, filters, listened)
                in zip(ids, pipe.execute(), strict=True)
                if owner == app_id and enabled == "1" and subscribed(
                    json.loads(filters or "[]"), json.loads(listened or "[]"), event_type,
                    channels)]

    def members(self, app_id: str) -> list[Endpoint]:
        """The endpoints of application ``app_id``, sorted by id (an id indexed whose hash
        is gone, or names another application, is skipped)."""
        ids = sorted(self.redis.smembers(keys.app_endpoints_key(app_id)))
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.hgetall(keys.endpoint_key(endpoint_id))
        found = [Endpoint.from_hash(endpoint_id, data)
                 for endpoint_id, data in zip(ids, pipe.execute(), strict=True) if data]
        return [endpoint for endpoint in found if endpoint.app == app_id]

    def _index_key(self, endpoint_id: str) -> str:
        return keys.endpoint_index_key(endpoint_id, settings().state_shards)

    def get(self, endpoint_id: str) -> Endpoint | None:
        validate_endpoint_id(endpoint_id)
        data = self.redis.hgetall(keys.endpoint_key(endpoint_id))
        # The hash holds the endpoint's gate state too (keys.breaker_key): gate fields without
        # a url are no endpoint.
        return Endpoint.from_hash(endpoint_id, data) if data.get("url") else None

    def require(self, endpoint_id: str) -> Endpoint:
        endpoint = self.get(endpoint_id)
        if endpoint is None:
            raise UnknownEndpoint(endpoint_id)
        return endpoint

    def list(self) -> list[Endpoint]:
        ids = registered_ids(self.redis)
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.hgetall(keys.endpoint_key(endpoint_id))
        return [
            Endpoint.from_hash(endpoint_id, data)
            for endpoint_id, data in zip(ids, pipe.execute(), strict=True)
            if data.get("url")
        ]

    def update(
        self,
        endpoint_id: str,
        *,
        url: str | None = None,
        secret: str | None = None,
        timeout: float | None = None,
        retry_policy: Mapping[str, Any] | None = None,
        rate: str | None = None,
        burst: int | None = None,
        headers: Mapping[str, str] | None = None,
        remove_headers: Any = (),
        app: str | None = None,
        event_types: Names = None,
        channels: Names = None,
        max_in_flight: int | None = None,
    ) -> Endpoint:
        """Change an endpoint; pending retries use the new values at their next attempt.
        ``rate="none"`` removes the rate limit. ``headers`` are set (a name already there, in
        any case, is replaced); ``remove_headers`` names are taken out first. ``app=""`` (or
        ``"none"``) takes the endpoint out of its application, ``event_types`` /
        ``channels`` ``"none"`` (or empty) clear the filter. A new subscription applies to
        events published after it."""
        endpoint = self.require(endpoint_id)
        changes: dict[str, Any] = {"updated_at": time.time()}
        if event_types is not None or channels is not None:
            filters, listened = validate_subscription(event_types, channels)
            if event_types is not None:
                self._check_catalog(filters)
                changes["event_types"] = filters
            if channels is not None:
                changes["channels"] = listened
        if app is not None:
            changes["app"] = None if app in ("", "none") else app
            self._check_app(changes["app"])
        if url is not None:
            changes["url"] = check_target(validate_url(url))
        if secret is not None:
            changes["secrets"] = (validate_secret(secret),)
            changes["secret_expiry"] = {}
        if timeout is not None:
            changes["timeout"] = validate_timeout(timeout)
        if rate is not None:
            changes["rate"] = validate_rate(rate)
        if burst is not None:
            changes["burst"] = validate_burst(burst)
        if max_in_flight is not None:
            # 0 removes the cap
            changes["max_in_flight"] = validate_max_in_flight(max_in_flight) or None
        if retry_policy is not None:
            changes["retry_policy"] = validate_policy_override(
                {**endpoint.retry_policy, **retry_policy}
            )
        if headers or remove_headers:
            changes["headers"] = validate_headers(endpoint.headers, headers or {},
                                                  remove_headers)
        moved = "app" in changes and changes["app"] != endpoint.app
        if moved and changes["app"]:
            self.redis.sadd(keys.app_endpoints_key(changes["app"]), endpoint_id)
        saved = self._save(replace(endpoint, **changes))
        if moved and endpoint.app:
            self.redis.srem(keys.app_endpoints_key(endpoint.app), endpoint_id)
        return saved

    def rotate_secret(self, endpoint_id: str, *, secret: str | None = None,
                      overlap: float | None = None) -> tuple[Endpoint, str]:
        """Add a new signing secret (generated unless given) in front of the others; the old
        ones keep signing for ``overlap`` seconds (``HOOKLINE_SECRET_OVERLAP``), then drop.
        Secrets already expired are removed now. Returns the endpoint and the new secret."""
        endpoint = self.require(endpoint_id)
        new = validate_secret(secret) if secret else generate_secret()
        if new in endpoint.secrets:
            raise EndpointError("that secret is already one of the endpoint's secrets")
        overlap = settings().secret_overlap if overlap is None else overlap
        if not 0 <= overlap <= 30 * 86400:
            raise EndpointError(f"overlap {overlap!r} must be between 0 and 30 days in seconds")
        now = time.time()
        expiry = {old: min(endpoint.secret_expiry.get(old, math.inf), now + overlap)
                  for old in endpoint.secrets}
        kept = tuple(old for old in endpoint.secrets if expiry[old] > now)
        rotated = replace(endpoint, secrets=(new, *kept),
                          secret_expiry={old: expiry[old] for old in kept}, updated_at=now)
        return self._save(rotated), new

    def disable(self, endpoint_id: str, reason: str = "disabled by operator") -> Endpoint:
        """Stop all sends. (``retries.disable_endpoint`` also moves the endpoint's scheduled
        retries to the dead-letter queue.)"""
        validate_reason(reason)
        endpoint = self.require(endpoint_id)
        saved = self._save(
            replace(endpoint, enabled=False, disabled_reason=reason, updated_at=time.time())
        )
        return saved

    def enable(self, endpoint_id: str) -> Endpoint:
        endpoint = self.require(endpoint_id)
        return self._save(
            replace(endpoint, enabled=True, disabled_reason="", updated_at=time.time())
        )

    def pause(self, endpoint_id: str) -> Endpoint:
        """Hold every delivery to the endpoint in the retry schedule until :meth:`resume`:
        no attempt, nothing dead-lettered (piece_held.lua). Pausing a paused endpoint changes
        nothing."""
        validate_endpoint_id(endpoint_id)
        self._pause_script("pause", endpoint_id)
        return self.require(endpoint_id)

    def lift_pause(self, endpoint_id: str) -> tuple[Endpoint, int | None, int]:
        """End a pause in the registry only. Returns the endpoint, when the pause began (ms of
        Redis time; None if it was not paused) and now (ms of Redis time). Resume with
        ``hookline.delivery.retries.resume_endpoint``, which also makes the deliveries parked
        for the pause due now: lifted here alone, they would wait out their month."""
        validate_endpoint_id(endpoint_id)
        reply = self._pause_script("resume", endpoint_id)
        since = int(reply[1]) if reply[1] else None
        return self.require(endpoint_id), since, int(reply[2])

    def _pause_script(self, action: str, endpoint_id: str) -> tuple[Any, ...]:
        script = self.redis.register_script(store.load_script("pause_endpoint"))
        reply = script(keys=[keys.endpoint_key(endpoint_id), keys.breaker_key(endpoint_id)],
                       args=[action, PAUSES_KEPT])
        if reply[0] == "missing":
            raise UnknownEndpoint(endpoint_id)
        return tuple(reply)

    def remove(self, endpoint_id: str) -> None:
        """Forget the endpoint. (``retries.remove_endpoint`` also moves its scheduled retries
        to the dead-letter queue.)"""
        endpoint = self.require(endpoint_id)
        # The endpoint's own keys share its slot: one DEL removes it whole; the index entries
        # (other slots on a Redis Cluster) go after, and readers skip an id left without
        # its hash.
        self.redis.delete(*keys.endpoint_owned_keys(endpoint_id))
        self.redis.srem(self._index_key(endpoint_id), endpoint_id)
        if endpoint.app:
            self.redis.srem(keys.app_endpoints_key(endpoint.app), endpoint_id)

    def _save(self, endpoint: Endpoint) -> Endpoint:
        key = keys.endpoint_key(endpoint.id)
        # Only fields of an endpoint that still exists: a concurrent remove wins.
        script = self.redis.register_script(store.load_script("save_endpoint"))
        mapping = endpoint.to_hash()
        flat = [item for pair in mapping.items() for item in pair]
        if not script(keys=[key], args=flat):
            raise UnknownEndpoint(endpoint.id)
        return endpoint



def registered_ids(redis_client: Any) -> list[str]:
    """Every registered endpoint id, sorted: the endpoint index's shards read in turn (an id
    may be indexed whose endpoint is gone or not yet written: callers read the endpoint)."""
    found: set[str] = set()
    for index in keys.endpoint_index_keys(settings().state_shards):
        found.update(redis_client.smembers(index))
    return sorted(found)
