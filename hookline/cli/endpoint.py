"""``hookline endpoint``: register and manage the receivers of webhooks (add, list, show,
update, disable, enable, pause, resume, remove, rotate-secret, lines).

A signing secret is printed once, when ``endpoint add`` generates it, and masked everywhere
else; an ed25519 key's public key is printed when it is made and by ``show``, its private key
never; a header's value is never echoed back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from hookline.cli.apps import subscription_text
from hookline.cli.breaker import breaker_json, describe
from hookline.cli.event import describe_last_error, describe_recent
from hookline.cli.ordering import endpoint_lines
from hookline.cli.output import echo_fields, echo_json, echo_table, format_time, shorten
from hookline.cli.params import HeaderParam, JsonParam
from hookline.cli.secret import (
    SECRET_HELP,
    describe_secrets,
    echo_new_key,
    echo_repair,
    key_options,
    rotate_secret,
)
from hookline.core.endpoint import EndpointError
from hookline.core.endpoint_validation import (
    ORDER_POLICIES,
    validate_headers,
    validate_secret,
    validate_signature,
)
from hookline.core.event import shown
from hookline.core.specs import EndpointSpec, given_settings
from hookline.service import endpoint_actions as actions
from hookline.service.actor import cli_actor
from hookline.service.endpoints import (
    EndpointSummary,
    all_endpoints,
    endpoint_health,
    endpoint_summary,
)

RETRY_POLICY_HELP = ("Overrides of the retry policy as a JSON object, e.g. "
                     "'{\"max_attempts\": 5, \"max_backoff\": 600}'.")
RATE_HELP = ("Most requests to this endpoint from all workers together: N/s, N/m or N/h "
             "(e.g. 50/s, 3000/m)")
BURST_HELP = "Requests that may go out back to back before the rate spaces them"
APP_HELP = "The application the endpoint belongs to ('hookline publish APP' reaches it)"
EVENTS_HELP = ("Event types it receives, comma-separated: exact (order.created), a prefix "
               "ending in '.*' (order.*) or '*'")
CHANNELS_HELP = ("Channels it listens to, comma-separated: it receives only events carrying "
                 "one of them")
HEADER_HELP = ("A header sent on every request, NAME:VALUE (repeatable). The value is kept "
               "like a secret: masked in listings, never logged. webhook-*, Content-Type, "
               "Content-Length, Host and hop-by-hop headers are refused.")
MAX_IN_FLIGHT_HELP = ("The most attempts in flight to this endpoint at once, across all "
                      "workers (protects its receiver; beyond it deliveries wait without "
                      "holding a worker)")
ORDERED_HELP = ("Deliveries with the same ordering key (send_webhook's ordering_key; "
                "default: one line for the endpoint) go out one at a time, in the order "
                "enqueued, across retries, pauses and crashes; other keys go on meanwhile.")
ORDER_POLICY_HELP = ("What a key does when its head is dead-lettered: block (wait until the "
                     "dead letter is replayed or discarded; the default) or skip (the next "
                     "goes; the Hookline-Sequence header shows the receiver the gap).")
Callback = TypeVar("Callback", bound=Callable[..., Any])
#: How update's answer names a setting whose option is named otherwise.
CHANGED = {"headers": "header", "remove_headers": "removed header", "event_types": "events"}
TRACE_CONTEXT_HELP = ("Send the attempt's W3C traceparent (and tracestate) to this receiver, "
                      "where OpenTelemetry traces are on. Off by default: it tells the "
                      "receiver your trace ids (docs/operations/tracing.md).")


@click.group()
def endpoint() -> None:
    """Register and manage the receivers of webhooks."""


def _status(item: EndpointSummary) -> str:
    if not item.enabled:
        since = f" since {format_time(item.disabled_at)}" if item.disabled_at else ""
        by = f" by {item.disabled_by}" if item.disabled_by else ""
        return f"disabled ({item.disabled_reason or 'no reason'}){since}{by}"
    return f"paused since {format_time(item.paused_at)}" if item.paused else "enabled"


def _rate(item: EndpointSummary) -> str | None:
    return f"{item.rate} burst {item.public['burst']}" if item.rate else None


def _burst(item: EndpointSummary) -> str:
    if not item.rate:
        return "- (no effect without a rate)"
    return f"{item.public['burst']}" + (" (default)" if item.burst is None else "")


def checked_rate(rate: str | None) -> str | None:
    """``rate`` as given, once known to be ASCII: ``parse_rate`` trusts ``str.isdigit``, which
    passes digits such as '²' that ``int`` then refuses with a bare ValueError."""
    if rate is not None and not rate.isascii():
        raise EndpointError(f"rate {shown(rate)} is invalid: use N/s, N/m or N/h with N a "
                            "positive integer (e.g. 50/s, 3000/m)", "rate")
    return rate


def _cap(value: int | None) -> int | None:
    """--max-in-flight as given to add: 0 is refused there (it means 'remove' for update)."""
    if value is not None and value < 1:
        raise click.BadParameter("must be at least 1", param_hint="--max-in-flight")
    return value


def _setting_options(*, update: bool) -> Callable[[Callback], Callback]:
    """The options of an endpoint's settings, one per setting of an
    :class:`~hookline.core.specs.EndpointSpec` and named as it names them, for ``add`` (the
    help says what leaving one out means) or for ``update`` (how to clear one)."""
    def ending(for_add: str, for_update: str) -> str:
        return for_update if update else for_add

    options = [
        click.option("--timeout", type=float, metavar="SECONDS",
                     help=ending("Read timeout for this endpoint (default "
                                 "HOOKLINE_READ_TIMEOUT).", "New read timeout.")),
        click.option("--retry-policy", type=JsonParam(object_only=True),
                     help=RETRY_POLICY_HELP + ending("", " Merged into the current overrides.")),
        click.option("--rate", metavar="N/s|N/m|N/h" + ending("", "|none"),
                     help=RATE_HELP + ending("; no limit when omitted.", "; 'none' removes it.")),
        click.option("--burst", type=int, metavar="N",
                     help=BURST_HELP + ending(" (default: the registry's).", ".")),
        click.option("--header", "headers", type=HeaderParam(), multiple=True,
                     help=HEADER_HELP + ending("", " A header of the same name is replaced.")),
        *([click.option("--remove-header", "remove_headers", metavar="NAME", multiple=True,
                        help="Stop sending header NAME (repeatable).")] if update else []),
        click.option("--app", metavar="APP" + ending("", "|none"),
                     help=APP_HELP + ending(".", "; 'none' takes it out.")),
        click.option("--events", "event_types", metavar="TYPES" + ending("", "|none"),
                     help=EVENTS_HELP + ending("; every type when omitted.",
                                               "; 'none': every type.")),
        click.option("--channels", metavar="CHANNELS" + ending("", "|none"),
                     help=CHANNELS_HELP + ending("; no channel filter when omitted.",
                                                 "; 'none': no channel filter.")),
        click.option("--max-in-flight", type=int, metavar="N",
                     help=MAX_IN_FLIGHT_HELP + ending("; no cap when omitted.",
                                                      "; 0 removes the cap.")),
        click.option(ending("--ordered", "--ordered/--unordered"), is_flag=True,
                     default=None if update else False,
                     help=ORDERED_HELP + ending("", " --unordered puts the waiting deliveries "
                                                    "back on the queue.")),
        click.option("--order-policy", type=click.Choice(ORDER_POLICIES), help=ORDER_POLICY_HELP),
        click.option(ending("--trace-context", "--trace-context/--no-trace-context"),
                     is_flag=True, default=None if update else False, help=TRACE_CONTEXT_HELP),
    ]

    def decorate(command: Callback) -> Callback:
        for option in reversed(options):
            command = option(command)
        return command
    return decorate


def _spec(options: dict[str, Any], **checked: Any) -> EndpointSpec:
    """The settings the options gave (click passes them by the spec's names), with those the
    command checked itself (``checked``) in their place."""
    return cast(EndpointSpec, {**options, **checked})


@endpoint.command("add")
@click.argument("endpoint_id", metavar="ID")
@click.option("--url", required=True, help="Where events are POSTed (http or https).")
@key_options(secret_help=f"Signing key: {SECRET_HELP}; generated when omitted.",
             signature_help="The kind of key generated: hmac (v1 signatures, the default; "
                            "the secret is printed once) or ed25519 (v1a: a key pair; its "
                            "public key is printed, the private key never).")
@_setting_options(update=False)
def endpoint_add(endpoint_id: str, url: str, signature: str | None, rate: str | None,
                 headers: tuple[tuple[str, str], ...], max_in_flight: int | None,
                 **options: Any) -> None:
    """Register endpoint ID. Without --secret a key is generated: an HMAC secret printed
    once, or with --signature ed25519 a key pair whose public key is printed."""
    # Without --burst the registry's own default applies.
    spec = _spec(options, rate=checked_rate(rate), headers=validate_headers({}, headers),
                 max_in_flight=_cap(max_in_flight))
    answer = actions.add_endpoint(cli_actor(), endpoint_id, url, signature=signature, **spec)
    added = answer.summary
    click.echo(f"added endpoint {added.id} -> {added.url}"
               + (f" in application {added.app} ({subscription_text(added)})"
                  if added.app else ""))
    if not added.app and (added.event_types or added.channels):
        click.echo("warning: --events and --channels choose what 'hookline publish' sends; "
                   "they have no effect without --app", err=True)
    if added.rate is None and spec.get("burst") is not None:
        click.echo("warning: --burst has no effect without --rate", err=True)
    echo_new_key(answer.secret, answer.public_key, label="")


@endpoint.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (secrets masked).")
def endpoint_list(as_json: bool) -> None:
    """List endpoints."""
    endpoints = all_endpoints(cli_actor())
    if as_json:
        echo_json([item.public for item in endpoints])
        return
    if not endpoints:
        click.echo("no endpoints: add one with 'hookline endpoint add ID --url URL'")
        return
    echo_table(
        ["id", "url", "status", "timeout", "rate", "retry policy", "updated"],
        [
            (item.id, shorten(item.url), _status(item), item.timeout, _rate(item),
             json.dumps(dict(item.retry_policy), sort_keys=True) if item.retry_policy
             else "default", format_time(item.updated_at))
            for item in endpoints
        ],
    )


@endpoint.command("show")
@click.argument("endpoint_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (secrets masked).")
def endpoint_show(endpoint_id: str, as_json: bool) -> None:
    """Show one endpoint: its effective retry policy, breaker, recent success rate and last
    error."""
    health = endpoint_health(cli_actor(), endpoint_id)
    item, status, recent = health.summary, health.breaker, health.recent
    inflight, waiting = health.in_flight, health.waiting
    if as_json:
        echo_json({**item.public, "breaker": breaker_json(status), "recent": recent.as_dict(),
                   "in_flight": inflight, "waiting": waiting})
        return
    default_timeout = item.timeout is None
    echo_fields([
        ("id", item.id),
        ("url", item.url),
        ("status", _status(item)),
        ("secrets", describe_secrets(item.public)),
        ("headers", ", ".join(f"{name}: {value}" for name, value in
                              item.public["headers"].items()) or "none"),
        ("read timeout", f"{health.read_timeout:g}s" + (" (default)" if default_timeout else "")),
        ("retry policy", json.dumps(health.policy, sort_keys=True)),
        ("overrides", json.dumps(dict(item.retry_policy), sort_keys=True)),
        ("retry window", f"{health.retry_window:g}s"),
        ("rate", item.rate or "no limit"),
        ("burst", _burst(item)),
        ("max in flight", item.max_in_flight or "no cap (its fair share of the slots)"),
        ("ordered", f"yes, policy {item.public['order_policy']} (see 'hookline endpoint lines')"
         if item.public["ordered"] else "no"),
        ("trace context", "sent to the receiver (traceparent)" if item.public["trace_context"]
         else "not sent"),
        ("in flight", f"{inflight} now, {waiting} waiting for a slot"),
        ("application", item.app),
        ("subscription", subscription_text(item) if item.app else None),
        ("created", format_time(item.created_at)),
        ("updated", format_time(item.updated_at)),
        ("breaker", describe(status)),
        ("recent attempts", describe_recent(recent)),
        ("last error", describe_last_error(recent)),
        ("last success", format_time(recent.last_success_at)),
    ])


@endpoint.command("update")
@click.argument("endpoint_id", metavar="ID")
@click.option("--url", help="New URL (http or https).")
@key_options(secret_help="New signing key (replaces the current ones at once).",
             signature_help="Replace the signing keys at once with a new key of this kind "
                            "(with --secret: that one, of this kind): an hmac secret is "
                            "printed once, an ed25519 key's public key is printed. Receivers "
                            "still verifying with the old key fail from then on: "
                            "'rotate-secret --signature' switches with an overlap instead.")
@_setting_options(update=True)
def endpoint_update(endpoint_id: str, url: str | None, secret: str | None,
                    signature: str | None, rate: str | None,
                    headers: tuple[tuple[str, str], ...], **options: Any) -> None:
    """Change endpoint ID; pending retries use the new values at their next attempt (a new
    subscription applies to events published after it). --secret and --signature replace the
    signing keys at once; 'rotate-secret' keeps the old ones signing for an overlap."""
    spec = _spec(options, secret=None if signature else secret, rate=checked_rate(rate),
                 headers=dict(headers))
    changed = [CHANGED.get(name, name).replace("_", " ")
               for name in given_settings(spec, url=url, secret=secret, signature=signature)]
    if not changed:
        raise click.UsageError("nothing to update: give --url, --secret, --signature, "
                               "--timeout, --retry-policy, --rate, --burst, --header, "
                               "--remove-header, --app, --events, --channels, "
                               "--max-in-flight, --ordered/--unordered, --order-policy or "
                               "--trace-context/--no-trace-context")
    if signature is not None:
        # Refused before anything changes: the new key goes in after the other fields.
        validate_signature(signature, validate_secret(secret) if secret else None)
    actor = cli_actor()
    new_key: tuple[str | None, str | None] = (None, None)
    repair: tuple[bool, int] = (False, 0)
    if set(changed) - {"secret", "signature"} or signature is None:
        updated = actions.update_endpoint(actor, endpoint_id, url=url, **spec)
        if updated.summary.rate is None and spec.get("burst") is not None:
            click.echo("warning: --burst has no effect without a rate", err=True)
        new_key = (None, updated.summary.public["public_keys"][0] if secret else None)
        repair = (updated.repaired, updated.released)
    if signature is not None:
        replaced = actions.rotate_secret(actor, endpoint_id, secret=secret,
                                         signature=signature, overlap=0)
        new_key = (replaced.secret, replaced.public_key)
        repair = (replaced.repaired, replaced.released)
    click.echo(f"updated endpoint {endpoint_id}: {', '.join(changed)}")
    echo_repair(*repair)
    echo_new_key(*new_key, label="new ")


@endpoint.command("disable")
@click.argument("endpoint_id", metavar="ID")
@click.option("--reason", default="disabled by operator", show_default=True,
              help="Why; shown in listings and dead letters.")
def endpoint_disable(endpoint_id: str, reason: str) -> None:
    """Stop sending to endpoint ID; its events go to the dead-letter queue."""
    actions.disable(cli_actor(), endpoint_id, reason)
    click.echo(f"disabled endpoint {endpoint_id}")


@endpoint.command("enable")
@click.argument("endpoint_id", metavar="ID")
def endpoint_enable(endpoint_id: str) -> None:
    """Send to endpoint ID again."""
    actions.enable(cli_actor(), endpoint_id)
    click.echo(f"enabled endpoint {endpoint_id}")


@endpoint.command("pause")
@click.argument("endpoint_id", metavar="ID")
def endpoint_pause(endpoint_id: str) -> None:
    """Hold every delivery to endpoint ID in the retry schedule until 'resume': nothing is
    sent, no attempt is used, nothing is dead-lettered (unlike 'disable')."""
    actions.pause(cli_actor(), endpoint_id)
    click.echo(f"paused endpoint {endpoint_id}: its deliveries wait until "
               f"'hookline endpoint resume {endpoint_id}'")


@endpoint.command("resume")
@click.argument("endpoint_id", metavar="ID")
def endpoint_resume(endpoint_id: str) -> None:
    """End the pause of endpoint ID: the deliveries held for it go out in the order they came
    in, within its rate limit."""
    released = actions.resume(cli_actor(), endpoint_id)
    click.echo(f"resumed endpoint {endpoint_id}: {released} held deliveries due now")


@endpoint.command("remove")
@click.argument("endpoint_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def endpoint_remove(endpoint_id: str, yes: bool) -> None:
    """Remove endpoint ID; its pending events will be dead-lettered (endpoint_removed)."""
    actor = cli_actor()
    endpoint_summary(actor, endpoint_id)
    if not yes:
        click.confirm(f"Remove endpoint {endpoint_id}? Its pending events will be "
                      "dead-lettered.", abort=True)
    actions.remove_endpoint(actor, endpoint_id)
    click.echo(f"removed endpoint {endpoint_id}")


endpoint.add_command(rotate_secret)
endpoint.add_command(endpoint_lines)
