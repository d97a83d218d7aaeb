"""HOOKLINE_REDIS_TIMEOUT: read and checked like every setting, applied to every Redis client
Hookline makes and to kombu's, and worded in the one-line ``hookline.RedisUnavailable``
(tests/faults/test_stalled_redis.py pauses a real Redis against it)."""

from __future__ import annotations

import pytest
import redis
from kombu.exceptions import OperationalError

import hookline
from hookline.core.config import ConfigError, Settings, load_settings
from hookline.core.errors import HooklineError, RedisUnavailable
from hookline.store.connection import CONNECTION_RETRIES, bounded_options
from hookline.transport.bounded import (
    give_up_on_timeout,
    publish_retry_policy,
    shown_server,
    unavailable,
)
from hookline.transport.celery_settings import broker_settings


def test_the_default_is_five_seconds_and_a_value_in_range_is_read() -> None:
    assert load_settings({}).redis_timeout == 5.0
    assert load_settings({"HOOKLINE_REDIS_TIMEOUT": "2.5"}).redis_timeout == 2.5
    assert load_settings({"HOOKLINE_REDIS_TIMEOUT": " "}).redis_timeout == 5.0


@pytest.mark.parametrize("value", ["0", "0.5", "-1", "61", "inf", "nan", "soon", "5s"])
def test_a_value_out_of_range_or_not_a_number_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^HOOKLINE_REDIS_TIMEOUT='{value}'"):
        load_settings({"HOOKLINE_REDIS_TIMEOUT": value})


def test_a_wait_for_replicas_must_end_within_the_timeout() -> None:
    """WAIT is one Redis call: a wait as long as the timeout would always be cut short."""
    env = {"HOOKLINE_REDIS_WAIT_REPLICAS": "1", "HOOKLINE_REDIS_WAIT_TIMEOUT": "5"}
    with pytest.raises(ConfigError, match=r"HOOKLINE_REDIS_WAIT_TIMEOUT \(5s\) must be below "
                                          r"HOOKLINE_REDIS_TIMEOUT \(5s\)"):
        load_settings(env)
    assert load_settings({**env, "HOOKLINE_REDIS_TIMEOUT": "10"}).redis_timeout == 10.0
    # No replicas waited for: the wait timeout is not used, and not checked against it.
    assert load_settings({"HOOKLINE_REDIS_WAIT_TIMEOUT": "30"}).redis_wait_timeout == 30.0


def test_every_client_is_bounded_and_never_tries_a_timeout_again() -> None:
    options = bounded_options(2.0)
    assert options["socket_connect_timeout"] == options["socket_timeout"] == 2.0
    retry = options["retry"]
    assert retry.get_retries() == CONNECTION_RETRIES
    assert redis.ConnectionError in retry._supported_errors
    assert not any(issubclass(error, redis.TimeoutError | TimeoutError)
                   for error in retry._supported_errors)


def test_kombus_clients_and_publishes_are_bounded_too() -> None:
    values = broker_settings(load_settings({"HOOKLINE_REDIS_TIMEOUT": "3"}))
    options = values["broker_transport_options"]
    assert options["socket_timeout"] == options["socket_connect_timeout"] == 3.0
    policy = values["task_publish_retry_policy"]
    assert policy["max_retries"] <= 2 and policy["interval_max"] <= 0.2
    assert policy["errback"] is give_up_on_timeout
    assert publish_retry_policy() == policy


@pytest.mark.parametrize("error", [redis.TimeoutError("Timeout reading from socket"),
                                   TimeoutError("timed out")])
def test_a_publish_is_not_tried_again_after_a_timeout(error: Exception) -> None:
    with pytest.raises(type(error)):
        give_up_on_timeout(error, 0.2)


def test_a_publish_is_tried_again_after_a_refused_connection() -> None:
    give_up_on_timeout(redis.ConnectionError("Error 111 connecting to h:1. Refused."), 0.2)


def broker_timeout() -> OperationalError:
    """A timeout as kombu raises it from a publish: redis-py's, wrapped."""
    try:
        try:
            raise redis.TimeoutError("Timeout reading from socket")
        except redis.TimeoutError as exc:
            raise OperationalError(str(exc)) from exc
    except OperationalError as wrapped:
        return wrapped


def test_a_timeout_names_the_broker_and_the_timeout_without_the_password() -> None:
    config = Settings(redis_url="redis://:s3cret@cache.example:6380/2",
                      broker_url="redis://:s3cret@cache.example:6380/2", redis_timeout=5.0)
    error = unavailable(broker_timeout(), broker=True, config=config)
    assert isinstance(error, HooklineError)
    assert str(error) == ("Hookline's Redis broker redis://:***@cache.example:6380/2 did not "
                          "answer within 5s (HOOKLINE_REDIS_TIMEOUT)")
    assert (error.url, error.timeout, error.reason) == (
        "redis://:***@cache.example:6380/2", 5.0, None)


def test_a_refused_connection_says_so_in_one_line() -> None:
    config = Settings(redis_url="redis://state:6379/0", broker_url="redis://broker:6379/0",
                      redis_timeout=2.0)
    refused = redis.ConnectionError("Error 111 connecting to state:6379.\nConnection refused.")
    message = str(unavailable(refused, broker=False, config=config))
    assert message == ("Hookline's Redis redis://state:6379/0 cannot be reached: Error 111 "
                       "connecting to state:6379. Connection refused "
                       "(HOOKLINE_REDIS_TIMEOUT=2s)")


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("rediss://user:pw@host:6380/1", "rediss://user:***@host:6380/1"),
    ("unix:///run/redis.sock?db=2", "unix:///run/redis.sock?db=2"),
    ("sentinel://:pw@s1:26379,s2:26379/0", "sentinel://***@s1:26379,s2:26379/0"),
])
def test_a_server_is_shown_without_its_password(url: str, shown: str) -> None:
    assert shown_server(url) == shown


def test_the_exception_is_public() -> None:
    assert hookline.RedisUnavailable is RedisUnavailable
    assert "RedisUnavailable" in hookline.__all__
