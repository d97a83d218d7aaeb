"""``hookline app``, ``hookline publish`` and ``hookline event-type``: applications, publishing
an event to every subscribed endpoint of one, and the event catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from hookline.api.publishing import publish
from hookline.cli.output import echo_fields, echo_json, echo_table, format_time, shorten
from hookline.core.event import parse_json_text
from hookline.service import apps as service
from hookline.service.actor import cli_actor
from hookline.service.endpoints import EndpointSummary
from hookline.store.catalog import CatalogError


def subscription_text(item: EndpointSummary) -> str:
    """``order.*, invoice.paid; channels eu`` (or ``every event``): for listings."""
    types = ", ".join(item.event_types) if item.event_types else "every type"
    return types + (f"; channels {', '.join(item.channels)}" if item.channels else "")


# -- applications ----------------------------------------------------------------------------


@click.group()
def app() -> None:
    """Applications: a customer or tenant whose endpoints receive the events published to
    it ('hookline publish APP')."""


@app.command("add")
@click.argument("app_id", metavar="APP")
@click.option("--name", help="A name for people.")
@click.option("--description", help="Free text.")
def app_add(app_id: str, name: str | None, description: str | None) -> None:
    """Register application APP (its id is used like an endpoint id)."""
    service.add_app(cli_actor(), app_id, name=name, description=description)
    click.echo(f"added application {app_id}: add endpoints with "
               f"'hookline endpoint add ID --url URL --app {app_id}'")


@app.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def app_list(as_json: bool) -> None:
    """List applications and how many endpoints each has."""
    apps = service.list_apps(cli_actor())
    if as_json:
        echo_json([{**listed.app.public(), "endpoints": listed.endpoints} for listed in apps])
        return
    if not apps:
        click.echo("no applications: add one with 'hookline app add APP'")
        return
    echo_table(["id", "name", "endpoints", "created"],
               [(listed.app.id, shorten(listed.app.name) or None, listed.endpoints,
                 format_time(listed.app.created_at)) for listed in apps])


@app.command("show")
@click.argument("app_id", metavar="APP")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (secrets masked).")
def app_show(app_id: str, as_json: bool) -> None:
    """Show application APP and its endpoints with their subscriptions."""
    detail = service.app_detail(cli_actor(), app_id)
    item, endpoints = detail.app, detail.endpoints
    if as_json:
        echo_json({**item.public(), "endpoints": [
            {"id": found.id, "enabled": found.enabled, "event_types": list(found.event_types),
             "channels": list(found.channels)} for found in endpoints]})
        return
    echo_fields([("id", item.id), ("name", item.name or None),
                 ("description", item.description or None),
                 ("created", format_time(item.created_at)),
                 ("endpoints", len(endpoints))])
    if endpoints:
        click.echo()
        echo_table(["endpoint", "status", "subscription"],
                   [(found.id, "enabled" if found.enabled else "disabled",
                     shorten(subscription_text(found), 60)) for found in endpoints])


@app.command("remove")
@click.argument("app_id", metavar="APP")
def app_remove(app_id: str) -> None:
    """Remove application APP. Refused while endpoints belong to it: remove them, or move
    them out with 'hookline endpoint update ID --app none', first."""
    service.remove_app(cli_actor(), app_id)
    click.echo(f"removed application {app_id}")


# -- publish ---------------------------------------------------------------------------------


@click.command("publish")
@click.argument("app_id", metavar="APP")
@click.option("--type", "event_type", required=True, help="Event type, e.g. order.created.")
@click.option("--payload", required=True, metavar="JSON", help="Event data, as JSON.")
@click.option("--id", "event_id", help="Event id (default: a new UUID); the idempotency key "
                                       "of the whole fan-out, sent as webhook-id.")
@click.option("--channel", "channels", multiple=True, metavar="CHANNEL",
              help="A channel the event carries (repeatable).")
def publish_command(app_id: str, event_type: str, payload: str, event_id: str | None,
                    channels: tuple[str, ...]) -> None:
    """Publish an event to every enabled endpoint of APP whose subscription matches it, and
    print its event id ('hookline event show ID' shows each endpoint's outcome)."""
    data = parse_json_text("payload", payload)
    click.echo(publish(app_id, event_type, data, event_id, channels=list(channels)))


# -- the event catalog -----------------------------------------------------------------------


@click.group("event-type")
def event_type() -> None:
    """The event catalog: the types applications publish, with optional JSON Schemas. Once
    it holds a type, publishing or subscribing to a type it does not hold is refused."""


def _read_schema(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"cannot read schema file {path!r}: {exc}", "schema") from None
    try:
        return parse_json_text("schema", text)
    except ValueError as exc:
        raise CatalogError(f"schema file {path!r}: {exc}", "schema") from None


@event_type.command("add")
@click.argument("name")
@click.option("--schema", "schema_file", metavar="FILE",
              help="A JSON Schema (a file) every payload of this type must satisfy.")
@click.option("--description", help="What the event means, for people.")
def event_type_add(name: str, schema_file: str | None, description: str | None) -> None:
    """Register event type NAME (dot-separated segments, e.g. order.created)."""
    schema = _read_schema(schema_file) if schema_file else None
    service.add_event_type(cli_actor(), name, schema=schema, description=description)
    click.echo(f"added event type {name}" + (" with its schema" if schema is not None else ""))


@event_type.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schemas included).")
def event_type_list(as_json: bool) -> None:
    """List the event catalog."""
    types = service.list_event_types(cli_actor())
    if as_json:
        echo_json([item.public() for item in types])
        return
    if not types:
        click.echo("the event catalog is empty: any event type may be published")
        return
    echo_table(["type", "schema", "description"],
               [(item.name, "yes" if item.schema else "no",
                 shorten(item.description) or None) for item in types])


@event_type.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def event_type_show(name: str, as_json: bool) -> None:
    """Show event type NAME and its schema."""
    item = service.event_type(cli_actor(), name)
    if as_json:
        echo_json(item.public())
        return
    echo_fields([("type", item.name), ("description", item.description or None),
                 ("created", format_time(item.created_at)),
                 ("schema", "(below)" if item.schema else "none")])
    if item.schema:
        click.echo(json.dumps(json.loads(item.schema), indent=2, ensure_ascii=True))


@event_type.command("remove")
@click.argument("name")
def event_type_remove(name: str) -> None:
    """Remove event type NAME from the catalog (endpoints keep their filters)."""
    service.remove_event_type(cli_actor(), name)
    click.echo(f"removed event type {name}")
