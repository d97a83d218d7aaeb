"""The Flask example: ``POST /orders`` stores an order and, in the same transaction, its
``order.created`` webhook.

Run it from the repository root:

    .venv/bin/hookline endpoint add orders --url http://127.0.0.1:8099/ok
    .venv/bin/flask --app examples.flask_app.app run --port 8000
    curl -X POST localhost:8000/orders -H 'Content-Type: application/json' \\
         -d '{"customer": "ada", "total": "9.99"}'

Orders are kept with Flask-SQLAlchemy in a SQLite file: ``ORDERS_DB_PATH``, by default
``hookline-example-flask-orders.sqlite3`` in the temporary directory; its tables (the orders and
Hookline's outbox, ``hookline_outbox``) are made when the app is created. The webhook is
``send_webhook_on_commit`` in the order's transaction: sent only if the order commits
(``"payment": "declined"`` rolls both back). With ``HOOKLINE_OUTBOX=on`` it is a row of the
outbox, written without touching Redis, which the workers' relay publishes; start the worker
with the same database:

    HOOKLINE_OUTBOX=on HOOKLINE_OUTBOX_URL=sqlite:////tmp/hookline-example-flask-orders.sqlite3 \\
        .venv/bin/celery -A app worker
    HOOKLINE_OUTBOX=on .venv/bin/flask --app examples.flask_app.app run --port 8000

docker-compose runs it as the ``web`` service.

The Hookline console is mounted under /hookline/ behind a basic sign-in of the shop's own
(``authorize`` below): ``SHOP_CONSOLE_OPERATOR=user:password`` may act,
``SHOP_CONSOLE_VIEWER=user:password`` may only look; with neither nobody gets in.
"""

from __future__ import annotations

import hmac
import os
import tempfile
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from flask import Flask, Request, Response, abort, current_app, jsonify, request
from flask.typing import ResponseReturnValue
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hookline import RedisUnavailable, WebhookInputError
from hookline.contrib.flask import Hookline
from hookline.contrib.flask_console import console_blueprint
from hookline.contrib.sqlalchemy import outbox_table

hookline = Hookline()


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
outbox_table(db.metadata)  # hookline_outbox, made by db.create_all() with the orders


class Order(db.Model):  # type: ignore[name-defined]
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(100))
    #: The total as its decimal string ("9.99"): SQLite has no decimal type.
    total: Mapped[str] = mapped_column(String(32))


class PaymentDeclined(Exception):
    """The payment failed after the order row was written: the transaction rolls back."""


def default_database() -> str:
    """The SQLite file of the orders: ``ORDERS_DB_PATH``, or one in the temporary directory."""
    path = os.environ.get("ORDERS_DB_PATH") or str(
        Path(tempfile.gettempdir()) / "hookline-example-flask-orders.sqlite3")
    return f"sqlite:///{path}"


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The application factory (``flask --app examples.flask_app.app`` finds it). Hookline's
    settings come from the environment (``REDIS_URL``, ``HOOKLINE_*``), as in the worker; the
    orders' database from ``ORDERS_DB_PATH`` (or ``SQLALCHEMY_DATABASE_URI`` in ``config``)."""
    app = Flask(__name__)
    app.config["ORDERS_WEBHOOK_ENDPOINT"] = os.environ.get("ORDERS_WEBHOOK_ENDPOINT", "orders")
    app.config["CONSOLE_OPERATOR"] = os.environ.get("SHOP_CONSOLE_OPERATOR", "")
    app.config["CONSOLE_VIEWER"] = os.environ.get("SHOP_CONSOLE_VIEWER", "")
    app.config["SQLALCHEMY_DATABASE_URI"] = default_database()
    app.config.update(config or {})
    hookline.init_app(app)
    db.init_app(app)
    with app.app_context():
        db.create_all()
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
    """Body: ``{"customer": "ada", "total": "9.99"}``; answers 201 with the order and event id.
    ``"payment": "declined"`` makes the payment fail after the webhook was requested, to show
    that nothing is sent then (402). With the outbox off and Hookline's Redis stalled or down
    the answer is a 503 within ``HOOKLINE_REDIS_TIMEOUT``; with it on, Redis is not asked."""
    body = request.get_json(silent=True)
    try:
        if not isinstance(body, dict):
            raise TypeError("not a JSON object")
        customer, total = str(body["customer"]), Decimal(str(body["total"]))
    except (KeyError, TypeError, InvalidOperation):
        return jsonify(error="send JSON with customer and total"), 400
    event_id = None
    try:
        order = Order(customer=customer, total=str(total))
        db.session.add(order)
        db.session.flush()  # the order's id, for the event
        order_id = order.id
        event_id = hookline.send_webhook_on_commit(
            current_app.config["ORDERS_WEBHOOK_ENDPOINT"],
            "order.created",
            {"order_id": order_id, "customer": customer, "total": str(total)},
            session=db.session,
        )
        if body.get("payment") == "declined":
            raise PaymentDeclined(f"payment for order {order_id} declined")
    except PaymentDeclined as exc:
        # Rolled back: the order is gone and its order.created event was never enqueued.
        db.session.rollback()
        return jsonify(error=str(exc), event_id=event_id), 402
    except RedisUnavailable as exc:
        # The outbox is off and Redis did not answer the event's check in time (or refused):
        # the order is rolled back; say so now.
        db.session.rollback()
        return jsonify(error=str(exc), event_id=event_id), 503
    except WebhookInputError as exc:
        # Not the client's fault: the shop's webhook endpoint is missing or misconfigured.
        # The order goes with its event: neither is kept.
        db.session.rollback()
        return jsonify(error=f"order not taken, order.created not sent: {exc}"), 500
    try:
        db.session.commit()
    except RedisUnavailable as exc:
        # The outbox is off and Redis went away between the check and the enqueue after the
        # commit: the order is stored, its event not sent (the enqueue.failed log line names
        # it). Say so now.
        return jsonify(error=str(exc), event_id=event_id), 503
    return jsonify(order_id=order_id, event_id=event_id), 201


def health() -> ResponseReturnValue:
    return jsonify(status="ok")
