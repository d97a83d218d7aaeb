"""Bounded waits for the calls a web process makes: a stalled Redis (a paused host, a network
partition) or a refused connection becomes one :class:`~hookline.core.errors.RedisUnavailable`
within ``HOOKLINE_REDIS_TIMEOUT``, instead of a hang.

Three pieces bound them. Every Redis client Hookline makes waits at most the timeout to connect
and for each answer, and tries a call again only after a refused or dropped connection
(``hookline.store.connection.bounded_options``); kombu's Redis transport, which makes its own
clients, gets the same socket timeouts (``celery_settings.broker_settings``). A publish is
retried by kombu (:func:`publish_retry_policy`) only a few times, quickly, and never after a
timeout (:func:`give_up_on_timeout`): one stalled answer is the whole wait. And the public calls
turn what remains (redis-py's errors, kombu's ``OperationalError``) into the one-line exception
(:func:`bounded`), naming the server and the timeout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import redis
from kombu.exceptions import OperationalError

from hookline.core import redact
from hookline.core.config import Settings, settings
from hookline.core.errors import RedisUnavailable
from hookline.core.redact import scrub

__all__ = ["bounded", "give_up_on_timeout", "publish_retry_policy", "shown_server",
           "unavailable"]

P = ParamSpec("P")
R = TypeVar("R")

#: What a stalled Redis raises: redis-py's timeout, or the socket's own (``TimeoutError``).
TIMEOUTS = (redis.TimeoutError, TimeoutError)


def give_up_on_timeout(exc: BaseException, interval: float) -> None:
    """kombu's ``errback`` for a publish: called before each retry, it ends the retries when
    the failure was a timeout, since trying again would wait the whole timeout again (a
    refused connection is tried again, after ``interval`` seconds)."""
    if isinstance(exc, TIMEOUTS):
        raise exc


def publish_retry_policy() -> dict[str, Any]:
    """Celery's ``task_publish_retry_policy`` for Hookline's publishes: a refused or dropped
    connection is tried twice more within half a second (a Redis restarting), a timeout not
    at all; so a publish fails within the timeout, plus that half second at most."""
    return {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2,
            "errback": give_up_on_timeout}


def shown_server(url: str) -> str:
    """A Redis or broker URL fit for an error message: everything but the password."""
    return redact.server(url)


def _cause(exc: BaseException) -> BaseException:
    """The first error in ``exc``'s chain (kombu wraps redis-py's) that says what happened."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TIMEOUTS):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


def unavailable(exc: BaseException, *, broker: bool, config: Settings | None = None
                ) -> RedisUnavailable:
    """``exc`` (a failed call to the broker, or to Hookline's state Redis) as the one-line
    :class:`RedisUnavailable`: the server, its URL without the password, what happened."""
    config = config or settings()
    url = config.broker_url if broker else config.redis_url
    server = ("Hookline's Redis broker" if broker or config.broker_is_state
              else "Hookline's Redis")
    cause = _cause(exc)
    reason = None
    if not isinstance(cause, TIMEOUTS):
        reason = " ".join(scrub(str(cause), url).split()).rstrip(".") or type(cause).__name__
    return RedisUnavailable(server, shown_server(url), config.redis_timeout, reason)


def bounded(call: Callable[P, R]) -> Callable[P, R]:
    """``call`` raising :class:`RedisUnavailable` where Redis or a Redis broker failed to
    answer or to connect (a RabbitMQ broker's errors are left as they are)."""

    @functools.wraps(call)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        except OperationalError as exc:
            if settings().broker_amqp:
                raise
            raise unavailable(exc, broker=True) from None
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise unavailable(exc, broker=False) from None

    return wrapper
