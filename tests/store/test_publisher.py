"""Publishing by task name: what a web process sends, without the worker's task module, on a
Celery instance that never becomes the process's current app."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import hookline
from hookline.core.messages import DELIVERY_QUEUE, TASK_NAME
from tests.conftest import ROOT


def queued(client: Any) -> list[dict[str, Any]]:
    """The messages on the first-delivery queue, oldest first, with their body decoded."""
    messages = []
    for text in reversed(client.lrange(DELIVERY_QUEUE, 0, -1)):
        message = json.loads(text)
        message["args"], message["kwargs"], _ = json.loads(base64.b64decode(message["body"]))
        messages.append(message)
    return messages


def test_deliver_delay_publishes_the_task_by_name_with_its_headers(quiet_redis):
    result = hookline.deliver.delay("shop", "order.created", {"card": "4111 1111"},
                                    event_id="ev-1")
    [message] = queued(quiet_redis)
    headers = message["headers"]
    assert headers["task"] == TASK_NAME == hookline.deliver.name
    assert headers["id"] == result.id
    assert (headers["hookline_endpoint"], headers["hookline_event"]) == ("shop", "ev-1")
    assert message["args"] == ["shop", "order.created", {"card": "4111 1111"}]
    assert message["kwargs"]["event_id"] == "ev-1"
    assert message["kwargs"]["enqueued_at"] > 0
    # Flower and the worker's log show the payload's size only.
    assert "4111" not in headers["argsrepr"]
    assert "<payload: 20 bytes>" in headers["argsrepr"]


def test_the_task_id_is_the_event_id_when_none_is_given(quiet_redis):
    result = hookline.deliver.apply_async(("shop", "order.created", {}))
    [message] = queued(quiet_redis)
    assert message["headers"]["hookline_event"] == result.id == message["headers"]["id"]


@pytest.mark.parametrize("option", ["countdown", "eta"])
def test_a_countdown_is_refused_at_the_call(quiet_redis, option):
    with pytest.raises(TypeError, match=f"{option} is not supported"):
        hookline.deliver.apply_async(("shop", "order.created", {}), **{option: 5})
    assert queued(quiet_redis) == []


def run_python(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter from the project root; its stdout."""
    import os

    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_publishing_leaves_the_hosts_current_app_and_loads_no_worker_module(quiet_redis):
    url = quiet_redis.connection_pool.connection_kwargs
    broker = f"redis://127.0.0.1:{url['port']}/{url['db']}"
    out = run_python("""
        import sys
        from celery import Celery, current_app, shared_task

        host = Celery("host", broker="memory://")
        host.conf.task_always_eager = True
        host.set_current()

        @shared_task(name="proj.tasks.send_invoice")
        def send_invoice():
            return "sent"

        import hookline
        hookline.deliver.delay("shop", "order.created", {"n": 1}, event_id="ev-host")
        print(current_app.main, send_invoice.app.main, send_invoice.delay().get(),
              "hookline.deliver" in host.tasks,
              any(name.startswith("hookline.worker") for name in sys.modules))
    """, REDIS_URL=broker, HOOKLINE_BROKER_URL=broker)
    # The host's shared task still resolves to (and runs on) the host's app; Hookline's task
    # is no shared task, so the host never sees it; the web process loads no worker module.
    assert out == "host host sent False False"
    [message] = queued(quiet_redis)
    assert message["headers"]["hookline_event"] == "ev-host"


def test_the_workers_app_never_becomes_current_nor_shares_its_task():
    out = run_python("""
        from celery import Celery, current_app, shared_task

        host = Celery("host", broker="memory://")
        host.set_current()

        @shared_task(name="proj.tasks.send_invoice")
        def send_invoice():
            return "sent"

        from hookline.worker import app
        app.loader.import_default_modules()
        print(current_app.main, "hookline.deliver" in app.tasks,
              "hookline.deliver" in host.tasks, send_invoice.app.main)
    """)
    assert out == "host True False host"


def test_a_hosts_celery_broker_url_does_not_redirect_hookline(quiet_redis):
    """Celery lets CELERY_BROKER_URL override every app's broker; a host sets it for its own.
    Hookline's deliveries still go to Hookline's broker, and the host's app keeps its own."""
    url = quiet_redis.connection_pool.connection_kwargs
    broker = f"redis://127.0.0.1:{url['port']}/{url['db']}"
    out = run_python("""
        from celery import Celery

        host = Celery("host")
        import hookline
        from hookline.delivery.publisher import publishing_app
        hookline.deliver.delay("shop", "order.created", {}, event_id="ev-env")
        print(host.connection_for_write().as_uri(),
              publishing_app().connection_for_write().as_uri())
    """, REDIS_URL=broker, CELERY_BROKER_URL="memory://localhost/")
    host_broker, hookline_broker = out.split()
    assert host_broker.startswith("memory://")
    # (kombu 5.7 names a transport given by path in the URI it prints, 5.6 its scheme.)
    assert hookline_broker.endswith(f"127.0.0.1:{url['port']}/{url['db']}")
    [message] = queued(quiet_redis)
    assert message["headers"]["hookline_event"] == "ev-env"


def test_no_payload_content_in_any_task_event_field(quiet_redis):
    """By keyword, with extra arguments, or from a retry built for the schedule: argsrepr and
    kwargsrepr (task-sent here, task-received in the worker) show the payload's size only."""
    from hookline.delivery.publisher import publishing_app
    from hookline.transport.envelope import build_message

    hookline.deliver.delay("shop", "order.created", payload={"card": "4111 1111"})
    hookline.deliver.delay("shop", "order.created", {"card": "4111 1111"}, "ev-9", None)
    for message in queued(quiet_redis):
        shown = message["headers"]["argsrepr"] + message["headers"]["kwargsrepr"]
        assert "4111" not in shown and "<payload: 20 bytes>" in shown
    retry = json.loads(build_message(publishing_app(), task_name=TASK_NAME, task_id="t-1",
                                     args=["shop", "order.created", {"card": "4111 1111"}],
                                     kwargs={"event_id": "e-1", "attempts": 1}, retries=1,
                                     queue="hookline.retry"))
    assert "4111" not in retry["headers"]["argsrepr"] + retry["headers"]["kwargsrepr"]
    assert "'attempts': 1" in retry["headers"]["kwargsrepr"]


def test_argsrepr_and_kwargsrepr_are_refused():
    for option in ("argsrepr", "kwargsrepr"):
        with pytest.raises(TypeError, match=option):
            hookline.deliver.apply_async(("shop", "order.created", {}), **{option: "x"})


def test_flower_sees_the_broker_as_redis():
    """Flower picks its Broker tab's client by the scheme of the URL the app's connection
    reports; Hookline's transport is still the one used."""
    from hookline.delivery.publisher import publishing_app
    from hookline.transport.redis import Transport
    from hookline.worker.celery import worker_app

    for celery in (worker_app, publishing_app()):
        with celery.connection_for_write() as connection:
            assert connection.as_uri().startswith("redis://")
            assert connection.info()["transport"] == "redis"
            assert isinstance(connection.transport, Transport)


def test_the_publishing_app_finds_no_result_backend_without_reading_entry_points(monkeypatch):
    """Hookline keeps no results: the publishing app's backend is Celery's DisabledBackend,
    found without the entry-point scan Celery's lookup makes (a web process's first send);
    a backend that is configured is still looked up by Celery."""
    from celery.app import backends
    from celery.backends.base import DisabledBackend

    from hookline.transport.celery_app import PublishingApp

    def scanned(*args: Any) -> dict[str, str]:
        raise AssertionError("entry points read")

    monkeypatch.setattr(backends, "load_extension_class_names", scanned)
    fresh = PublishingApp("t", set_as_current=False, fixups=[])
    fresh.config_from_object("hookline.transport.celery_settings")
    assert fresh.conf.result_backend is None
    assert isinstance(fresh.backend, DisabledBackend)
    configured = PublishingApp("t", set_as_current=False, fixups=[], backend="cache+memory://")
    with pytest.raises(AssertionError, match="entry points read"):
        configured.backend  # noqa: B018 - the lookup is the property's


def test_a_publisher_reads_the_versions_the_installed_distributions_declare():
    """The publisher's version check asks the modules it imported (no METADATA parsed); they
    say what the installed distributions say."""
    from importlib import metadata

    from hookline.transport import compat

    assert compat.imported_versions() == {name: metadata.version(name)
                                          for name in compat.SUPPORTED}
