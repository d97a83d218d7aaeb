"""The ``hookline`` command: endpoints, test events, dead letters, breakers, the retry schedule,
the releaser and statistics.

Every listing and ``show`` takes ``--json``. A signing secret is printed once, when
``endpoint add`` generates it, and masked everywhere else. Bad input and an unreachable Redis
end in a one-line ``Error: ...`` and exit code 1, never a traceback.
"""

from __future__ import annotations

from typing import Any

import click
import redis

from hookline import __version__
from hookline.api.enqueue import WebhookInputError, send_webhook
from hookline.cli.apps import app, event_type, publish_command
from hookline.cli.breaker import breaker
from hookline.cli.console import console_command
from hookline.cli.dlq import dlq
from hookline.cli.encryption import secrets_group
from hookline.cli.endpoint import endpoint
from hookline.cli.event import event
from hookline.cli.metrics import metrics_command
from hookline.cli.outbox import outbox
from hookline.cli.output import redacted, redis_failure
from hookline.cli.params import JsonParam
from hookline.cli.portal import portal_group
from hookline.cli.schedule import releaser, schedule
from hookline.cli.stats import stats
from hookline.cli.worker import worker_command
from hookline.core.config import ConfigError, settings
from hookline.core.endpoint import EndpointError
from hookline.core.errors import HooklineError
from hookline.core.policy import PolicyError
from hookline.store.endpoints import EndpointRegistry
from hookline.transport.errors import OperationalError

#: Errors whose message already says what to fix (every HooklineError: bad input naming its
#: field, bad settings, an unknown endpoint): shown as is.
INPUT_ERRORS = (HooklineError, EndpointError, WebhookInputError, ConfigError, PolicyError)
DEFAULT_TEST_PAYLOAD = '{"message": "test event from hookline"}'


class HooklineGroup(click.Group):
    """Turns Hookline's input errors and an unreachable Redis into one-line errors."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except INPUT_ERRORS as exc:
            raise click.ClickException(str(exc)) from None
        except redis.RedisError as exc:
            raise redis_failure(exc, settings().redis_url, "REDIS_URL") from None
        except OperationalError as exc:  # Celery could not publish to its broker
            raise click.ClickException(
                f"the Celery broker at {redacted(settings().broker_url)} (HOOKLINE_BROKER_URL, "
                f"default REDIS_URL) does not answer: {exc}"
            ) from None


@click.group(cls=HooklineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hookline")
def main() -> None:
    """Hookline: outbound webhook delivery on Celery and Redis.

    Configuration comes from the environment (REDIS_URL, HOOKLINE_BROKER_URL, HOOKLINE_*).
    """


main.add_command(endpoint)
main.add_command(dlq)
main.add_command(breaker)
main.add_command(schedule)
main.add_command(releaser)
main.add_command(outbox)
main.add_command(event)
main.add_command(metrics_command)
main.add_command(stats)
main.add_command(worker_command)
main.add_command(app)
main.add_command(publish_command)
main.add_command(secrets_group)
main.add_command(event_type)
main.add_command(console_command)
main.add_command(portal_group)


# -- send -----------------------------------------------------------------------------------


@main.command()
@click.argument("endpoint_id", metavar="ENDPOINT_ID")
@click.option("--type", "event_type", default="hookline.test", show_default=True,
              help="Event type.")
@click.option("--payload", type=JsonParam(), default=DEFAULT_TEST_PAYLOAD, show_default=True,
              help="Event data, as JSON.")
@click.option("--event-id", help="Event id (default: a new UUID); the idempotency key.")
def send(endpoint_id: str, event_type: str, payload: Any, event_id: str | None) -> None:
    """Enqueue a test event for ENDPOINT_ID and print its event id."""
    sent_id = send_webhook(endpoint_id, event_type, payload, event_id)
    click.echo(sent_id)
    target = EndpointRegistry().get(endpoint_id)
    if target is not None and not target.enabled:
        click.echo(f"warning: endpoint {endpoint_id!r} is disabled: the event will be "
                   "dead-lettered", err=True)

