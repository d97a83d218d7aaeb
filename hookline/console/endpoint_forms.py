"""The endpoint pages the console and the portal share: add an endpoint, change its URL, pick
its subscriptions, send it a test event and show what became of it (a page that refreshes
itself until the outcome is known, no inline script), pause, resume, disable and enable it,
rotate its secret.

:func:`endpoint_pages` routes them on a face's own routes, under the names its face table
uses (``endpoints.change_url``, ``portal.change_url``), each answering with that face's
endpoint page; every rule (the URL's checks, the catalog, the scope, read-only) is the
service's (:mod:`hookline.service.endpoint_setup`, :mod:`hookline.service.endpoint_actions`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from werkzeug.wrappers import Response

from hookline.console.visit import Page, Routes, Visit
from hookline.core.errors import InvalidField
from hookline.core.specs import EndpointSpec
from hookline.service import endpoint_actions, endpoint_setup
from hookline.service.actor import Actor

#: How a face renders a page: ``render(visit, template, **values)`` (the portal's adds the
#: application's name).
Render = Callable[..., Response]

#: Seconds between two reads of a test event's outcome while it is not known yet.
OUTCOME_REFRESH_SECONDS = 2
#: The actions that need nothing but the endpoint: page name -> (the last part of its path,
#: the notice after it). The names are the service's (``endpoint_actions.pause``, ...).
PLAIN_ACTIONS = {"pause": ("pause", "paused"), "resume": ("resume", "resumed"),
                 "enable": ("enable", "enabled"),
                 "reset_breaker": ("reset-breaker", "breaker-reset")}


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


def endpoint_pages(routes: Routes, render: Render, *, actions: Sequence[str],
                   disable_reason: Callable[[Visit], str]) -> None:
    """Route the shared endpoint pages on ``routes``: ``actions`` (of :data:`PLAIN_ACTIONS`),
    disable (for the reason ``disable_reason`` gives), a new secret, a new URL, the
    subscriptions, a test event and its outcome. An action answers with a 303 to the face's
    endpoint page and a notice; ``render`` draws the others."""
    endpoint_page = f"{routes.name}.endpoint_show"

    def done(visit: Visit, notice: str) -> Response:
        return visit.redirect(endpoint_page, {"notice": notice}, endpoint_id=endpoint_id(visit))

    for name in actions:
        path, notice = PLAIN_ACTIONS[name]
        routes.post(f"/endpoints/<endpoint_id>/{path}", name=name)(
            _plain_action(getattr(endpoint_actions, name), notice, done))

    @routes.post("/endpoints/<endpoint_id>/disable")
    def disable(visit: Visit) -> Response:
        endpoint_actions.disable(visit.actor, endpoint_id(visit), disable_reason(visit))
        return done(visit, "disabled")

    @routes.post("/endpoints/<endpoint_id>/rotate-secret")
    def rotate_secret(visit: Visit) -> Response:
        """A new signing secret, shown in this answer only (no redirect, not cached)."""
        rotated = endpoint_actions.rotate_secret(visit.actor, endpoint_id(visit),
                                                 signature=visit.form("signature") or None)
        return render(visit, "secret.html", endpoint_id=rotated.summary.id,
                      secret=rotated.secret, public_key=rotated.public_key, added=False,
                      previous_until=rotated.previous_until)

    @routes.post("/endpoints/<endpoint_id>/url")
    def change_url(visit: Visit) -> Response:
        endpoint_setup.change_url(visit.actor, endpoint_id(visit), visit.form("url"))
        return done(visit, "url-changed")

    @routes.post("/endpoints/<endpoint_id>/subscriptions")
    def subscriptions(visit: Visit) -> Response:
        """Set the event types the endpoint receives, picked from the catalog (or every
        type)."""
        endpoint_setup.set_subscriptions(visit.actor, endpoint_id(visit), picked(visit))
        return done(visit, "subscribed")

    @routes.post("/endpoints/<endpoint_id>/test-event")
    def test_event(visit: Visit) -> Response:
        """Send the test event, then show its outcome page (a 303: a reload sends no
        other)."""
        event_id = endpoint_setup.send_test_event(visit.actor, endpoint_id(visit))
        return visit.redirect(f"{routes.name}.test_event_show", endpoint_id=endpoint_id(visit),
                              event_id=event_id)

    @routes.get("/endpoints/<endpoint_id>/test-events/<event_id>")
    def test_event_show(visit: Visit) -> Response:
        return show_test_outcome(visit, render, fragment=False)

    @routes.get("/endpoints/<endpoint_id>/test-events/<event_id>/outcome")
    def test_event_outcome(visit: Visit) -> Response:
        return show_test_outcome(visit, render, fragment=True)


def _plain_action(act: Callable[[Actor, str], Any], notice: str,
                  done: Callable[[Visit, str], Response]) -> Page:
    """The page of an action that needs nothing but the endpoint."""
    def page(visit: Visit) -> Response:
        act(visit.actor, endpoint_id(visit))
        return done(visit, notice)
    return page


def show_test_outcome(visit: Visit, render: Render, *, fragment: bool) -> Response:
    """The test event's page (``fragment``: its outcome alone, which the page re-reads while
    the outcome is not known)."""
    delivery = endpoint_setup.test_event_outcome(visit.actor, endpoint_id(visit),
                                                 str(visit.args["event_id"]))
    template = "_test_outcome.html" if fragment else "test_event.html"
    return render(visit, template, delivery=delivery, endpoint_id=endpoint_id(visit),
                  event_type=endpoint_setup.TEST_EVENT_TYPE,
                  refresh_seconds=OUTCOME_REFRESH_SECONDS)
