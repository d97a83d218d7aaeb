"""A web process imports only what enqueueing needs: each scenario of
``tests/support/web_path.py`` runs in a fresh interpreter against this suite's Redis (a
database emptied before and after), and the modules it loaded are looked at. Nothing of
Celery's worker, Hookline's worker, console or CLI, prometheus_client, jsonschema, the
signing and sealing crypto, urllib3, requests, Jinja2 or Werkzeug (``web_path.HEAVY``) may
load on the way: not for ``send_webhook``, not for ``publish``, not at ``django.setup()`` with
Hookline's app; and with the outbox on, ``send_webhook_on_commit`` loads no Celery or kombu
at all. ``bench/imports.py`` times the same scenarios beside a bare Celery app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from hookline.core.messages import DELIVERY_QUEUE
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import emptied, isolated_url
from tests.support.web_path import BROKER, TRACING, heavy, run_scenario

#: The quiet database (3): no worker of the session consumes there.
URL = isolated_url(3)
ENV = {"REDIS_URL": URL, "BARE_BROKER_URL": URL, "WEB_PATH_ENDPOINT": "shop",
       "WEB_PATH_APP": "shopapp"}
#: hookline.contrib.django may add this many modules to django.setup().
DJANGO_APP_MODULES = 30
#: The first send_webhook may load this many times the modules of a bare Celery .delay().
SEND_RATIO = 1.1


@pytest.fixture
def web_redis() -> Iterator[redis.Redis]:
    """The scenarios' Redis: endpoint ``shop``, application ``shopapp`` with endpoint
    ``shopsub``; emptied afterwards."""
    client = emptied(URL)
    EndpointRegistry(client).add("shop", "http://127.0.0.1:9/shop")
    AppRegistry(client).add("shopapp")
    EndpointRegistry(client).add("shopsub", "http://127.0.0.1:9/shopsub", app="shopapp")
    yield client
    emptied(URL).close()
    client.close()


def test_the_first_send_webhook_loads_nothing_heavy(web_redis) -> None:
    bare = run_scenario("celery_delay", ENV)
    sent = run_scenario("send_webhook", ENV)
    assert heavy(sent["loaded"]) == []
    assert heavy(sent["loaded"], TRACING) == []  # no tracer provider: no tracing loaded
    assert web_redis.llen(DELIVERY_QUEUE) == 1  # it was sent
    # A bare Celery app's .delay() loads celery, kombu and redis-py too: Hookline adds little.
    assert len(sent["loaded"]) <= SEND_RATIO * len(bare["loaded"]), (
        len(sent["loaded"]), len(bare["loaded"]))


def test_the_check_sees_a_heavy_module_and_its_submodules() -> None:
    # redis-py imports the cryptography package itself (to learn whether it is installed).
    assert heavy(["celery", "celery.worker.state", "jsonschema", "cryptography",
                  "cryptography.hazmat.primitives", "hookline.console.wsgi"]) == [
        "celery.worker.state", "cryptography.hazmat.primitives", "hookline.console.wsgi",
        "jsonschema"]
    assert heavy(["celery.app", "kombu", "redis"], BROKER) == ["celery.app", "kombu"]


def test_the_first_publish_loads_nothing_heavy(web_redis) -> None:
    published = run_scenario("publish", ENV)
    assert heavy(published["loaded"]) == []
    assert heavy(published["loaded"], TRACING) == []
    assert web_redis.llen(DELIVERY_QUEUE) == 1  # the fan-out task


def test_hookline_s_django_app_adds_little_to_django_setup() -> None:
    without = run_scenario("django_setup", {})
    with_app = run_scenario("django_setup", {"WEB_PATH_HOOKLINE_APP": "1"})
    assert "hookline.contrib.django" in with_app["loaded"]
    assert heavy(with_app["loaded"]) == []
    assert heavy(with_app["loaded"], BROKER) == []
    added = len(with_app["loaded"]) - len(without["loaded"])
    assert added <= DJANGO_APP_MODULES, sorted(set(with_app["loaded"]) - set(without["loaded"]))


def test_with_the_outbox_on_send_webhook_on_commit_loads_no_celery(web_redis, tmp_path) -> None:
    wrote = run_scenario("outbox_on_commit", {**ENV, "HOOKLINE_OUTBOX": "on",
                                              "WEB_PATH_DB": str(tmp_path / "web.sqlite3")})
    assert heavy(wrote["loaded"]) == []
    assert heavy(wrote["present"], BROKER) == []  # not in the process at all
    assert web_redis.llen(DELIVERY_QUEUE) == 0  # a row, not a message
