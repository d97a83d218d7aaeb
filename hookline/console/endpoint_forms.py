"""The endpoint forms the console and the portal share, each a step of the page that posts
it: add an endpoint, change its URL, pick its subscriptions, send it a test event and show
what became of it (a page that refreshes itself until the outcome is known, no inline script).

The face's own module routes each one under its own name (``endpoints.change_url``,
``portal.change_url``) and says where to go after it; every rule (the URL's checks, the
catalog, the scope, read-only) is :mod:`hookline.service.endpoint_setup`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Response

from hookline.console.visit import Visit
from hookline.core.errors import InvalidField
from hookline.core.specs import EndpointSpec
from hookline.service import endpoint_setup

#: How a face renders a page: ``render(visit, template, **values)`` (the portal's adds the
#: application's name).
Render = Callable[..., Response]

#: Seconds between two reads of a test event's outcome while it is not known yet.
OUTCOME_REFRESH_SECONDS = 2


def picked(visit: Visit) -> list[str]:
    """The event types a form picked: its check boxes (``event_type``), or, where the
    catalog is empty, its free text (``event_types``, separated by commas or spaces). Empty
    text, or a post with neither, is every type (as before the catalog's boxes); boxes
    offered (``event_type_boxes``) and none ticked is nothing, which the service refuses."""
    form = visit.request.form
    boxes = [value for value in form.getlist("event_type") if value.strip()]
    if boxes or form.get("event_type_boxes"):  # the boxes were offered: none ticked is none
        return boxes
    return visit.form("event_types").replace(",", " ").split() or [endpoint_setup.EVERY_TYPE]


def _number(visit: Visit, name: str) -> str | None:
    return visit.form(name) or None


def plain(visit: Visit, template: str, **values: Any) -> Response:
    """The console's way to render a page."""
    return visit.render(template, **values)


def add_from_form(visit: Visit, render: Render, *, app: str | None) -> Response:
    """Add the endpoint the form describes; the generated secret is shown in this answer
    only (no redirect; the security headers say ``no-store``)."""
    timeout, cap = _number(visit, "timeout"), _number(visit, "max_in_flight")
    spec = EndpointSpec(app=app, rate=visit.form("rate") or None,
                        timeout=None if timeout is None else _parsed(timeout, float, "timeout"),
                        max_in_flight=None if cap is None else _parsed(cap, int, "max_in_flight"))
    added = endpoint_setup.add_endpoint(visit.actor, visit.form("endpoint_id"), visit.form("url"),
                                        picked(visit), signature=visit.form("signature") or None,
                                        **spec)
    return render(visit, "secret.html", endpoint_id=added.summary.id, secret=added.secret,
                  public_key=added.public_key, added=True, previous_until=[])


def _parsed(text: str, kind: type, field: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise InvalidField(field, f"{field.replace('_', ' ')} {text[:40]!r} is not a "
                           f"{'number' if kind is float else 'whole number'}") from None


def endpoint_id(visit: Visit) -> str:
    return str(visit.args["endpoint_id"])


def url_from_form(visit: Visit) -> None:
    endpoint_setup.change_url(visit.actor, endpoint_id(visit), visit.form("url"))


def subscriptions_from_form(visit: Visit) -> None:
    endpoint_setup.set_subscriptions(visit.actor, endpoint_id(visit), picked(visit))


def test_event_from_form(visit: Visit, outcome_page: str) -> Response:
    """Send the test event, then show its outcome page (a 303: a reload sends no other)."""
    event_id = endpoint_setup.send_test_event(visit.actor, endpoint_id(visit))
    return visit.redirect(outcome_page, endpoint_id=endpoint_id(visit), event_id=event_id)


def show_test_outcome(visit: Visit, render: Render, *, fragment: bool) -> Response:
    """The test event's page (``fragment``: its outcome alone, which the page re-reads while
    the outcome is not known)."""
    delivery = endpoint_setup.test_event_outcome(visit.actor, endpoint_id(visit),
                                                 str(visit.args["event_id"]))
    template = "_test_outcome.html" if fragment else "test_event.html"
    return render(visit, template, delivery=delivery, endpoint_id=endpoint_id(visit),
                  event_type=endpoint_setup.TEST_EVENT_TYPE,
                  refresh_seconds=OUTCOME_REFRESH_SECONDS)
