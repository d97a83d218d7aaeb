"""The Django integration and the example project (examples/django_project), end to end:
Django's test client, a real Redis, the session worker and a real HTTP receiver.

Requests run in autocommit mode (no TestCase transaction around them), so ``atomic`` blocks
really commit or roll back and ``transaction.on_commit`` behaves as in production.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from standardwebhooks import Webhook

from examples.receiver import Receiver, Reply, always
from hookline import WebhookInputError
from hookline.core import config
from hookline.core.endpoint import Endpoint
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


@pytest.fixture(scope="module")
def django_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The example project set up once: its settings, a fresh SQLite database, migrated."""
    saved = config._configured
    os.environ["DJANGO_SETTINGS_MODULE"] = "examples.django_project.settings"
    os.environ["ORDERS_DB_PATH"] = str(tmp_path_factory.mktemp("django") / "orders.sqlite3")
    import django
    from django.core.management import call_command
    from django.test import Client

    django.setup()  # the hookline.contrib.django app validates the environment's settings
    call_command("migrate", verbosity=0)
    yield Client()
    config._configured = saved  # later test modules see the environment's settings again


@pytest.fixture
def orders_endpoint(receiver: Receiver) -> Iterator[Endpoint]:
    """An endpoint of its own for each test, set as the project's ORDERS_WEBHOOK_ENDPOINT."""
    from django.test import override_settings

    endpoint_id = f"orders-{uuid.uuid4().hex[:8]}"
    endpoint = EndpointRegistry().add(endpoint_id,
                                      receiver.route(f"/{endpoint_id}", always(Reply(204))))
    with override_settings(ORDERS_WEBHOOK_ENDPOINT=endpoint_id):
        yield endpoint


def post_order(client: Any, **body: Any) -> Any:
    return client.post("/orders", data=json.dumps(body), content_type="application/json")


def delivered(endpoint_id: str, event_id: str, timeout: float = 20.0) -> None:
    gate = Gate()
    wait_until(lambda: gate.is_delivered(endpoint_id, event_id), timeout)


def test_created_order_arrives_as_a_signed_webhook_with_its_id(
        django_client, orders_endpoint, receiver):
    from examples.django_project.orders.models import Order

    response = post_order(django_client, customer="ada", total="9.99")
    assert response.status_code == 201, response.content
    order_id, event_id = response.json()["order_id"], response.json()["event_id"]
    assert Order.objects.filter(pk=order_id).exists()
    delivered(orders_endpoint.id, event_id)
    [request] = receiver.requests_to(f"/{orders_endpoint.id}")
    assert request.webhook_id == event_id
    body = Webhook(orders_endpoint.secrets[0]).verify(request.body, request.headers)
    assert body["type"] == "order.created"
    assert body["data"] == {"order_id": order_id, "customer": "ada", "total": "9.99"}


def test_rolled_back_order_sends_nothing(django_client, orders_endpoint, receiver, published):
    from examples.django_project.orders.models import Order

    orders_before = Order.objects.count()
    declined = post_order(django_client, customer="bob", total="5.00", payment="declined")
    assert declined.status_code == 402, declined.content
    rolled_back_event = declined.json()["event_id"]
    assert rolled_back_event  # the event was requested inside the transaction...
    assert Order.objects.count() == orders_before  # ...which rolled back

    # A marker order after it: once its webhook is delivered, the worker has consumed
    # everything enqueued before it; the rolled-back event must not be among what arrived.
    marker = post_order(django_client, customer="carol", total="1.00")
    assert marker.status_code == 201
    marker_event = marker.json()["event_id"]
    delivered(orders_endpoint.id, marker_event)
    arrived = [r.webhook_id for r in receiver.requests_to(f"/{orders_endpoint.id}")]
    assert arrived == [marker_event]
    published_ids = [event_id for _queue, _endpoint, event_id in published.events]
    assert rolled_back_event not in published_ids  # never even reached the broker
    assert marker_event in published_ids


def test_enqueue_waits_for_the_commit(django_client, orders_endpoint, published):
    from django.db import transaction

    from hookline.contrib.django import send_webhook_on_commit

    with transaction.atomic():
        event_id = send_webhook_on_commit(orders_endpoint.id, "order.created", {"order_id": 7})
        assert published.events == []  # still inside the transaction
    assert [e for _queue, _endpoint, e in published.events] == [event_id]
    delivered(orders_endpoint.id, event_id)


def test_a_used_event_id_with_other_content_is_refused_at_the_call(django_client,
                                                                  orders_endpoint, published):
    """A rolled-back transaction leaves the id free; once a worker took the event, another
    content under its id raises EventIdConflict at the call, inside the transaction."""
    from django.db import transaction

    from hookline import EventIdConflict
    from hookline.contrib.django import send_webhook_on_commit

    with pytest.raises(RuntimeError), transaction.atomic():
        send_webhook_on_commit(orders_endpoint.id, "order.created", {"v": 0}, "order-9")
        raise RuntimeError("rolled back")
    with transaction.atomic():
        send_webhook_on_commit(orders_endpoint.id, "order.created", {"v": 1}, "order-9")
    delivered(orders_endpoint.id, "order-9")
    with pytest.raises(EventIdConflict, match="event id 'order-9'"), transaction.atomic():
        send_webhook_on_commit(orders_endpoint.id, "order.created", {"v": 2}, "order-9")
    assert [e for _queue, _endpoint, e in published.events] == ["order-9"]


def test_outside_a_transaction_the_event_is_enqueued_at_once(django_client, orders_endpoint,
                                                             published):
    from hookline.contrib.django import send_webhook_on_commit

    event_id = send_webhook_on_commit(orders_endpoint.id, "order.created", {"order_id": 8},
                                      event_id="order-8-created")
    assert event_id == "order-8-created"
    assert [e for _queue, _endpoint, e in published.events] == [event_id]


def test_the_payload_sent_is_the_one_given_at_the_call(django_client, orders_endpoint, receiver):
    from django.db import transaction

    from hookline.contrib.django import send_webhook_on_commit

    payload: dict[str, Any] = {"order_id": 9, "items": ["book"]}
    with transaction.atomic():
        event_id = send_webhook_on_commit(orders_endpoint.id, "order.created", payload)
        payload["items"].append("changed after the call")
    delivered(orders_endpoint.id, event_id)
    [request] = receiver.requests_to(f"/{orders_endpoint.id}")
    assert request.json()["data"] == {"order_id": 9, "items": ["book"]}


@pytest.mark.parametrize(("endpoint_id", "payload", "message"), [
    ("no-such-endpoint", {"order_id": 1}, "no endpoint 'no-such-endpoint'"),
    (None, {"total": Decimal("9.99")}, "payload is not JSON-serialisable"),
    # The environment's limit (256 KiB by default), the worker's too.
    (None, {"note": "x" * 270_000}, r"the limit is 262144 \(HOOKLINE_MAX_PAYLOAD_BYTES\)"),
])
def test_bad_event_raises_at_the_call_site_and_nothing_is_enqueued(
        django_client, orders_endpoint, published, endpoint_id, payload, message):
    from django.db import transaction

    from hookline.contrib.django import send_webhook_on_commit

    with transaction.atomic(), pytest.raises(WebhookInputError, match=message):
        send_webhook_on_commit(endpoint_id or orders_endpoint.id, "order.created", payload)
    assert published.events == []


def test_settings_come_from_the_environment_as_in_the_worker(django_client):
    applied = config.settings()
    assert applied.retry_policy.max_attempts == int(os.environ["HOOKLINE_MAX_ATTEMPTS"])
    assert applied.redis_url == os.environ["REDIS_URL"]


@pytest.mark.parametrize(("name", "value"), [
    ("HOOKLINE", {"HOOKLINE_MAX_ATTEMPTS": 1}),
    ("HOOKLINE_MAX_ATTEMPTS", 1),
])
def test_hookline_settings_in_django_settings_are_refused(django_client, name, value):
    """They would configure the web process but not the worker: refused, naming the way."""
    from django.core.exceptions import ImproperlyConfigured
    from django.test import override_settings

    from hookline.contrib.django import check_configuration

    with override_settings(**{name: value}), pytest.raises(
            ImproperlyConfigured, match=rf"{name}.*environment variables of both processes"):
        check_configuration()


def test_a_bad_environment_value_is_improperly_configured_naming_it(
        django_client, monkeypatch: pytest.MonkeyPatch):
    from django.core.exceptions import ImproperlyConfigured

    from hookline.contrib.django import check_configuration

    monkeypatch.setenv("HOOKLINE_JITTER", "2")
    monkeypatch.setattr(config, "_configured", None)
    config._from_environment.cache_clear()
    try:
        with pytest.raises(ImproperlyConfigured, match="environment: HOOKLINE_JITTER"):
            check_configuration()
    finally:
        monkeypatch.undo()
        config._from_environment.cache_clear()


def test_publish_on_commit_fans_out_only_once_the_transaction_commits(django_client, receiver):
    from django.db import transaction

    from hookline.contrib.django import publish_on_commit
    from tests.support.cli import succeeds

    app_id = f"shop-{uuid.uuid4().hex[:8]}"
    endpoint_id = f"sub-{uuid.uuid4().hex[:8]}"
    succeeds("app", "add", app_id)
    succeeds("endpoint", "add", endpoint_id, "--url",
             receiver.route(f"/{endpoint_id}", always(Reply(204))), "--app", app_id)
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = publish_on_commit(app_id, "order.created", {"order_id": 6})
        raise RuntimeError("rolled back")
    with transaction.atomic():
        event_id = publish_on_commit(app_id, "order.created", {"order_id": 7})
        assert receiver.requests_to(f"/{endpoint_id}") == []
    delivered(endpoint_id, event_id)
    assert [r.webhook_id for r in receiver.requests_to(f"/{endpoint_id}")] == [event_id]
    assert rolled_back != event_id


def test_a_bad_environment_value_is_the_system_check_error_naming_it(
        django_client, monkeypatch: pytest.MonkeyPatch):
    """Django's own way to report configuration: ``manage.py check`` prints the error in one
    line and exits 1 (tests/integration/test_setting_doors.py runs it), a good one passes."""
    from django.core import checks

    monkeypatch.setenv("HOOKLINE_JITTER", "2")
    monkeypatch.setattr(config, "_configured", None)
    config._from_environment.cache_clear()
    try:
        errors = [message for message in checks.run_checks() if message.id == "hookline.E001"]
        assert [message.level for message in errors] == [checks.ERROR]
        assert "HOOKLINE_JITTER" in errors[0].msg
    finally:
        monkeypatch.undo()
        config._from_environment.cache_clear()
    assert not [message for message in checks.run_checks() if message.id == "hookline.E001"]
