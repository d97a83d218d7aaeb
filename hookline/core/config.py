"""Hookline's settings: read once from the environment, validated, with the variable named in
every error. The variables themselves (name, default, bounds, meaning) are declared in
``hookline.core.variables``; this module turns them into :class:`Settings` and checks the rules
that join several of them. ``hookline.celeryconfig`` reads the Celery side from here too, so
both agree."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from hookline.core import redact, sentinel
from hookline.core.env import ConfigError, Integer, raw
from hookline.core.policy import PolicyError, RetryPolicy
from hookline.core.ssrf import Network
from hookline.core.variables import (
    CONNECTION,
    DAY,
    MAX_BYTES,
    MAX_CONNECT_TIMEOUT,
    MAX_READ_TIMEOUT,
    POLICY,
    SETTINGS,
    WEEK,
    YEAR,
    Variable,
)

__all__ = [
    "ALL_REPLICAS", "AMQP_BROKER_SCHEMES", "CLUSTER_SCHEMES", "CLUSTER_SHARDS", "DAY",
    "LEASE_MARGIN", "MAX_BYTES", "MAX_CONNECT_TIMEOUT", "MAX_READ_TIMEOUT",
    "POLICY_VARIABLES", "REDIS_BROKER_SCHEMES", "SUPPORTED_BROKER_SCHEMES", "WEEK", "YEAR",
    "ConfigError", "Settings", "broker_is_amqp", "broker_scheme", "configure", "load_settings",
    "setting_names", "settings",
]

#: Seconds an in-flight lease outlives the longest its attempt can take.
LEASE_MARGIN = 10.0
#: ``redis_wait_replicas`` for "every replica the Sentinels see up".
ALL_REPLICAS = -1
#: The Redis URL used when neither ``HOOKLINE_REDIS_URL`` nor ``REDIS_URL`` is set.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

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

#: Environment variable -> RetryPolicy field.
POLICY_VARIABLES = {variable.name: variable.field for variable in POLICY}


def broker_scheme(url: str) -> str:
    """The scheme of a broker URL, lower-cased ("" when it has none)."""
    scheme, separator, _ = url.partition("://")
    return scheme.strip().lower() if separator else ""


def broker_is_amqp(url: str) -> bool:
    """Whether the broker URL names RabbitMQ (AMQP) rather than a Redis."""
    return broker_scheme(url) in AMQP_BROKER_SCHEMES


@dataclass(frozen=True)
class Settings:
    """Validated settings. Times are seconds, sizes bytes. Each field is filled from the
    environment variable that ``hookline.core.variables`` declares for it, where its meaning
    is written (and the settings reference shows it); the defaults here are the same."""

    redis_url: str = DEFAULT_REDIS_URL
    broker_url: str = DEFAULT_REDIS_URL
    visibility_timeout: float = 300.0
    heartbeat_interval: float = 2.0
    reconcile_interval: float = 30.0
    malloc_trim_interval: float = 60.0
    liveness_window: float = 6.0
    runnable_attempts: int = 64
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    retry_after_cap: float = 3600.0
    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    max_payload_bytes: int = 256 * 1024
    max_response_bytes: int = 64 * 1024
    replay_horizon: float = 7 * DAY
    max_unsettled_starts: int = 3
    dlq_spool_path: str = "hookline-dlq-spool.jsonl"
    dlq_retention: float = 30 * DAY
    breaker_threshold: int = 5
    breaker_cooldown: float = 30.0
    breaker_max_cooldown: float = 600.0
    allowed_networks: tuple[Network, ...] = ()
    https_only: bool = False
    secret_overlap: float = DAY
    encryption_keys: tuple[bytes, ...] = field(default=(), repr=False)
    schedule_max: int = 1_000_000
    schedule_max_per_endpoint: int = 100_000
    retry_queue_limit: int = 1000
    releaser: str = "worker"
    releaser_max_sleep: float = 1.0
    events_flush_interval: float = 0.1
    task_sent_events: bool = False
    metrics_port: int = 9808
    metrics_address: str = "127.0.0.1"
    metrics_max_endpoints: int = 200
    log_format: str = "text"
    #: None: the attempt history lives as long as the event's delivery record
    #: (:attr:`done_ttl`), in that record (``hookline.store.delivery``).
    history_retention: float | None = None
    history_attempts: int = 50
    history_body_bytes: int = 256
    health_interval: float = 10.0
    #: The event log (``hookline.store.event_log``): seconds an event is kept after its latest
    #: change, and most events kept per endpoint (the latest).
    event_log_retention: float = 3 * 86400.0
    event_log_per_endpoint: int = 10_000
    #: 1 on a single Redis, 16 on a Redis Cluster (``hookline.store.keys``).
    state_shards: int = 1
    operational_endpoint: str | None = None
    outbox: bool = False
    outbox_url: str = field(default="", repr=False)
    outbox_database: str = "default"
    outbox_batch: int = 500
    outbox_poll: float = 0.05
    outbox_hold: float = 60.0
    worker_imports: tuple[str, ...] = ()
    #: "" when neither URL is a ``sentinel://`` URL (``hookline/core/sentinel.py``).
    sentinel_master: str = ""
    sentinel_password: str = field(default="", repr=False)
    #: :data:`ALL_REPLICAS` by default with a Sentinel URL (hookline/store/replication.py).
    redis_wait_replicas: int = 0
    redis_wait_timeout: float = 1.0
    #: Longest one Redis call waits to connect and to be answered (hookline/store/connection.py).
    redis_timeout: float = 5.0

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


def _read(variables: tuple[Variable, ...], env: Mapping[str, str]) -> dict[str, Any]:
    """Each declared variable read by its own reader into the field it names."""
    return {variable.field: variable.reader.read(env, variable.name)  # type: ignore[union-attr]
            for variable in variables}


def _retry_policy(env: Mapping[str, str]) -> RetryPolicy:
    """The policy's variables read one by one, then checked together (``initial <= max``);
    a refusal names the variable of the field it is about."""
    try:
        return RetryPolicy(**_read(POLICY, env))
    except PolicyError as exc:
        named = [v for v, n in POLICY_VARIABLES.items() if str(exc).startswith(n)]
        prefix = named[0] if named else "HOOKLINE_* retry settings"
        raise ConfigError(f"{prefix}: {exc}") from None


def _redis_url(env: Mapping[str, str]) -> tuple[str, str]:
    """Hookline's Redis and the variable it came from. ``HOOKLINE_REDIS_URL`` first: in a host
    project ``REDIS_URL`` may name the host's own Redis (a cache that evicts keys, say), which
    Hookline's state must not share."""
    variable = "HOOKLINE_REDIS_URL" if env.get("HOOKLINE_REDIS_URL") else "REDIS_URL"
    redis_url = env.get(variable) or DEFAULT_REDIS_URL
    if not redis_url.startswith(("redis://", "rediss://", "unix://", sentinel.SCHEME,
                                 *CLUSTER_SCHEMES)):
        raise ConfigError(
            f"{variable}={redact.url(redis_url)!r} must start with redis://, rediss://, "
            "unix://, sentinel:// (Redis Sentinel), or redis+cluster:// / rediss+cluster:// "
            "(Redis Cluster)")
    return variable, _readable(variable, redis_url)


def _readable(variable: str, url: str) -> str:
    """``url`` once its host and port can be read (redis-py's reading: ``urlsplit``); a
    ``sentinel://`` URL is ``sentinel.parse``'s. The refusal shows the URL redacted (its
    scheme and host, never its password) and says what to fix."""
    if sentinel.is_sentinel(url):
        return url
    try:
        urlsplit(url).port  # noqa: B018 (read for its ValueError)
    except ValueError:
        raise ConfigError(
            f"{variable}={redact.url(url)!r} is not a valid URL: its host and port cannot be "
            "read (the port is a number, an IPv6 address goes in [brackets], and a password "
            "holding '/', '?', '#' or '@' is percent-encoded)") from None
    return url


def _broker_url(env: Mapping[str, str], redis_url: str) -> str:
    """``HOOKLINE_BROKER_URL`` (default: Hookline's Redis, whose URL is checked as such),
    refused unless its scheme is one of :data:`SUPPORTED_BROKER_SCHEMES` (the password never
    appears in the message)."""
    url = raw(env, "HOOKLINE_BROKER_URL")
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
    return _readable("HOOKLINE_BROKER_URL", url) if scheme in REDIS_BROKER_SCHEMES else url


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
    master = raw(env, "HOOKLINE_SENTINEL_MASTER")
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
    }


def _wait_replicas(env: Mapping[str, str], *, sentinel_in_use: bool) -> int:
    """HOOKLINE_REDIS_WAIT_REPLICAS: a number, or ``all`` (:data:`ALL_REPLICAS`: every
    replica the Sentinels see up), the default with a Sentinel URL; 0 without one."""
    text = raw(env, "HOOKLINE_REDIS_WAIT_REPLICAS").lower()
    if text == "all" or (not text and sentinel_in_use):
        if not sentinel_in_use:
            raise ConfigError("HOOKLINE_REDIS_WAIT_REPLICAS=all counts the replicas Redis "
                              "Sentinel sees: it needs a sentinel:// REDIS_URL or "
                              "HOOKLINE_BROKER_URL; give a number instead")
        return ALL_REPLICAS
    return Integer(0, maximum=100).read(env, "HOOKLINE_REDIS_WAIT_REPLICAS")


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings; raise :class:`ConfigError` naming the bad variable."""
    env = os.environ if env is None else env
    variable, redis_url = _redis_url(env)
    settings = Settings(
        redis_url=redis_url,
        broker_url=_broker_url(env, redis_url),
        retry_policy=_retry_policy(env),
        **_read(SETTINGS, env),
        **_sentinel_settings(env, variable, redis_url),
    )
    _check_together(settings)
    return _cluster_checked(env, variable, settings)


def _check_together(settings: Settings) -> None:
    """The rules that join two settings, each refusal naming both variables."""
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
    _check_redis_timeout(settings)
    if settings.visibility_timeout <= settings.lease_seconds():
        raise ConfigError(
            f"CELERY_VISIBILITY_TIMEOUT ({settings.visibility_timeout:g}s) must exceed the "
            f"longest attempt ({settings.lease_seconds():g}s: connect + 2 x read timeout + "
            f"{LEASE_MARGIN:g}s), or a message still being sent is handed to a second worker"
        )


def _check_redis_timeout(settings: Settings) -> None:
    """A WAIT for the replicas is one Redis call: it must end before the call's timeout."""
    if settings.redis_wait_replicas and settings.redis_wait_timeout >= settings.redis_timeout:
        raise ConfigError(
            f"HOOKLINE_REDIS_WAIT_TIMEOUT ({settings.redis_wait_timeout:g}s) must be below "
            f"HOOKLINE_REDIS_TIMEOUT ({settings.redis_timeout:g}s): the WAIT for the replicas "
            "is one Redis call, which the timeout would cut short")


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
    waits = raw(env, "HOOKLINE_REDIS_WAIT_REPLICAS")
    if settings.state_is_cluster and waits not in ("", "0"):
        raise ConfigError(
            f"HOOKLINE_REDIS_WAIT_REPLICAS={waits!r}: {variable} names a Redis Cluster, whose "
            "writes Hookline does not wait for (WAIT applies to a Sentinel-managed Redis); "
            "unset it (a sentinel:// broker still waits for all its replicas) or set 0")
    default = CLUSTER_SHARDS if settings.state_is_cluster else 1
    shards = Integer(default, minimum=1, maximum=256).read(env, "HOOKLINE_STATE_SHARDS")
    if shards > 1 and settings.broker_is_state:
        raise ConfigError(
            f"HOOKLINE_STATE_SHARDS={shards} needs HOOKLINE_BROKER_URL apart from {variable}: "
            "on a shared Redis the state stays in one shard (1)")
    return replace(settings, state_shards=shards)


@functools.cache
def setting_names() -> frozenset[str]:
    """Every variable :func:`load_settings` reads: the ones ``hookline.core.variables``
    declares for the settings (a unit test checks the loader asks for exactly these)."""
    return frozenset(variable.name for variable in (*CONNECTION, *POLICY, *SETTINGS))


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
