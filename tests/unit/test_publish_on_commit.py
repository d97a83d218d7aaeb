"""``publish_on_commit`` in Flask: an event checked at the call is published
(``hookline.publish``, stood in for here by a recorder: the fan-out itself is tested with it on
branch i14-fanout) after a response below 400, dropped after an error response, published at
once outside a request."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask

import hookline
from hookline import WebhookInputError
from hookline.contrib.flask import Hookline


@pytest.fixture
def published(monkeypatch) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(hookline, "publish", lambda *a, **k: calls.append((a, k)),
                        raising=False)
    return calls


@pytest.fixture
def app() -> Flask:
    app = Flask("shop")
    extension = Hookline(app)

    @app.post("/orders/<int:status>")
    def create(status: int) -> Any:
        extension.publish_on_commit("shop", "order.created", {"order_id": 7}, "evt-7",
                                    channels=["eu"])
        return {"ok": status < 400}, status

    return app


def test_a_request_that_ends_well_publishes_after_its_response(app, published):
    assert app.test_client().post("/orders/201").status_code == 201
    assert published == [(("shop", "order.created", {"order_id": 7}),
                           {"event_id": "evt-7", "channels": ("eu",), "deadline": None,
                            "ordering_key": None})]


def test_an_error_response_publishes_nothing(app, published):
    assert app.test_client().post("/orders/409").status_code == 409
    assert published == []


def test_outside_a_request_it_publishes_at_once_and_bad_input_fails_at_the_call(published):
    extension = Hookline(Flask("shop"))
    event_id = extension.publish_on_commit("shop", "order.created", {"order_id": 8})
    assert published[0][1]["event_id"] == event_id
    with pytest.raises(WebhookInputError, match="payload"):
        extension.publish_on_commit("shop", "order.created", {"bad": object()})
