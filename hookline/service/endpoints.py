"""Endpoints as an operator or a tenant sees them: pages of them, one's health, and the views
of their breakers. The actions on them are :mod:`hookline.service.endpoint_actions`'s.

Public API (every function takes the actor first; ``NotFound`` for an endpoint that does not
exist or is outside ``actor.app_scope``)::

    list_endpoints(actor, *, app=None, search=None, cursor=None, limit=50)
        -> Page[EndpointSummary]       # SSCAN of the index: never reads all endpoints
    all_endpoints(actor, *, app=None) -> list[EndpointSummary]   # the CLI's full listing
    endpoint_summary(actor, endpoint_id) -> EndpointSummary
    endpoint_health(actor, endpoint_id) -> EndpointHealth
    breaker(actor, endpoint_id) -> BreakerStatus
    breakers(actor) -> list[BreakerStatus]            # every endpoint's, sorted by id
    # hookline.service.endpoint_actions (mutations: ReadOnly for a read-only actor; audited):
    add_endpoint(actor, endpoint_id, url, **fields) -> AddedEndpoint   # signature=ed25519
    update_endpoint(actor, endpoint_id, **changes) -> UpdatedEndpoint   # .summary
    remove_endpoint(actor, endpoint_id) -> None
    pause(actor, endpoint_id) -> EndpointSummary
    resume(actor, endpoint_id) -> int                 # held deliveries made due
    disable(actor, endpoint_id, reason="disabled by operator") -> EndpointSummary
    enable(actor, endpoint_id) -> EndpointSummary
    reset_breaker(actor, endpoint_id) -> None
    rotate_secret(actor, endpoint_id, *, overlap=None, secret=None, signature=None)
        -> RotatedSecret

No view carries a secret or a header value: secrets are masked (``public``), headers are names.
An ed25519 key's public key is no secret: ``public["public_keys"]`` holds it (None for an HMAC
secret), beside ``public["secret_kinds"]`` (``hmac``, ``ed25519``), newest first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hookline.core import redact
from hookline.core.config import settings
from hookline.core.endpoint import Endpoint
from hookline.core.errors import InvalidField
from hookline.core.subscriptions import check_app_id
from hookline.service.actor import Actor, NotFound
from hookline.service.pages import Page, bounded_limit
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry, registered_ids
from hookline.store.gates import BreakerStatus, Gate
from hookline.store.history import AttemptHistory, RecentAttempts
from hookline.transport.face import broker_face

#: What an unscoped actor is told of an unknown endpoint (the CLI's words since 0.1).
ADD_HINT = "add it with 'hookline endpoint add'"
#: Members SSCAN is asked for per call (a hint to Redis) while a page fills.
SCAN_COUNT = 500


@dataclass(frozen=True)
class EndpointSummary:
    """One endpoint without its secrets: what a list row and the actions' answers show.
    ``burst`` is the configured one (None: the default); ``public`` is ``Endpoint.public()``
    (secrets and header values masked), the JSON form; the gate fields come from the same
    hash read."""

    id: str
    url: str
    app: str | None
    enabled: bool
    disabled_reason: str
    paused_at: float | None
    rate: str | None
    burst: int | None
    timeout: float | None
    retry_policy: dict[str, Any]
    event_types: tuple[str, ...]
    channels: tuple[str, ...]
    max_in_flight: int | None
    created_at: float
    updated_at: float
    header_names: tuple[str, ...]
    public: dict[str, Any] = field(repr=False)
    #: closed, open or half_open.
    breaker_state: str = "closed"
    in_flight: int = 0
    #: Share delivered of the recent attempts (None before the first).
    success_rate: float | None = None
    #: When it was disabled (Unix seconds) and by whom ("": the worker, after a 410).
    disabled_at: float | None = None
    disabled_by: str = ""

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


@dataclass(frozen=True)
class EndpointHealth:
    """One endpoint's page: its summary, effective policy, breaker, recent attempts, load."""

    summary: EndpointSummary
    #: The effective retry policy (``RetryPolicy.as_dict``) and its window in seconds.
    policy: dict[str, Any]
    retry_window: float
    read_timeout: float
    #: The effective burst (the default's value when none is configured).
    effective_burst: int
    breaker: BreakerStatus
    recent: RecentAttempts
    in_flight: int
    waiting: int
    #: When each masked secret stops signing (Unix seconds; None: never), newest first.
    secret_expiry: list[float | None]


def summarize(endpoint: Endpoint, data: dict[str, Any] | None = None) -> EndpointSummary:
    """``endpoint`` without its secrets; ``data`` (its hash) adds the gate fields."""
    data = data or {}
    return EndpointSummary(
        id=endpoint.id, url=redact.url(endpoint.url), app=endpoint.app,
        enabled=endpoint.enabled, disabled_reason=endpoint.disabled_reason,
        paused_at=endpoint.paused_at, rate=endpoint.rate, burst=endpoint.burst,
        timeout=endpoint.timeout, retry_policy=dict(endpoint.retry_policy),
        event_types=endpoint.event_types, channels=endpoint.channels,
        max_in_flight=endpoint.max_in_flight, created_at=endpoint.created_at,
        updated_at=endpoint.updated_at, header_names=tuple(endpoint.headers),
        public=endpoint.public(), breaker_state=data.get("state") or "closed",
        in_flight=int(data.get("inflight") or 0),
        success_rate=RecentAttempts(endpoint.id, outcomes=data.get("outcomes") or "").success_rate,
        disabled_at=endpoint.disabled_at, disabled_by=endpoint.disabled_by,
    )


def not_found(actor: Actor, endpoint_id: str) -> NotFound:
    return NotFound("endpoint", endpoint_id, "" if actor.app_scope else ADD_HINT)


def require_endpoint(actor: Actor, endpoint_id: str,
                     registry: EndpointRegistry | None = None) -> Endpoint:
    """The endpoint, if it exists and is in the actor's scope; else :class:`NotFound` (an
    invalid id is the registry's ``EndpointError``, whoever asks)."""
    found = (registry or EndpointRegistry()).get(endpoint_id)
    if found is None or not actor.sees_app(found.app):
        raise not_found(actor, endpoint_id)
    return found


def require_replacing_secrets(actor: Actor, endpoint_id: str, registry: EndpointRegistry
                              ) -> tuple[Endpoint, bool]:
    """:func:`require_endpoint` for an action that replaces the endpoint's signing secrets: a
    sealed secret that does not open (damaged, copied from another endpoint or field) is no
    refusal, since nothing of it is kept; True says it was so
    (``EndpointRegistry.get_replacing_secrets``)."""
    found, damaged = registry.get_replacing_secrets(endpoint_id)
    if found is None or not actor.sees_app(found.app):
        raise not_found(actor, endpoint_id)
    return found, damaged


def require_known_endpoint(endpoint_id: str, *,
                           or_named_by: Callable[[str], int] | None = None) -> None:
    """An operator's filter on an endpoint: ``NotFound`` ("no endpoint 'x'") unless it is
    registered, or ``or_named_by`` finds it still named (a removed endpoint's dead letters,
    its retries left in the schedule), so that a typo says so instead of answering nothing."""
    if EndpointRegistry().exists(endpoint_id) or (or_named_by and or_named_by(endpoint_id)):
        return
    raise NotFound("endpoint", endpoint_id)


def _scoped_app(actor: Actor, app: str | None) -> str | None:
    """The application a listing is limited to: the actor's own when scoped (another one
    asked for is NotFound, as an unknown one would be)."""
    if app is not None:
        check_app_id(app)
    if actor.app_scope is None:
        return app
    if app is not None and app != actor.app_scope:
        raise NotFound("application", app)
    return actor.app_scope


def _summaries(client: Any, ids: list[str], app: str | None) -> list[EndpointSummary]:
    """The endpoints ``ids`` in one pipelined read, gone ones (and others than ``app``'s
    when given) left out, in the order of ``ids``."""
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for endpoint_id in ids:
        pipe.hgetall(keys.endpoint_key(endpoint_id))
    found = []
    for endpoint_id, data in zip(ids, pipe.execute(), strict=True):
        if not data.get("url"):
            continue
        endpoint = Endpoint.from_hash(endpoint_id, data)
        if app is None or endpoint.app == app:
            found.append(summarize(endpoint, data))
    return found


def _parse_cursor(cursor: str | None, shards: int) -> tuple[int, int, int]:
    """``<shard>:<SSCAN cursor>:<members of that batch already shown>``."""
    if not cursor:
        return 0, 0, 0
    parts = cursor.split(":")
    if len(parts) != 3 or not all(part.isascii() and part.isdigit() for part in parts):
        raise InvalidField("cursor", f"cursor {cursor[:40]!r} is not an endpoint list position")
    shard, position, skip = map(int, parts)
    if shard >= shards:
        raise InvalidField("cursor", f"cursor {cursor[:40]!r} is not an endpoint list position")
    return shard, position, skip


def _scan_ids(client: Any, index_keys: list[str], match: str | None, cursor: str | None,
              limit: int) -> tuple[list[str], str | None]:
    """Up to ``limit`` ids from the index sets in turn (SSCAN), and the cursor after them.

    One SSCAN batch is sorted, so that a page cut inside it resumes at the same member:
    the cursor counts the members of that batch already given."""
    shard, position, skip = _parse_cursor(cursor, len(index_keys))
    found: list[str] = []
    while shard < len(index_keys):
        following, batch = client.sscan(index_keys[shard], position, match=match,
                                        count=max(SCAN_COUNT, limit))
        batch = sorted(batch)[skip:]
        room = limit - len(found)
        if len(batch) > room:
            return [*found, *batch[:room]], f"{shard}:{position}:{skip + room}"
        found += batch
        skip = 0
        position = int(following)
        if position == 0:
            shard += 1
        if len(found) == limit:
            break
    return found, (f"{shard}:{position}:0" if shard < len(index_keys) else None)


def list_endpoints(actor: Actor, *, app: str | None = None, search: str | None = None,
                   cursor: str | None = None, limit: int = 50) -> Page[EndpointSummary]:
    """One page of endpoints (of ``app``; whose id contains ``search``), each page in id
    order. Walks the endpoint index (or the application's) with SSCAN: a page costs its own
    size, whatever the number of endpoints. A page may hold fewer than ``limit`` (an id
    indexed whose endpoint is gone); ``next_cursor`` None ends the list."""
    client = store.client()
    app = _scoped_app(actor, app)
    if app is not None:
        index_keys = [keys.app_endpoints_key(app)]
    else:
        index_keys = list(keys.endpoint_index_keys(settings().state_shards))
    match = f"*{keys.glob_escaped(search)}*" if search else None
    ids, following = _scan_ids(client, index_keys, match, cursor, bounded_limit(limit))
    return Page(items=_summaries(client, ids, app), next_cursor=following)


def all_endpoints(actor: Actor, *, app: str | None = None) -> list[EndpointSummary]:
    """Every endpoint in scope (of ``app`` when given), sorted by id: the CLI's listings,
    which print them all. A face that pages uses :func:`list_endpoints`."""
    client: Any = store.client()
    app = _scoped_app(actor, app)
    ids: list[str]
    if app is not None:
        ids = sorted(client.smembers(keys.app_endpoints_key(app)))
    else:
        ids = registered_ids(client)
    return _summaries(client, ids, app)


def endpoint_summary(actor: Actor, endpoint_id: str) -> EndpointSummary:
    return summarize(require_endpoint(actor, endpoint_id))


def endpoint_health(actor: Actor, endpoint_id: str) -> EndpointHealth:
    """What ``hookline endpoint show`` and the console's endpoint page show."""
    endpoint = require_endpoint(actor, endpoint_id)
    gate = Gate()
    inflight, waiting = gate.in_flight(endpoint.id, waiting=broker_face().fair_waiting)
    policy = endpoint.policy()
    return EndpointHealth(
        summary=summarize(endpoint), policy=policy.as_dict(), retry_window=policy.window(),
        read_timeout=endpoint.read_timeout(), effective_burst=endpoint.effective_burst(),
        breaker=gate.breaker_status(endpoint.id), recent=AttemptHistory().recent(endpoint.id),
        in_flight=inflight, waiting=waiting,
        secret_expiry=[endpoint.secret_expiry.get(secret) for secret in endpoint.secrets],
    )


def breaker(actor: Actor, endpoint_id: str) -> BreakerStatus:
    return Gate().breaker_status(require_endpoint(actor, endpoint_id).id)


def breaker_statuses(endpoint_ids: list[str], gate: Gate | None = None) -> list[BreakerStatus]:
    """The breakers of ``endpoint_ids``, read against one Redis time in one pipelined round
    trip (:meth:`Gate.breaker_statuses`)."""
    return (gate or Gate()).breaker_statuses(endpoint_ids)


def breakers(actor: Actor) -> list[BreakerStatus]:
    """Every endpoint's breaker in scope, by endpoint id."""
    return breaker_statuses([item.id for item in all_endpoints(actor)])
