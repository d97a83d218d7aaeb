"""The broker URL check: only brokers Hookline supports start, refused at settings validation
with the setting named, the supported schemes listed and no password shown."""

from __future__ import annotations

import pytest

from hookline.core.config import (
    SUPPORTED_BROKER_SCHEMES,
    ConfigError,
    broker_is_amqp,
    load_settings,
)
from hookline.transport import celery_settings

REDIS = "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize("url", [
    "sqs://AKIAEXAMPLE:s3cr3t-pass@sqs.eu-west-1.amazonaws.com/",
    "memory://",
    "filesystem://",
    "kafka://user:s3cr3t-pass@broker:9092",
    "not a url",
])
def test_an_unsupported_broker_url_is_refused_naming_the_setting_and_the_supported_schemes(
        url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"REDIS_URL": REDIS, "HOOKLINE_BROKER_URL": url})
    message = str(refused.value)
    assert message.startswith("HOOKLINE_BROKER_URL=")
    assert "does not support this broker" in message
    for scheme in SUPPORTED_BROKER_SCHEMES:
        assert f"{scheme}://" in message
    assert "s3cr3t" not in message


@pytest.mark.parametrize("url", [
    "redis://:pw@127.0.0.1:6379/1", "rediss://127.0.0.1:6380/0", "unix:///tmp/redis.sock",
    "sentinel://127.0.0.1:26379/0", "amqp://guest:guest@127.0.0.1:5672//",
    "pyamqp://guest:guest@127.0.0.1:5672/hookline", "amqps://user:pw@rabbit.example:5671/v",
    "PYAMQP://guest:guest@127.0.0.1/",
])
def test_every_supported_broker_url_is_accepted(url: str) -> None:
    # The master's name is needed by the sentinel:// URL (and harmless to the others).
    env = {"REDIS_URL": REDIS, "HOOKLINE_BROKER_URL": url, "HOOKLINE_SENTINEL_MASTER": "hl"}
    assert load_settings(env).broker_url == url


def test_rabbitmq_gets_quorum_queues_publisher_confirms_and_no_heartbeats() -> None:
    config = load_settings({"REDIS_URL": REDIS,
                            "HOOKLINE_BROKER_URL": "pyamqp://guest:guest@127.0.0.1:5672/v"})
    assert broker_is_amqp(config.broker_url)
    values = celery_settings.broker_settings(config)
    assert values["broker_transport_options"] == {"confirm_publish": True}
    assert values["broker_heartbeat"] == 0
    assert values["broker_transport"] is None
    assert values["task_default_queue_type"] == "quorum"
    assert {queue.name: queue.queue_arguments for queue in values["task_queues"]} == {
        "hookline": {"x-queue-type": "quorum"}, "hookline.retry": {"x-queue-type": "quorum"}}
    worker = celery_settings.broker_settings(config, confirm_publish=False)
    assert worker["broker_transport_options"] == {"confirm_publish": False}


def test_a_redis_broker_keeps_classic_queues_and_hooklines_transport() -> None:
    values = celery_settings.broker_settings(load_settings({"REDIS_URL": REDIS}))
    assert "broker_heartbeat" not in values
    assert values["task_default_queue_type"] == "classic"
    assert all(queue.queue_arguments is None for queue in values["task_queues"])
    assert "visibility_timeout" in values["broker_transport_options"]


def test_the_publishing_app_waits_for_rabbitmqs_confirms() -> None:
    """send_webhook and the releaser publish through this app: with confirms, a publish
    returns once RabbitMQ has the message."""
    from hookline.core import config
    from hookline.delivery.publisher import publishing_app

    config.configure({"HOOKLINE_BROKER_URL": "pyamqp://guest:guest@127.0.0.1:5672/v"})
    try:
        conf = publishing_app().conf
        assert conf.broker_transport_options["confirm_publish"] is True
        assert conf.broker_heartbeat == 0
        assert conf.task_queues[0].queue_arguments == {"x-queue-type": "quorum"}
    finally:
        config.configure()
