"""Secret rotation: the new secret signs at once, the old one keeps signing for the overlap,
then drops out; secrets never show outside the moment they are made."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from standardwebhooks import Webhook

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.cli import main
from hookline.core.endpoint import EndpointError
from hookline.store import connection as store
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


def deliver_one(receiver, endpoint_id: str):
    event_id = send_webhook(endpoint_id, "order.created", {"n": 1})
    wait_until(lambda: Gate().is_delivered(endpoint_id, event_id))
    return next(r for r in receiver.received if r.webhook_id == event_id)


def test_both_secrets_sign_during_the_overlap_then_only_the_new_one(receiver):
    registry = EndpointRegistry()
    endpoint = registry.add("rotating", receiver.route("/rotating", always(Reply(204))))
    old = endpoint.secrets[0]
    rotated, new = registry.rotate_secret("rotating", overlap=3600)
    assert rotated.secrets == (new, old)
    request = deliver_one(receiver, "rotating")
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    Webhook(old).verify(request.body, request.headers)  # a receiver not yet switched
    Webhook(new).verify(request.body, request.headers)  # a receiver already switched

    registry.rotate_secret("rotating", overlap=0)  # the overlap ends at once
    latest = registry.require("rotating").secrets[0]
    request = deliver_one(receiver, "rotating")
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    Webhook(latest).verify(request.body, request.headers)
    with pytest.raises(Exception, match="signature"):
        Webhook(new).verify(request.body, request.headers)
    assert old not in registry.require("rotating").secrets  # expired secrets are removed


def test_rotate_secret_command_shows_the_new_secret_once_and_nowhere_else():
    runner = CliRunner()
    added = runner.invoke(main, ["endpoint", "add", "cli-rot", "--url", "http://127.0.0.1:9/"])
    assert added.exit_code == 0
    result = runner.invoke(main, ["endpoint", "rotate-secret", "cli-rot", "--overlap", "60"])
    assert result.exit_code == 0, result.output
    new = next(line.split(": ", 1)[1] for line in result.output.splitlines()
               if line.startswith("new signing secret"))
    assert EndpointRegistry().require("cli-rot").secrets[0] == new
    shown = runner.invoke(main, ["endpoint", "show", "cli-rot", "--json"]).output
    listed = runner.invoke(main, ["endpoint", "list", "--json"]).output
    for secret in EndpointRegistry().require("cli-rot").secrets:
        assert secret not in shown and secret not in listed
        assert secret.removeprefix("whsec_") not in shown
    assert len(json.loads(shown)["secrets"]) == 2


def test_rotation_refuses_a_reused_secret_and_a_bad_overlap():
    registry = EndpointRegistry()
    endpoint = registry.add("strict", "http://127.0.0.1:9/")
    with pytest.raises(EndpointError, match="already"):
        registry.rotate_secret("strict", secret=endpoint.secrets[0])
    with pytest.raises(EndpointError, match="overlap"):
        registry.rotate_secret("strict", overlap=-1)


def test_secrets_never_travel_in_task_messages(receiver, published):
    endpoint = EndpointRegistry().add("quiet", receiver.route("/quiet", always(Reply(204))))
    send_webhook("quiet", "order.created", {"n": 1})
    raw = json.dumps(published.events) + json.dumps(store.client().lrange("hookline", 0, -1))
    assert endpoint.secrets[0] not in raw and endpoint.url not in raw
