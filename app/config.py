"""Hookline's settings: read once from the environment, validated, with the variable named in
every error. ``celeryconfig.py`` reads the Celery side from here too, so both agree."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.policy import PolicyError, RetryPolicy


class ConfigError(ValueError):
    """An environment variable holds a value Hookline cannot use; the message names it."""


@dataclass(frozen=True)
class Settings:
    """Validated settings. Times are seconds, sizes bytes."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    broker_url: str = "redis://127.0.0.1:6379/0"
    #: Seconds an unacknowledged message stays invisible before the broker hands it to another
    #: worker. Every retry countdown must end before it, or the retry is delivered twice.
    visibility_timeout: float = 7200.0
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
    #: Consecutive retryable failures that open an endpoint's circuit breaker.
    breaker_threshold: int = 5
    #: Seconds an opened breaker waits before one probe may go through; doubled after each
    #: failed probe up to ``breaker_max_cooldown``.
    breaker_cooldown: float = 30.0
    breaker_max_cooldown: float = 600.0
    metrics_port: int = 9808
    log_format: str = "text"

    @property
    def lease_seconds(self) -> float:
        """How long an in-flight lease lives: the longest an attempt can take, plus a margin."""
        return self.connect_timeout + 4 * self.read_timeout + 30.0

    @property
    def done_ttl(self) -> int:
        return math.ceil(self.retry_policy.max_age + self.replay_horizon)


def _number(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name}={raw!r} must be a finite number >= {minimum}")
    return value


def _integer(env: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be >= {minimum}")
    return value


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


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings; raise :class:`ConfigError` naming the bad variable."""
    env = os.environ if env is None else env
    redis_url = env.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"REDIS_URL={redis_url!r} must start with redis://, rediss:// or unix://")
    log_format = env.get("HOOKLINE_LOG_FORMAT", "text").lower()
    if log_format not in ("text", "json"):
        raise ConfigError(f"HOOKLINE_LOG_FORMAT={log_format!r} must be 'text' or 'json'")
    settings = Settings(
        redis_url=redis_url,
        broker_url=env.get("CELERY_BROKER_URL") or redis_url,
        visibility_timeout=_number(env, "CELERY_VISIBILITY_TIMEOUT", 7200.0, minimum=60.0),
        retry_policy=_retry_policy(env),
        retry_after_cap=_number(env, "HOOKLINE_RETRY_AFTER_CAP", 3600.0),
        connect_timeout=_number(env, "HOOKLINE_CONNECT_TIMEOUT", 5.0, minimum=0.1),
        read_timeout=_number(env, "HOOKLINE_READ_TIMEOUT", 15.0, minimum=0.1),
        max_payload_bytes=_integer(env, "HOOKLINE_MAX_PAYLOAD_BYTES", 256 * 1024, minimum=1),
        max_response_bytes=_integer(env, "HOOKLINE_MAX_RESPONSE_BYTES", 64 * 1024, minimum=0),
        replay_horizon=_number(env, "HOOKLINE_REPLAY_HORIZON", 7 * 86400.0),
        max_unsettled_starts=_integer(env, "HOOKLINE_MAX_UNSETTLED_STARTS", 3, minimum=1),
        dlq_spool_path=env.get("HOOKLINE_DLQ_SPOOL", "hookline-dlq-spool.jsonl"),
        breaker_threshold=_integer(env, "HOOKLINE_BREAKER_THRESHOLD", 5, minimum=1),
        breaker_cooldown=_number(env, "HOOKLINE_BREAKER_COOLDOWN", 30.0, minimum=0.1),
        breaker_max_cooldown=_number(env, "HOOKLINE_BREAKER_MAX_COOLDOWN", 600.0, minimum=0.1),
        metrics_port=_integer(env, "HOOKLINE_METRICS_PORT", 9808, minimum=0),
        log_format=log_format,
    )
    check_policy_fits(settings.retry_policy, settings, source="HOOKLINE_MAX_BACKOFF")
    if settings.breaker_max_cooldown < settings.breaker_cooldown:
        raise ConfigError(
            f"HOOKLINE_BREAKER_MAX_COOLDOWN ({settings.breaker_max_cooldown:g}s) must be at "
            f"least HOOKLINE_BREAKER_COOLDOWN ({settings.breaker_cooldown:g}s)"
        )
    if settings.retry_after_cap >= settings.visibility_timeout:
        raise ConfigError(
            f"HOOKLINE_RETRY_AFTER_CAP ({settings.retry_after_cap:g}s) must be shorter than "
            f"CELERY_VISIBILITY_TIMEOUT ({settings.visibility_timeout:g}s)"
        )
    return settings


def check_policy_fits(policy: RetryPolicy, settings: Settings, *, source: str) -> None:
    """A countdown at least as long as the broker's visibility timeout would be delivered twice
    by Celery's Redis transport, so no policy may allow one."""
    if policy.max_backoff >= settings.visibility_timeout:
        raise ConfigError(
            f"{source}: max_backoff ({policy.max_backoff:g}s) must be shorter than "
            f"CELERY_VISIBILITY_TIMEOUT ({settings.visibility_timeout:g}s), or the broker "
            f"delivers the retry twice"
        )


@functools.cache
def settings() -> Settings:
    """The process's settings, loaded on first use."""
    return load_settings()
