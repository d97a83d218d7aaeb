"""Hookline's settings: read once from the environment, validated, with the variable named in
every error. ``celeryconfig.py`` reads the Celery side from here too, so both agree."""

from __future__ import annotations

import functools
import ipaddress
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hookline.core import redact, sentinel
from hookline.core.errors import HooklineError
from hookline.core.policy import MAX_BACKOFF_LIMIT, PolicyError, RetryPolicy
from hookline.core.ssrf import Network, parse_networks

#: Longest read timeout an endpoint may have, seconds.
MAX_READ_TIMEOUT = 120.0
#: Seconds an in-flight lease outlives the longest its attempt can take.
LEASE_MARGIN = 10.0
#: Longest connect timeout, seconds.
MAX_CONNECT_TIMEOUT = 60.0
#: Largest payload or response size limit, bytes (16 MiB).
MAX_BYTES = 16 * 1024 * 1024
#: Bounds of the time settings, seconds: every setting is finite and bounded, so that every
#: time computed from them (due times, TTLs) is a small finite number.
DAY = 86400.0
WEEK = 7 * DAY
YEAR = 365 * DAY
#: ``redis_wait_replicas`` for "every replica the Sentinels see up".
ALL_REPLICAS = -1


#: URL schemes naming a Redis Cluster for Hookline's state (redis-py's RedisCluster).
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
#: Default hash-tag shards on a Redis Cluster: spread evenly over the slot ranges, so 3 to 16
#: masters each hold some of every global structure.
CLUSTER_SHARDS = 16

#: Broker URL schemes whose broker is a Redis (kombu's Redis transports; ``sentinel``: one
#: managed by Redis Sentinel).
REDIS_BROKER_SCHEMES = ("redis", "rediss", "unix", "sentinel")
#: Broker URL schemes whose broker is RabbitMQ (kombu's py-amqp transport; ``amqps``: TLS).
AMQP_BROKER_SCHEMES = ("amqp", "pyamqp", "amqps")
#: Every broker Hookline supports (``HOOKLINE_BROKER_URL``); anything else is refused at
#: start-up: the releaser, the queue depths and the consume guarantees exist only for these.
SUPPORTED_BROKER_SCHEMES = REDIS_BROKER_SCHEMES + AMQP_BROKER_SCHEMES


def broker_scheme(url: str) -> str:
    """The scheme of a broker URL, lower-cased ("" when it has none)."""
    scheme, separator, _ = url.partition("://")
    return scheme.strip().lower() if separator else ""


def broker_is_amqp(url: str) -> bool:
    """Whether the broker URL names RabbitMQ (AMQP) rather than a Redis."""
    return broker_scheme(url) in AMQP_BROKER_SCHEMES


class ConfigError(HooklineError, ValueError):
    """An environment variable holds a value Hookline cannot use; the message names it."""


@dataclass(frozen=True)
class Settings:
    """Validated settings. Times are seconds, sizes bytes."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    broker_url: str = "redis://127.0.0.1:6379/0"
    #: Seconds an unacknowledged message stays invisible before the broker hands it to another
    #: worker: how late the messages held by a worker that died entirely come back. It must
    #: exceed the longest a live worker holds one (waiting for a slot, then one attempt).
    visibility_timeout: float = 300.0
    #: Seconds between a consuming process's heartbeats (hookline/liveness.py).
    heartbeat_interval: float = 2.0
    #: Seconds without a heartbeat after which a process is dead and its messages restored.
    liveness_window: float = 6.0
    #: Most attempts a worker process runs at once that are not waiting on a receiver (the
    #: rest of its slots hold attempts waiting for an answer): the CPU-bound part of a
    #: delivery runs on this many threads at most, however many slots wait on slow receivers.
    runnable_attempts: int = 64
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    #: Longest Retry-After honoured; a receiver asking for more gets this.
    retry_after_cap: float = 3600.0
    #: Seconds to connect to a receiver.
    connect_timeout: float = 5.0
    #: Default seconds to wait for the response (an endpoint's ``timeout`` overrides it).
    read_timeout: float = 15.0
    #: Largest JSON payload accepted at enqueue.
    max_payload_bytes: int = 256 * 1024
    #: Response body bytes read and kept; the rest is discarded unread.
    max_response_bytes: int = 64 * 1024
    #: How long a dead letter can still be replayed; the `done` marker lives for the retry window
    #: plus this, so a replay of an event delivered meanwhile is not sent twice.
    replay_horizon: float = 7 * 86400.0
    #: Times an attempt may be started without being settled (worker killed mid-send) before the
    #: event is dead-lettered as a poison message (reason ``worker_lost``).
    max_unsettled_starts: int = 3
    #: Where dead letters go when Redis itself is unreachable; moved into Redis later.
    dlq_spool_path: str = "hookline-dlq-spool.jsonl"
    #: Seconds a dead letter is kept; older ones are trimmed (``hookline dlq trim``, and at
    #: most once a minute when a dead letter is added). 0 keeps them forever. Never by size.
    dlq_retention: float = 30 * 86400.0
    #: Consecutive retryable failures that open an endpoint's circuit breaker.
    breaker_threshold: int = 5
    #: Seconds an opened breaker waits before one probe may go through; doubled after each
    #: failed probe up to ``breaker_max_cooldown``.
    breaker_cooldown: float = 30.0
    breaker_max_cooldown: float = 600.0
    #: Networks the SSRF guard lets through although they are private (e.g. 127.0.0.0/8 for
    #: the demo and tests, or an internal receivers' subnet). Empty: only public addresses.
    allowed_networks: tuple[Network, ...] = ()
    #: Refuse http:// endpoints (at registration and at send time).
    https_only: bool = False
    #: Seconds an old signing secret stays valid (and signs too) after a rotation.
    secret_overlap: float = 86400.0
    #: Caps on scheduled retries, in all and per endpoint; past them: dead letter backlog_full.
    schedule_max: int = 1_000_000
    schedule_max_per_endpoint: int = 100_000
    #: Most messages the retry queue holds; due retries past it wait in the schedule, so the
    #: workers' share for first deliveries stays free.
    retry_queue_limit: int = 1000
    #: Where due retries are released: "worker" (a thread in every worker) or "off" (run
    #: ``hookline releaser`` as its own process).
    releaser: str = "worker"
    #: Longest a releaser sleeps between looks at the schedule, seconds.
    releaser_max_sleep: float = 1.0
    #: Longest a worker gathers task events (for Flower) before it publishes them as one
    #: message, seconds; a batch goes out sooner when it holds Celery's buffer limit (24
    #: events). 0: on the event loop's next turn, as Celery does.
    events_flush_interval: float = 0.1
    #: Publishers send Celery's ``task-sent`` event (Flower then lists a delivery as PENDING
    #: from its publish, not from its receipt by a worker): one Redis PUBLISH per delivery,
    #: unbatched (a batch published late would overwrite a RETRY Flower already shows).
    task_sent_events: bool = False
    #: Port of the worker's Prometheus metrics server; 0: no server.
    metrics_port: int = 9808
    #: Address the metrics servers (the worker's, ``hookline metrics``) listen on: an IP
    #: address; 0.0.0.0 or :: for every interface.
    metrics_address: str = "127.0.0.1"
    #: Most endpoints with a series of their own in a worker's metrics; the rest are counted
    #: under ``endpoint="_other"``. 0: none (every endpoint is ``_other``).
    metrics_max_endpoints: int = 200
    log_format: str = "text"
    #: Seconds an event's attempt history is kept after its latest attempt; 0: none is kept;
    #: None (the default): as long as the event's delivery record (:attr:`done_ttl`), in that
    #: record (``hookline.store.delivery``), which costs settle no extra Redis command.
    history_retention: float | None = None
    #: Most attempts kept per event (the latest ones).
    history_attempts: int = 50
    #: Response body bytes kept with each attempt in the history; 0: none.
    history_body_bytes: int = 256
    #: Hash-tag shards the retry schedule, the dead-letter queue and the endpoint index are
    #: split over (``hookline.store.keys``): 1 on a single Redis, 16 on a Redis Cluster.
    state_shards: int = 1
    #: The registered endpoint that operational events (endpoint disabled, event
    #: dead-lettered, endpoint failing or recovered) are sent to as webhooks; None: none.
    operational_endpoint: str | None = None
    #: Modules the worker imports at start-up: a host's operational-event callbacks and
    #: signal receivers (``hookline.operational``), connected in the worker process.
    worker_imports: tuple[str, ...] = ()

    @property
    def state_is_cluster(self) -> bool:
        """``REDIS_URL`` names a Redis Cluster (``redis+cluster://``)."""
        return self.redis_url.startswith(CLUSTER_SCHEMES)

    @property
    def broker_is_state(self) -> bool:
        """The broker is Hookline's own Redis (``HOOKLINE_BROKER_URL`` unset, or the same URL
        as ``REDIS_URL``): one script can touch a message and Hookline's state together."""
        return self.broker_url == self.redis_url

    @functools.cached_property
    def broker_amqp(self) -> bool:
        """The broker is RabbitMQ (:func:`broker_is_amqp`), worked out once per settings."""
        return broker_is_amqp(self.broker_url)
    #: Redis Sentinel (a ``sentinel://`` REDIS_URL or HOOKLINE_BROKER_URL, see
    #: ``hookline/core/sentinel.py``): the name of the master the Sentinels monitor, the same
    #: for both URLs; "" when neither is a Sentinel URL.
    sentinel_master: str = ""
    #: The Sentinels' own password (their ``requirepass``), if they have one; the master's is
    #: in the URL.
    sentinel_password: str = field(default="", repr=False)
    #: Replicas that must have a write which hands an event on (a published event, a parked
    #: retry, a dead letter) before Hookline lets go of the event (Redis WAIT), and the
    #: longest it waits for them, seconds; too few in time fails the write as an unreachable
    #: Redis would (hookline/store/replication.py). Default: every replica the Sentinels see
    #: up (:data:`ALL_REPLICAS`) with a Sentinel URL, else 0.
    redis_wait_replicas: int = 0
    redis_wait_timeout: float = 1.0

    def lease_seconds(self, read_timeout: float | None = None) -> float:
        """How long an attempt's in-flight lease lives: the longest the attempt can take
        (connect, then the response and its body within twice the read timeout), plus a
        margin. The admit script computes the same from the endpoint's own timeout."""
        read = self.read_timeout if read_timeout is None else read_timeout
        return self.connect_timeout + 2 * read + LEASE_MARGIN

    def longest_read_timeout(self) -> float:
        """The longest read timeout an endpoint may have: its attempts must end, lease and
        all, before the broker's visibility timeout hands the message to another worker."""
        return min(MAX_READ_TIMEOUT,
                   (self.visibility_timeout - self.connect_timeout - LEASE_MARGIN) / 2)

    @property
    def done_ttl(self) -> int:
        return math.ceil(self.retry_policy.max_age + self.replay_horizon)

    @property
    def history_lifetime(self) -> int:
        """Seconds an event's attempts are kept after its latest one (0: none)."""
        if self.history_retention is None:
            return self.done_ttl
        return math.ceil(self.history_retention)

    @property
    def history_in_record(self) -> bool:
        """Whether the attempt history lives in the delivery record (kept at least as long as
        the done marker) rather than in a list of its own with a shorter lifetime."""
        return self.history_lifetime >= self.done_ttl

    @property
    def record_ttl(self) -> int:
        """Seconds an event's delivery record outlives its latest write: the done marker's
        lifetime, or the history's when that is longer and the history lives there."""
        return max(self.done_ttl, self.history_lifetime)


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0,
            maximum: float = math.inf) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or not minimum <= value <= maximum:
        bounds = f">= {minimum}" if maximum == math.inf else f"between {minimum} and {maximum}"
        raise ConfigError(f"{name}={raw!r} must be a finite number {bounds}")
    return value


def _integer(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0,
             maximum: int = 10**9) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if not minimum <= value <= maximum:
        raise ConfigError(f"{name}={raw!r} must be an integer from {minimum} to {maximum}")
    return value


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    port = _integer(env, name, default)
    if port > 65535:
        raise ConfigError(f"{name}={port} must be a TCP port (1-65535), or 0 for none")
    return port


#: Environment variable -> RetryPolicy field.
POLICY_VARIABLES = {
    "HOOKLINE_INITIAL_BACKOFF": "initial_backoff",
    "HOOKLINE_BACKOFF_MULTIPLIER": "multiplier",
    "HOOKLINE_MAX_BACKOFF": "max_backoff",
    "HOOKLINE_JITTER": "jitter",
    "HOOKLINE_MAX_ATTEMPTS": "max_attempts",
    "HOOKLINE_MAX_AGE": "max_age",
}


def _retry_policy(env: Mapping[str, str]) -> RetryPolicy:
    defaults = RetryPolicy()
    values: dict[str, float | int] = {}
    for variable, name in POLICY_VARIABLES.items():
        if name == "max_attempts":
            values[name] = _integer(env, variable, defaults.max_attempts, minimum=1)
        else:
            values[name] = _number(env, variable, getattr(defaults, name), minimum=-math.inf)
    try:
        return RetryPolicy(**values)  # type: ignore[arg-type]
    except PolicyError as exc:
        named = [v for v, n in POLICY_VARIABLES.items() if str(exc).startswith(n)]
        prefix = named[0] if named else "HOOKLINE_* retry settings"
        raise ConfigError(f"{prefix}: {exc}") from None


def _networks(env: Mapping[str, str], name: str) -> tuple[Network, ...]:
    try:
        return parse_networks(env.get(name) or "")
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _address(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        return str(ipaddress.ip_address(raw.strip("[]")))
    except ValueError:
        raise ConfigError(f"{name}={raw!r} must be an IP address to listen on (e.g. "
                          "127.0.0.1, or 0.0.0.0 for every interface)") from None


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} must be true or false")


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = (env.get(name) or choices[0]).strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value


def _broker_url(env: Mapping[str, str], redis_url: str) -> str:
    """``HOOKLINE_BROKER_URL`` (default: Hookline's Redis, whose URL is checked as such),
    refused unless its scheme is one of :data:`SUPPORTED_BROKER_SCHEMES` (the password never
    appears in the message)."""
    url = (env.get("HOOKLINE_BROKER_URL") or "").strip()
    if not url:
        return redis_url
    scheme = broker_scheme(url)
    # A Redis Cluster URL is refused by _cluster_checked, which says why.
    if scheme not in SUPPORTED_BROKER_SCHEMES and not url.startswith(CLUSTER_SCHEMES):
        raise ConfigError(
            f"HOOKLINE_BROKER_URL={redact.url(url)!r} (scheme {scheme or 'missing'!r}): "
            "Hookline does not support this broker; supported broker URL schemes: "
            f"{', '.join(s + '://' for s in SUPPORTED_BROKER_SCHEMES)} (Redis, Redis "
            "Sentinel, RabbitMQ)")
    return url


def _sentinel_settings(env: Mapping[str, str], redis_variable: str, redis_url: str
                       ) -> dict[str, Any]:
    """The Sentinel and WAIT settings, each ``sentinel://`` URL checked where it enters (see
    ``hookline/core/sentinel.py`` for the syntax)."""
    urls = {redis_variable: redis_url, "HOOKLINE_BROKER_URL": env.get("HOOKLINE_BROKER_URL")}
    named = [variable for variable, url in urls.items() if url and sentinel.is_sentinel(url)]
    for variable in named:
        try:
            sentinel.parse(urls[variable] or "")
        except ValueError as exc:
            raise ConfigError(f"{variable}={sentinel.shown(urls[variable] or '')!r}: {exc}"
                              ) from None
    master = (env.get("HOOKLINE_SENTINEL_MASTER") or "").strip()
    if named and not master:
        raise ConfigError(
            f"{' and '.join(named)} {'is a' if len(named) == 1 else 'are'} Redis Sentinel "
            f"URL{'' if len(named) == 1 else 's'} (sentinel://): set "
            "HOOKLINE_SENTINEL_MASTER to the name of the master they monitor (the <name> of "
            "their 'sentinel monitor <name> <host> <port> <quorum>' line)")
    if master and not sentinel.MASTER_NAME.match(master):
        raise ConfigError(f"HOOKLINE_SENTINEL_MASTER={master!r} must be a name of 1-200 "
                          "letters, digits and _ . : -")
    return {
        "sentinel_master": master,
        "sentinel_password": env.get("HOOKLINE_SENTINEL_PASSWORD") or "",
        "redis_wait_replicas": _wait_replicas(env, sentinel_in_use=bool(named)),
        "redis_wait_timeout": _number(env, "HOOKLINE_REDIS_WAIT_TIMEOUT", 1.0, minimum=0.001,
                                      maximum=60.0),
    }


def _wait_replicas(env: Mapping[str, str], *, sentinel_in_use: bool) -> int:
    """HOOKLINE_REDIS_WAIT_REPLICAS: a number, or ``all`` (:data:`ALL_REPLICAS`: every
    replica the Sentinels see up), the default with a Sentinel URL; 0 without one."""
    raw = (env.get("HOOKLINE_REDIS_WAIT_REPLICAS") or "").strip().lower()
    if raw == "all" or (not raw and sentinel_in_use):
        if not sentinel_in_use:
            raise ConfigError("HOOKLINE_REDIS_WAIT_REPLICAS=all counts the replicas Redis "
                              "Sentinel sees: it needs a sentinel:// REDIS_URL or "
                              "HOOKLINE_BROKER_URL; give a number instead")
        return ALL_REPLICAS
    return _integer(env, "HOOKLINE_REDIS_WAIT_REPLICAS", 0, maximum=100)


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings; raise :class:`ConfigError` naming the bad variable."""
    env = os.environ if env is None else env
    # HOOKLINE_REDIS_URL first: in a host project REDIS_URL may name the host's own Redis (a
    # cache that evicts keys, say), which Hookline's state must not share.
    variable = "HOOKLINE_REDIS_URL" if env.get("HOOKLINE_REDIS_URL") else "REDIS_URL"
    redis_url = env.get(variable) or "redis://127.0.0.1:6379/0"
    if not redis_url.startswith(("redis://", "rediss://", "unix://", sentinel.SCHEME,
                                 *CLUSTER_SCHEMES)):
        raise ConfigError(
            f"{variable}={redact.url(redis_url)!r} must start with redis://, rediss://, "
            "unix://, sentinel:// (Redis Sentinel), or redis+cluster:// / rediss+cluster:// "
            "(Redis Cluster)")
    log_format = env.get("HOOKLINE_LOG_FORMAT", "text").lower()
    if log_format not in ("text", "json"):
        raise ConfigError(f"HOOKLINE_LOG_FORMAT={log_format!r} must be 'text' or 'json'")
    settings = Settings(
        redis_url=redis_url,
        broker_url=_broker_url(env, redis_url),
        visibility_timeout=_number(env, "CELERY_VISIBILITY_TIMEOUT", 300.0, minimum=5.0,
                                   maximum=WEEK),
        heartbeat_interval=_number(env, "HOOKLINE_HEARTBEAT_INTERVAL", 2.0, minimum=0.05,
                                   maximum=60.0),
        liveness_window=_number(env, "HOOKLINE_LIVENESS_WINDOW", 6.0, minimum=0.2,
                                maximum=3600.0),
        runnable_attempts=_integer(env, "HOOKLINE_RUNNABLE_ATTEMPTS", 64, minimum=1,
                                   maximum=100_000),
        retry_policy=_retry_policy(env),
        retry_after_cap=_number(env, "HOOKLINE_RETRY_AFTER_CAP", 3600.0,
                                maximum=MAX_BACKOFF_LIMIT),
        connect_timeout=_number(env, "HOOKLINE_CONNECT_TIMEOUT", 5.0, minimum=0.1,
                                maximum=MAX_CONNECT_TIMEOUT),
        read_timeout=_number(env, "HOOKLINE_READ_TIMEOUT", 15.0, minimum=0.1,
                             maximum=MAX_READ_TIMEOUT),
        max_payload_bytes=_integer(env, "HOOKLINE_MAX_PAYLOAD_BYTES", 256 * 1024, minimum=1,
                                   maximum=MAX_BYTES),
        max_response_bytes=_integer(env, "HOOKLINE_MAX_RESPONSE_BYTES", 64 * 1024, minimum=0,
                                    maximum=MAX_BYTES),
        replay_horizon=_number(env, "HOOKLINE_REPLAY_HORIZON", 7 * 86400.0, maximum=YEAR),
        max_unsettled_starts=_integer(env, "HOOKLINE_MAX_UNSETTLED_STARTS", 3, minimum=1,
                                      maximum=100),
        dlq_spool_path=env.get("HOOKLINE_DLQ_SPOOL", "hookline-dlq-spool.jsonl"),
        dlq_retention=_number(env, "HOOKLINE_DLQ_RETENTION", 30 * 86400.0, maximum=10 * YEAR),
        breaker_threshold=_integer(env, "HOOKLINE_BREAKER_THRESHOLD", 5, minimum=1),
        breaker_cooldown=_number(env, "HOOKLINE_BREAKER_COOLDOWN", 30.0, minimum=0.1,
                                 maximum=DAY),
        breaker_max_cooldown=_number(env, "HOOKLINE_BREAKER_MAX_COOLDOWN", 600.0, minimum=0.1,
                                     maximum=DAY),
        allowed_networks=_networks(env, "HOOKLINE_ALLOWED_NETWORKS"),
        https_only=_flag(env, "HOOKLINE_HTTPS_ONLY", False),
        secret_overlap=_number(env, "HOOKLINE_SECRET_OVERLAP", 86400.0, maximum=30 * DAY),
        schedule_max=_integer(env, "HOOKLINE_SCHEDULE_MAX", 1_000_000, minimum=1),
        schedule_max_per_endpoint=_integer(env, "HOOKLINE_SCHEDULE_MAX_PER_ENDPOINT", 100_000,
                                           minimum=1),
        retry_queue_limit=_integer(env, "HOOKLINE_RETRY_QUEUE_LIMIT", 1000, minimum=1,
                                   maximum=10**7),
        releaser=_choice(env, "HOOKLINE_RELEASER", ("worker", "off")),
        releaser_max_sleep=_number(env, "HOOKLINE_RELEASER_MAX_SLEEP", 1.0, minimum=0.01,
                                   maximum=60.0),
        events_flush_interval=_number(env, "HOOKLINE_EVENTS_FLUSH_INTERVAL", 0.1,
                                      maximum=10.0),
        task_sent_events=_flag(env, "HOOKLINE_TASK_SENT_EVENTS", False),
        metrics_port=_port(env, "HOOKLINE_METRICS_PORT", 9808),
        metrics_address=_address(env, "HOOKLINE_METRICS_ADDRESS", "127.0.0.1"),
        metrics_max_endpoints=_integer(env, "HOOKLINE_METRICS_MAX_ENDPOINTS", 200),
        log_format=log_format,
        history_retention=(None if not env.get("HOOKLINE_HISTORY_RETENTION", "").strip() else
                           _number(env, "HOOKLINE_HISTORY_RETENTION", 0.0, maximum=YEAR)),
        history_attempts=_integer(env, "HOOKLINE_HISTORY_ATTEMPTS", 50, minimum=1,
                                  maximum=10_000),
        history_body_bytes=_integer(env, "HOOKLINE_HISTORY_BODY_BYTES", 256, minimum=0,
                                    maximum=64 * 1024),
        operational_endpoint=_endpoint_id(env, "HOOKLINE_OPERATIONAL_ENDPOINT"),
        worker_imports=_module_names(env, "HOOKLINE_WORKER_IMPORTS"),
        **_sentinel_settings(env, variable, redis_url),
    )
    if settings.breaker_max_cooldown < settings.breaker_cooldown:
        raise ConfigError(
            f"HOOKLINE_BREAKER_MAX_COOLDOWN ({settings.breaker_max_cooldown:g}s) must be at "
            f"least HOOKLINE_BREAKER_COOLDOWN ({settings.breaker_cooldown:g}s)"
        )
    if settings.liveness_window < 2 * settings.heartbeat_interval:
        raise ConfigError(
            f"HOOKLINE_LIVENESS_WINDOW ({settings.liveness_window:g}s) must be at least twice "
            f"HOOKLINE_HEARTBEAT_INTERVAL ({settings.heartbeat_interval:g}s): a live process "
            "would be declared dead between two of its heartbeats")
    if settings.visibility_timeout <= settings.lease_seconds():
        raise ConfigError(
            f"CELERY_VISIBILITY_TIMEOUT ({settings.visibility_timeout:g}s) must exceed the "
            f"longest attempt ({settings.lease_seconds():g}s: connect + 2 x read timeout + "
            f"{LEASE_MARGIN:g}s), or a message still being sent is handed to a second worker"
        )
    return _cluster_checked(env, variable, settings)


_ENDPOINT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _endpoint_id(env: Mapping[str, str], name: str) -> str | None:
    value = (env.get(name) or "").strip()
    if not value:
        return None
    if not _ENDPOINT_ID.match(value):
        raise ConfigError(f"{name}={value[:80]!r} must be an endpoint id: a letter or digit, "
                          "then up to 63 letters, digits, '_', '.' or '-'")
    return value


def _module_names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in (env.get(name) or "").split(",") if part.strip())
    for module in names:
        if not _MODULE_NAME.match(module):
            raise ConfigError(f"{name}: {module[:80]!r} is not a dotted module name "
                              "(e.g. myshop.webhook_signals)")
    return names


def _cluster_checked(env: Mapping[str, str], variable: str, settings: Settings) -> Settings:
    """The Redis Cluster rules: the broker cannot be a cluster (kombu has no cluster transport),
    and several state shards need a broker apart from the state (consume.lua parks held
    endpoints' deliveries into one schedule shard when they share a Redis)."""
    if settings.broker_url.startswith(CLUSTER_SCHEMES):
        named = (f"HOOKLINE_BROKER_URL={redact.url(settings.broker_url)!r} names a Redis Cluster"
                 if env.get("HOOKLINE_BROKER_URL") else
                 f"{variable} names a Redis Cluster and HOOKLINE_BROKER_URL is not set (the "
                 f"broker defaults to {variable})")
        raise ConfigError(
            f"{named}: a Redis Cluster cannot be Celery's broker (kombu has no cluster "
            "transport); set HOOKLINE_BROKER_URL to a single Redis, a Sentinel-managed one or "
            "RabbitMQ")
    waits = (env.get("HOOKLINE_REDIS_WAIT_REPLICAS") or "").strip()
    if settings.state_is_cluster and waits not in ("", "0"):
        raise ConfigError(
            f"HOOKLINE_REDIS_WAIT_REPLICAS={waits!r}: {variable} names a Redis Cluster, whose "
            "writes Hookline does not wait for (WAIT applies to a Sentinel-managed Redis); "
            "unset it (a sentinel:// broker still waits for all its replicas) or set 0")
    shards = _integer(env, "HOOKLINE_STATE_SHARDS",
                      CLUSTER_SHARDS if settings.state_is_cluster else 1, minimum=1, maximum=256)
    if shards > 1 and settings.broker_is_state:
        raise ConfigError(
            f"HOOKLINE_STATE_SHARDS={shards} needs HOOKLINE_BROKER_URL apart from {variable}: "
            "on a shared Redis the state stays in one shard (1)")
    return replace(settings, state_shards=shards)


class _NamesRead(dict[str, str]):
    """An empty environment that remembers every variable name asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.names.add(key)
        return default


@functools.cache
def setting_names() -> frozenset[str]:
    """Every variable :func:`load_settings` reads, derived from the loader itself."""
    names = _NamesRead()
    load_settings(names)
    return frozenset(names.names)


_configured: Settings | None = None


def settings() -> Settings:
    """The process's settings: those given to :func:`configure`, else the environment's,
    loaded on first use."""
    return _configured if _configured is not None else _from_environment()


@functools.cache
def _from_environment() -> Settings:
    return load_settings()


def configure(overrides: Mapping[str, str] | None = None) -> Settings:
    """Set this process's settings from the environment plus ``overrides`` (the variables'
    names), validated; ``configure()`` alone re-reads the environment. For tests and tools
    that run in one process: a worker reads only its own environment."""
    global _configured
    merged = {**os.environ, **{key: str(value) for key, value in (overrides or {}).items()}}
    _configured = load_settings(merged)
    return _configured
