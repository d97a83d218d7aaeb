"""``POST /orders``: store an order and announce it with an ``order.created`` webhook that is
enqueued only if the order's transaction commits."""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from examples.django_project.orders.models import Order
from hookline import RedisUnavailable
from hookline.contrib.django import send_webhook_on_commit


class PaymentDeclined(Exception):
    """The payment failed after the order row was written: the transaction rolls back."""


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    """Body: ``{"customer": "ada", "total": "9.99"}``. ``"payment": "declined"`` makes the
    payment fail after the webhook was requested, to show that nothing is sent then. With
    Hookline's Redis stalled or down the answer is a 503 within ``HOOKLINE_REDIS_TIMEOUT``."""
    try:
        body = json.loads(request.body or b"{}")
        customer, total = str(body["customer"]), Decimal(str(body["total"]))
    except (ValueError, KeyError, TypeError, InvalidOperation):
        return JsonResponse({"error": "send JSON with customer and total"}, status=400)
    event_id = None
    try:
        with transaction.atomic():
            order = Order.objects.create(customer=customer, total=total)
            event_id = send_webhook_on_commit(
                settings.ORDERS_WEBHOOK_ENDPOINT,
                "order.created",
                {"order_id": order.pk, "customer": customer, "total": str(total)},
            )
            if body.get("payment") == "declined":
                raise PaymentDeclined(f"payment for order {order.pk} declined")
    except PaymentDeclined as exc:
        # Rolled back: the order is gone and its order.created event was never enqueued.
        return JsonResponse({"error": str(exc), "event_id": event_id}, status=402)
    except RedisUnavailable as exc:
        # Redis did not answer in time (or refused): raised at the event's check, inside the
        # transaction, which rolled back; or at the commit, after the order was stored (the
        # enqueue.failed log line names the event then). Either way, say so now.
        return JsonResponse({"error": str(exc), "event_id": event_id}, status=503)
    return JsonResponse({"order_id": order.pk, "event_id": event_id}, status=201)
