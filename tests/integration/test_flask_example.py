"""The Flask extension and the example app (examples/flask_app), end to end: Flask's test
client on a SQLite file of its own, a real Redis, the session worker and a real HTTP receiver.
The outbox is off here (tests/faults/test_outbox_examples.py runs the app with it on)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from standardwebhooks import Webhook

from examples.flask_app.app import create_app
from examples.receiver import Receiver, Reply, always
from hookline import WebhookInputError
from hookline.contrib.flask import Hookline
from hookline.core import config
from hookline.core.config import ConfigError
from hookline.core.endpoint import Endpoint
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


@pytest.fixture(autouse=True)
def environment_settings_restored() -> Iterator[None]:
    """init_app sets this process's settings; later tests see the environment's again."""
    saved = config._configured
    yield
    config._configured = saved


@pytest.fixture
def orders_endpoint(receiver: Receiver) -> Endpoint:
    endpoint_id = f"orders-{uuid.uuid4().hex[:8]}"
    return EndpointRegistry().add(endpoint_id,
                                  receiver.route(f"/{endpoint_id}", always(Reply(204))))


@pytest.fixture
def web(orders_endpoint: Endpoint, tmp_path) -> Flask:
    """The example app on a SQLite file of the test's own (the outbox is off here: the
    environment leaves HOOKLINE_OUTBOX unset)."""
    return create_app({"ORDERS_WEBHOOK_ENDPOINT": orders_endpoint.id,
                       "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'orders.sqlite3'}"})


def stored_orders(web: Flask) -> list[tuple[int, str, str]]:
    """The orders in the app's database: (id, customer, total)."""
    from examples.flask_app.app import Order, db

    with web.app_context():
        return [(order.id, order.customer, order.total)
                for order in db.session.scalars(db.select(Order).order_by(Order.id))]


def delivered(endpoint_id: str, event_id: str, timeout: float = 20.0) -> None:
    gate = Gate()
    wait_until(lambda: gate.is_delivered(endpoint_id, event_id), timeout)


def test_created_order_arrives_as_a_signed_webhook_with_its_id(web, orders_endpoint, receiver):
    response = web.test_client().post("/orders", json={"customer": "ada", "total": "9.99"})
    assert response.status_code == 201, response.get_data(as_text=True)
    order_id, event_id = response.json["order_id"], response.json["event_id"]
    assert stored_orders(web) == [(order_id, "ada", "9.99")]
    delivered(orders_endpoint.id, event_id)
    [request] = receiver.requests_to(f"/{orders_endpoint.id}")
    assert request.webhook_id == event_id
    body = Webhook(orders_endpoint.secrets[0]).verify(request.body, request.headers)
    assert body["type"] == "order.created"
    assert body["data"] == {"order_id": order_id, "customer": "ada", "total": "9.99"}


def test_each_order_is_sent_once(web, orders_endpoint, receiver):
    client = web.test_client()
    event_ids = [client.post("/orders", json={"customer": f"c{n}", "total": n}).json["event_id"]
                 for n in range(20)]
    for event_id in event_ids:
        delivered(orders_endpoint.id, event_id)
    arrived = [r.webhook_id for r in receiver.requests_to(f"/{orders_endpoint.id}")]
    assert sorted(arrived) == sorted(event_ids)


def test_rolled_back_order_sends_nothing(web, orders_endpoint, receiver, published):
    client = web.test_client()
    declined = client.post("/orders", json={"customer": "bob", "total": "5.00",
                                            "payment": "declined"})
    assert declined.status_code == 402, declined.get_data(as_text=True)
    rolled_back_event = declined.json["event_id"]
    assert rolled_back_event  # the event was requested inside the transaction...
    assert stored_orders(web) == []  # ...which rolled back

    # A marker order after it: once its webhook is delivered, the worker has consumed
    # everything enqueued before it; the rolled-back event must not be among what arrived.
    marker = client.post("/orders", json={"customer": "carol", "total": "1.00"})
    assert marker.status_code == 201
    marker_event = marker.json["event_id"]
    delivered(orders_endpoint.id, marker_event)
    arrived = [r.webhook_id for r in receiver.requests_to(f"/{orders_endpoint.id}")]
    assert arrived == [marker_event]
    published_ids = [event_id for _queue, _endpoint, event_id in published.events]
    assert rolled_back_event not in published_ids  # never even reached the broker
    assert marker_event in published_ids
    assert [customer for _id, customer, _total in stored_orders(web)] == ["carol"]


def test_missing_endpoint_is_reported_by_the_route_and_nothing_is_enqueued(
        web, published):
    web.config["ORDERS_WEBHOOK_ENDPOINT"] = "no-such-endpoint"
    response = web.test_client().post("/orders", json={"customer": "ada", "total": "1"})
    assert response.status_code == 500
    assert "no endpoint 'no-such-endpoint'" in response.json["error"]
    assert published.events == []
    assert stored_orders(web) == []  # the order goes with its event: neither is kept


def test_bad_order_is_a_client_error(web, published):
    response = web.test_client().post("/orders", json={"customer": "ada"})
    assert response.status_code == 400
    assert published.events == []
    assert stored_orders(web) == []


def test_extension_registers_itself_with_the_environments_settings(web):
    extension = web.extensions["hookline"]
    assert isinstance(extension, Hookline)
    assert extension.settings is config.settings()
    assert config.settings().retry_policy.max_attempts == int(os.environ["HOOKLINE_MAX_ATTEMPTS"])


def test_extension_send_webhook_validates_like_send_webhook(web, orders_endpoint, published):
    extension: Any = web.extensions["hookline"]
    with pytest.raises(WebhookInputError,
                       match=r"limit is 262144 \(HOOKLINE_MAX_PAYLOAD_BYTES\)"):
        extension.send_webhook(orders_endpoint.id, "order.created", {"note": "x" * 270_000})
    assert published.events == []
    event_id = extension.send_webhook(orders_endpoint.id, "order.created", {"n": 1},
                                      event_id="order-1-created")
    assert event_id == "order-1-created"
    assert [e for _queue, _endpoint, e in published.events] == [event_id]


def test_extension_send_webhook_refuses_a_used_event_id_with_other_content(
        web, orders_endpoint, published):
    from hookline import EventIdConflict

    extension: Any = web.extensions["hookline"]
    extension.send_webhook(orders_endpoint.id, "order.created", {"n": 1}, event_id="order-2")
    with pytest.raises(EventIdConflict, match="event id 'order-2'"):
        extension.send_webhook(orders_endpoint.id, "order.created", {"n": 2},
                               event_id="order-2")
    assert [e for _queue, _endpoint, e in published.events] == ["order-2"]


def test_init_app_later_for_application_factories():
    extension = Hookline()
    assert extension.settings is None
    flask_app = Flask("factory")
    extension.init_app(flask_app)
    assert flask_app.extensions["hookline"] is extension
    assert extension.settings is config.settings()


@pytest.mark.parametrize("app_config", [
    {"HOOKLINE_MAX_ATTEMPTS": 9},
    {"HOOKLINE_MAX_ATEMPTS": 3},
    {"CELERY_VISIBILITY_TIMEOUT": 600},
])
def test_hookline_settings_in_the_app_config_are_refused(app_config):
    """They would configure the web process but not the worker."""
    before = config.settings()
    flask_app = Flask("bad")
    flask_app.config.update(app_config)
    [name] = app_config
    with pytest.raises(ConfigError, match=rf"sets {name}: Hookline reads its settings from the "
                                          "environment only"):
        Hookline(flask_app)
    assert "hookline" not in flask_app.extensions
    assert config.settings() is before


def test_a_redis_url_of_the_app_is_left_to_the_app():
    """REDIS_URL is a common key of other extensions' config (caches, sessions): not Hookline's."""
    flask_app = Flask("cache")
    flask_app.config["REDIS_URL"] = "redis://127.0.0.1:6399/3"
    Hookline(flask_app)
    assert config.settings().redis_url == os.environ["REDIS_URL"]


def test_a_bad_environment_value_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOOKLINE_JITTER", "2")
    monkeypatch.setattr(config, "_configured", None)
    config._from_environment.cache_clear()
    try:
        with pytest.raises(ConfigError, match="environment: HOOKLINE_JITTER"):
            Hookline(Flask("bad-env"))
    finally:
        monkeypatch.undo()
        config._from_environment.cache_clear()


def test_health(web):
    response = web.test_client().get("/health")
    assert (response.status_code, response.json) == (200, {"status": "ok"})
