"""Settings from the environment: each bad value is refused with its variable named."""

import pytest

from hookline.core.config import ConfigError, load_settings


def test_defaults():
    settings = load_settings({})
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.broker_url == settings.redis_url
    assert settings.retry_policy.max_attempts == 35


def test_broker_defaults_to_redis_url_and_can_differ():
    assert load_settings({"REDIS_URL": "redis://r:1/2"}).broker_url == "redis://r:1/2"
    assert load_settings(
        {"REDIS_URL": "redis://r:1/2", "HOOKLINE_BROKER_URL": "redis://b:1/0"}
    ).broker_url == "redis://b:1/0"


def test_policy_variables_are_read():
    settings = load_settings({"HOOKLINE_INITIAL_BACKOFF": "0.5", "HOOKLINE_JITTER": "0",
                              "HOOKLINE_MAX_ATTEMPTS": "3", "HOOKLINE_MAX_AGE": "90.5"})
    policy = settings.retry_policy
    assert (policy.initial_backoff, policy.jitter, policy.max_attempts, policy.max_age) == (
        0.5, 0.0, 3, 90.5)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HOOKLINE_JITTER": "2"}, "HOOKLINE_JITTER"),
        ({"HOOKLINE_JITTER": "lots"}, "HOOKLINE_JITTER"),
        ({"HOOKLINE_BACKOFF_MULTIPLIER": "0.5"}, "HOOKLINE_BACKOFF_MULTIPLIER"),
        ({"HOOKLINE_MAX_ATTEMPTS": "0"}, "HOOKLINE_MAX_ATTEMPTS"),
        ({"HOOKLINE_MAX_ATTEMPTS": "three"}, "HOOKLINE_MAX_ATTEMPTS"),
        ({"HOOKLINE_INITIAL_BACKOFF": "100", "HOOKLINE_MAX_BACKOFF": "10"},
         "HOOKLINE_INITIAL_BACKOFF"),
        ({"HOOKLINE_MAX_BACKOFF": str(8 * 86400)}, "HOOKLINE_MAX_BACKOFF"),
        ({"CELERY_VISIBILITY_TIMEOUT": "40"}, "CELERY_VISIBILITY_TIMEOUT"),
        ({"HOOKLINE_READ_TIMEOUT": "500"}, "HOOKLINE_READ_TIMEOUT"),
        ({"HOOKLINE_RELEASER": "cron"}, "HOOKLINE_RELEASER"),
        ({"HOOKLINE_BREAKER_COOLDOWN": "60", "HOOKLINE_BREAKER_MAX_COOLDOWN": "30"},
         "HOOKLINE_BREAKER_MAX_COOLDOWN"),
        ({"HOOKLINE_MAX_AGE": "inf"}, "HOOKLINE_MAX_AGE"),
        ({"REDIS_URL": "http://localhost"}, "REDIS_URL"),
        ({"HOOKLINE_READ_TIMEOUT": "0"}, "HOOKLINE_READ_TIMEOUT"),
        ({"HOOKLINE_LOG_FORMAT": "xml"}, "HOOKLINE_LOG_FORMAT"),
        ({"HOOKLINE_METRICS_ADDRESS": "localhost"}, "HOOKLINE_METRICS_ADDRESS"),
        ({"HOOKLINE_METRICS_ADDRESS": "0.0.0.0:9808"}, "HOOKLINE_METRICS_ADDRESS"),
        ({"HOOKLINE_METRICS_ADDRESS": "999.1.1.1"}, "HOOKLINE_METRICS_ADDRESS"),
        ({"HOOKLINE_METRICS_MAX_ENDPOINTS": "-1"}, "HOOKLINE_METRICS_MAX_ENDPOINTS"),
        ({"HOOKLINE_METRICS_MAX_ENDPOINTS": "many"}, "HOOKLINE_METRICS_MAX_ENDPOINTS"),
        ({"HOOKLINE_EVENTS_FLUSH_INTERVAL": "-0.1"}, "HOOKLINE_EVENTS_FLUSH_INTERVAL"),
        ({"HOOKLINE_EVENTS_FLUSH_INTERVAL": "60"}, "HOOKLINE_EVENTS_FLUSH_INTERVAL"),
        ({"HOOKLINE_EVENTS_FLUSH_INTERVAL": "soon"}, "HOOKLINE_EVENTS_FLUSH_INTERVAL"),
    ],
)
def test_bad_setting_is_refused_with_its_name(env, named):
    with pytest.raises(ConfigError, match=named):
        load_settings(env)


def test_backoff_is_not_bounded_by_the_visibility_timeout():
    """Retries wait in the retry schedule, not in the broker: a day-long backoff is fine."""
    settings = load_settings({"HOOKLINE_MAX_BACKOFF": "86400", "HOOKLINE_MAX_AGE": "604800"})
    assert settings.retry_policy.max_backoff == 86400
    assert settings.visibility_timeout == 300


def test_hookline_redis_url_comes_before_a_hosts_redis_url():
    env = {"REDIS_URL": "redis://host-cache:6379/0", "HOOKLINE_REDIS_URL": "redis://hl:6379/2"}
    settings = load_settings(env)
    assert settings.redis_url == settings.broker_url == "redis://hl:6379/2"
    assert load_settings({"REDIS_URL": "redis://r:1/2"}).redis_url == "redis://r:1/2"


def test_a_bad_redis_url_names_the_variable_it_came_from():
    with pytest.raises(ConfigError, match="HOOKLINE_REDIS_URL='http://x'"):
        load_settings({"HOOKLINE_REDIS_URL": "http://x", "REDIS_URL": "redis://ok:1/0"})
    with pytest.raises(ConfigError, match="REDIS_URL='http://x'"):
        load_settings({"REDIS_URL": "http://x"})


def test_task_events_are_gathered_a_tenth_of_a_second_unless_told_otherwise():
    assert load_settings({}).events_flush_interval == 0.1
    assert load_settings({"HOOKLINE_EVENTS_FLUSH_INTERVAL": "0"}).events_flush_interval == 0


def test_publishers_send_task_sent_only_when_asked():
    from hookline.transport.celery_settings import broker_settings

    assert broker_settings(load_settings({}))["task_send_sent_event"] is False
    asked = load_settings({"HOOKLINE_TASK_SENT_EVENTS": "true"})
    assert asked.task_sent_events is True
    assert broker_settings(asked)["task_send_sent_event"] is True
    rabbit = load_settings({"HOOKLINE_TASK_SENT_EVENTS": "1",
                            "HOOKLINE_BROKER_URL": "pyamqp://guest@127.0.0.1//"})
    assert broker_settings(rabbit)["task_send_sent_event"] is True


@pytest.mark.parametrize(("variable", "url", "shown"), [
    ("REDIS_URL", "notaurl", "'notaurl' must start with redis://"),
    ("REDIS_URL", ":s3cret@redis.internal:6379/0", "'***@redis.internal:6379/***' must start"),
    ("REDIS_URL", "redis://u:s3cret@redis.internal:notaport/0",
     "'redis://***@redis.internal:***/***' is not a valid URL"),
    ("HOOKLINE_REDIS_URL", "redis://u:s3cret@[::1/0", "'redis://***@[::1/***' is not a valid"),
    ("REDIS_URL", "redis://:s3/cret@redis.internal/0", "'redis://***@redis.internal/***' is"),
    ("REDIS_URL", "redis://:s3#cret@redis.internal:6379",
     "'redis://***@redis.internal:6379' is not a valid URL"),
    ("HOOKLINE_BROKER_URL", "redis://:s3cret@broker.internal:x/0",
     "'redis://***@broker.internal:***/***' is not a valid URL"),
])
def test_a_malformed_redis_url_is_refused_by_scheme_and_host_without_its_password(
        variable, url, shown):
    env = {"REDIS_URL": "redis://r:1/0", variable: url}
    with pytest.raises(ConfigError) as refused:
        load_settings(env)
    message = str(refused.value)
    assert message.startswith(f"{variable}=") and shown in message, message
    assert "s3" not in message and "cret" not in message
