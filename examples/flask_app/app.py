"""The Flask example: ``POST /orders`` stores an order and enqueues ``order.created``.

    .venv/bin/hookline endpoint add orders --url http://127.0.0.1:8099/ok
    .venv/bin/flask --app examples.flask_app.app run --port 8000
    curl -X POST localhost:8000/orders -H 'Content-Type: application/json' \\
         -d '{"customer": "ada", "total": "9.99"}'

docker-compose runs it as the ``web`` service. Orders live in memory: the point is the webhook.

The Hookline console is mounted under /hookline/ behind a basic sign-in of the shop's own
(``authorize`` below): ``SHOP_CONSOLE_OPERATOR=user:password`` may act,
``SHOP_CONSOLE_VIEWER=user:password`` may only look; with neither nobody gets in.
"""

from __future__ import annotations

import hmac
import itertools
import os
import threading
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from flask import Flask, Request, Response, abort, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from hookline import WebhookInputError
from hookline.contrib.flask import Hookline
from hookline.contrib.flask_console import console_blueprint

hookline = Hookline()


class OrderBook:
    """Orders in memory, numbered from 1."""

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.orders: dict[int, dict[str, str]] = {}

    def add(self, customer: str, total: Decimal) -> int:
        with self._lock:
            order_id = next(self._numbers)
            self.orders[order_id] = {"customer": customer, "total": str(total)}
        return order_id


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The application factory (``flask --app examples.flask_app.app`` finds it). Hookline's
    settings come from the environment (``REDIS_URL``, ``HOOKLINE_*``), as in the worker."""
    app = Flask(__name__)
    app.config["ORDERS_WEBHOOK_ENDPOINT"] = os.environ.get("ORDERS_WEBHOOK_ENDPOINT", "orders")
    app.config["CONSOLE_OPERATOR"] = os.environ.get("SHOP_CONSOLE_OPERATOR", "")
    app.config["CONSOLE_VIEWER"] = os.environ.get("SHOP_CONSOLE_VIEWER", "")
    app.config.update(config or {})
    hookline.init_app(app)
    app.extensions["orders"] = OrderBook()
    app.add_url_rule("/orders", view_func=create_order, methods=["POST"])
    app.add_url_rule("/health", view_func=health, methods=["GET"])
    app.register_blueprint(console_blueprint(authorize, user=console_user),
                           url_prefix="/hookline")
    return app


def _signed_in(req: Request) -> str | None:
    """The role (``"act"``, ``"view"``) of the request's basic-auth user, None if unknown."""
    given = req.authorization
    if given is None or given.type != "basic":
        return None
    offered = f"{given.username}:{given.password}".encode()
    for role, key in (("act", "CONSOLE_OPERATOR"), ("view", "CONSOLE_VIEWER")):
        known = str(current_app.config[key]).encode()
        if known and hmac.compare_digest(offered, known):
            return role
    return None


def authorize(req: Request, action: str) -> bool:
    """The console's hook: who is signed in may view; only the operator may act. Someone not
    signed in gets the browser's sign-in prompt."""
    role = _signed_in(req)
    if role is None:
        abort(Response("Sign in to the shop's console.\n", 401,
                       {"WWW-Authenticate": 'Basic realm="shop console"'}))
    return action == "view" or role == "act"


def console_user(req: Request) -> str:
    """The name the console's audit log keeps."""
    return str(req.authorization.username if req.authorization else "")


def create_order() -> ResponseReturnValue:
    """Body: ``{"customer": "ada", "total": "9.99"}``; answers 201 with the order and event id."""
    body = request.get_json(silent=True) or {}
    try:
        customer, total = str(body["customer"]), Decimal(str(body["total"]))
    except (KeyError, TypeError, InvalidOperation):
        return jsonify(error="send JSON with customer and total"), 400
    order_id = current_app.extensions["orders"].add(customer, total)
    try:
        event_id = current_app.extensions["hookline"].send_webhook(
            current_app.config["ORDERS_WEBHOOK_ENDPOINT"],
            "order.created",
            {"order_id": order_id, "customer": customer, "total": str(total)},
        )
    except WebhookInputError as exc:
        # Not the client's fault: the shop's webhook endpoint is missing or misconfigured.
        return jsonify(order_id=order_id, error=f"order.created not sent: {exc}"), 500
    return jsonify(order_id=order_id, event_id=event_id), 201


def health() -> ResponseReturnValue:
    return jsonify(status="ok")
