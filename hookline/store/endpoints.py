"""The endpoint registry: endpoints (``hookline.core.endpoint``) kept in Redis.

One Redis hash per endpoint (``hookline:{ep}:endpoint``) plus a set of all ids, and for an
endpoint of an application, a set of that application's endpoint ids
(``hookline:{app:<id>}:endpoints``), and the set of the ordered ones' ids
(``hookline:ordered_endpoints``). Secrets live only here; tasks carry the endpoint id, never
its URL or secret. Every field is checked on its way in (``hookline.core.endpoint_validation``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Unpack

from hookline.core.config import settings
from hookline.core.endpoint import (
    Endpoint,
    EndpointError,
    SealedRecordError,
    UnknownEndpoint,
    generate_secret,
    open_field,
)
from hookline.core.endpoint_validation import (
    check_target,
    checked_settings,
    validate_endpoint_id,
    validate_headers,
    validate_policy_override,
    validate_reason,
    validate_secret,
    validate_subscription,
    validate_url,
)
from hookline.core.specs import EndpointSpec
from hookline.core.subscriptions import SubscriptionError, check_app_id, subscribed, unknown_filters
from hookline.store import connection as store
from hookline.store import disabled, health, keys
from hookline.store.apps import unknown_app_message
from hookline.store.catalog import EventCatalog
from hookline.store.lua import ADD_ENDPOINT, PAUSE_ENDPOINT, SAVE_ENDPOINT

#: How far ahead a paused endpoint's deliveries are parked, seconds (piece_held.lua's
#: PAUSE_PARK_MS): a month, longer than any backoff, Retry-After or cool-down can park one
#: (``hookline.core.policy.MAX_BACKOFF_LIMIT``), so resume knows the parked-for-the-pause ones
#: by their due time alone, and no worker looks at them while the pause lasts.
PAUSE_PARK = 30 * 86400.0
#: Pause periods kept on an endpoint (for the age limit, which leaves paused time out).
PAUSES_KEPT = 50


class UnknownApp(EndpointError):
    def __init__(self, app_id: str) -> None:
        super().__init__(unknown_app_message(app_id), "app")
        self.app_id = app_id


class EndpointRegistry:
    """Endpoints in Redis: ``hookline:{ep}:endpoint`` hashes and the endpoint index
    (``hookline:endpoints``; one set per shard on a Redis Cluster, ``keys.endpoint_index_keys``)."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def add(self, endpoint_id: str, url: str, **spec: Unpack[EndpointSpec]) -> Endpoint:
        """Register an endpoint; a secret is generated when none is given. ``headers``: extra
        request headers (name -> value; :mod:`hookline.core.headers` says which are refused).
        ``app`` makes it one of that application's endpoints (the application must exist);
        ``event_types`` and ``channels`` are its subscription
        (``hookline.core.subscriptions``), only meaningful with an ``app``. Whether the broker
        can keep an ``ordered`` endpoint's lines is the caller's check (the service's)."""
        validate_endpoint_id(endpoint_id)
        filters, listened = validate_subscription(spec.get("event_types"), spec.get("channels"))
        app, secret = spec.get("app"), spec.get("secret")
        self._check_app(app)
        self._check_catalog(filters)
        now = time.time()
        endpoint = Endpoint(
            id=endpoint_id,
            url=check_target(validate_url(url)),
            secrets=(validate_secret(secret) if secret else generate_secret(),),
            retry_policy=validate_policy_override(spec.get("retry_policy") or {}),
            created_at=now,
            updated_at=now,
            headers=validate_headers({}, spec.get("headers") or {},
                                     spec.get("remove_headers", ())),
            app=app,
            event_types=filters,
            channels=listened,
            **checked_settings(spec),
        )
        # The index first, then the endpoint in one script that refuses an existing one: the
        # two may sit on different Redis Cluster slots, and an id indexed without its hash
        # (a failure in between) is skipped by every reader, never half an endpoint.
        # The application's index too, before the hash, for the same reason (its readers
        # keep only endpoints whose hash names that application).
        self.redis.sadd(self._index_key(endpoint_id), endpoint_id)
        if app:
            self.redis.sadd(keys.app_endpoints_key(app), endpoint_id)
        if endpoint.ordered:
            self.redis.sadd(keys.ORDERED_ENDPOINTS, endpoint_id)
        flat = [item for pair in endpoint.to_hash().items() for item in pair]
        if not ADD_ENDPOINT.run(self.redis, endpoint=keys.endpoint_key(endpoint_id),
                                fields=flat):
            if endpoint.ordered and self.redis.hget(keys.endpoint_key(endpoint_id),
                                                    "ordered") != "1":
                self.redis.srem(keys.ORDERED_ENDPOINTS, endpoint_id)
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

    def receivers(self, app_id: str, event_type: str, channels: Sequence[str]
                  ) -> tuple[list[str], list[str]]:
        """The ids of application ``app_id``'s enabled endpoints whose subscription matches
        an event of ``event_type`` carrying ``channels``, sorted, as (not ordered, ordered):
        two round trips, reading only the fields that decide (``hookline.publish``)."""
        ids = sorted(self.redis.smembers(keys.app_endpoints_key(app_id)))
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.hmget(keys.endpoint_key(endpoint_id), "app", "enabled", "event_types",
                       "channels", "ordered")
        found: tuple[list[str], list[str]] = ([], [])
        for endpoint_id, (owner, enabled, filters, listened, ordered) in zip(
                ids, pipe.execute(), strict=True):
            if owner == app_id and enabled == "1" and subscribed(
                    json.loads(filters or "[]"), json.loads(listened or "[]"), event_type,
                    channels):
                found[ordered == "1"].append(endpoint_id)
        return found

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

    def get_replacing_secrets(self, endpoint_id: str) -> tuple[Endpoint | None, bool]:
        """The endpoint as :meth:`get` reads it, for a change that replaces its signing
        secrets: a ``secrets`` field that does not open with the key its id names (damaged,
        or copied from another endpoint or field) is read as no secret, and True says so.
        A key ``HOOKLINE_ENCRYPTION_KEYS`` does not hold, or another field that does not
        open, is refused as :meth:`get` refuses it."""
        validate_endpoint_id(endpoint_id)
        data = self.redis.hgetall(keys.endpoint_key(endpoint_id))
        if not data.get("url"):
            return None, False
        if not damaged_secrets(endpoint_id, data):
            return Endpoint.from_hash(endpoint_id, data), False
        return Endpoint.from_hash(endpoint_id, {**data, "secrets": "[]"}), True

    def _require_replacing_secrets(self, endpoint_id: str) -> Endpoint:
        endpoint, _ = self.get_replacing_secrets(endpoint_id)
        if endpoint is None:
            raise UnknownEndpoint(endpoint_id)
        return endpoint

    def exists(self, endpoint_id: str) -> bool:
        """Whether endpoint ``endpoint_id`` is registered (its record is not read: one whose
        sealed fields do not open exists too)."""
        return bool(self.redis.hexists(keys.endpoint_key(endpoint_id), "url"))

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

    def update(self, endpoint_id: str, *, url: str | None = None,
               **spec: Unpack[EndpointSpec]) -> Endpoint:
        """Change an endpoint; pending retries use the new values at their next attempt.
        ``rate="none"`` removes the rate limit. ``headers`` are set (a name already there, in
        any case, is replaced); ``remove_headers`` names are taken out first. ``app=""`` (or
        ``"none"``) takes the endpoint out of its application, ``event_types`` /
        ``channels`` ``"none"`` (or empty) clear the filter. A new subscription applies to
        events published after it. A new ``secret`` replaces a damaged sealed one
        (:meth:`get_replacing_secrets`)."""
        secret, app = spec.get("secret"), spec.get("app")
        endpoint = (self.require(endpoint_id) if secret is None
                    else self._require_replacing_secrets(endpoint_id))
        changes: dict[str, Any] = {"updated_at": time.time()}
        event_types, channels = spec.get("event_types"), spec.get("channels")
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
        changes.update(checked_settings(spec))
        if "max_in_flight" in changes:
            changes["max_in_flight"] = changes["max_in_flight"] or None  # 0 removes the cap
        retry_policy = spec.get("retry_policy")
        if retry_policy is not None:
            changes["retry_policy"] = validate_policy_override({**endpoint.retry_policy,
                                                                **retry_policy})
        headers, remove_headers = spec.get("headers"), spec.get("remove_headers", ())
        if headers or remove_headers:
            changes["headers"] = validate_headers(endpoint.headers, headers or {},
                                                  remove_headers)
        moved = "app" in changes and changes["app"] != endpoint.app
        if moved and changes["app"]:
            self.redis.sadd(keys.app_endpoints_key(changes["app"]), endpoint_id)
        if changes.get("ordered"):
            self.redis.sadd(keys.ORDERED_ENDPOINTS, endpoint_id)
        saved = self._save(replace(endpoint, **changes))
        if moved and endpoint.app:
            self.redis.srem(keys.app_endpoints_key(endpoint.app), endpoint_id)
        if changes.get("ordered") is False:
            self.redis.srem(keys.ORDERED_ENDPOINTS, endpoint_id)
        return saved

    def rotate_secret(self, endpoint_id: str, *, secret: str | None = None,
                      overlap: float | None = None) -> tuple[Endpoint, str]:
        """Add a new signing secret (generated unless given) in front of the others; the old
        ones keep signing for ``overlap`` seconds (``HOOKLINE_SECRET_OVERLAP``), then drop.
        Secrets already expired are removed now, and a damaged sealed one is replaced
        (:meth:`get_replacing_secrets`: nothing of it to keep). Returns the endpoint and the
        new secret."""
        endpoint = self._require_replacing_secrets(endpoint_id)
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

    def disable(self, endpoint_id: str, reason: str = "disabled by operator", *,
                by: str = "") -> Endpoint:
        """Stop all sends, recording why, when and ``by`` whom. (``retries.disable_endpoint``
        also moves the endpoint's scheduled retries to the dead-letter queue.)"""
        validate_reason(reason)
        endpoint, now = self.require(endpoint_id), time.time()
        saved = self._save(replace(endpoint, enabled=False, disabled_reason=reason,
                                   disabled_at=now, disabled_by=by, updated_at=now))
        disabled.mark(self.redis, endpoint_id, now)  # the overview's index (store/disabled.py)
        return saved

    def enable(self, endpoint_id: str) -> Endpoint:
        endpoint = self.require(endpoint_id)
        saved = self._save(replace(endpoint, enabled=True, disabled_reason="",
                                   disabled_at=None, disabled_by="", updated_at=time.time()))
        disabled.clear(self.redis, endpoint_id)
        return saved

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
        reply = PAUSE_ENDPOINT.run(self.redis, endpoint=keys.endpoint_key(endpoint_id),
                                   breaker=keys.breaker_key(endpoint_id), action=action,
                                   kept=PAUSES_KEPT)
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
        self.redis.delete(*keys.endpoint_owned_keys(endpoint_id),
                          health.attempts_key(endpoint_id))
        self.redis.srem(self._index_key(endpoint_id), endpoint_id)
        disabled.clear(self.redis, endpoint_id)
        self.redis.srem(keys.ORDERED_ENDPOINTS, endpoint_id)
        if endpoint.app:
            self.redis.srem(keys.app_endpoints_key(endpoint.app), endpoint_id)

    def _save(self, endpoint: Endpoint) -> Endpoint:
        key = keys.endpoint_key(endpoint.id)
        # Only fields of an endpoint that still exists: a concurrent remove wins.
        mapping = endpoint.to_hash()
        flat = [item for pair in mapping.items() for item in pair]
        if not SAVE_ENDPOINT.run(self.redis, endpoint=key, fields=flat):
            raise UnknownEndpoint(endpoint.id)
        return endpoint


def damaged_secrets(endpoint_id: str, data: Mapping[str, str]) -> bool:
    """Whether the stored ``secrets`` field of an endpoint does not open with the key its id
    names (damaged, or copied from another endpoint or field): not a missing key."""
    try:
        open_field(endpoint_id, "secrets", data.get("secrets") or "[]")
    except SealedRecordError as exc:
        return not exc.missing_key
    return False


def registered_ids(redis_client: Any) -> list[str]:
    """Every registered endpoint id, sorted: the endpoint index's shards read in turn (an id
    may be indexed whose endpoint is gone or not yet written: callers read the endpoint)."""
    found: set[str] = set()
    for index in keys.endpoint_index_keys(settings().state_shards):
        found.update(redis_client.smembers(index))
    return sorted(found)


def ordered_ids(redis_client: Any) -> list[str]:
    """The ids of the ordered endpoints, sorted (``keys.ORDERED_ENDPOINTS``: like the index,
    marked before the endpoint's hash says it, unmarked after, so an id there may for a moment
    be an endpoint gone or no longer ordered: callers read the endpoint's ``ordered``)."""
    return sorted(redis_client.smembers(keys.ORDERED_ENDPOINTS))
