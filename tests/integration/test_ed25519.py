"""ed25519 endpoints (Standard Webhooks ``v1a``) end to end: the real worker signs with the
private key, the loopback receiver verifies with the public key the CLI printed, through
libsodium (PyNaCl, tests/support/signatures.py), independent of Hookline's ``cryptography``.
A move from HMAC to ed25519 under steady deliveries fails no verification: the receiver keeps
its old ``whsec_`` (the ``standardwebhooks`` library) until it switches to the ``whpk_``."""

from __future__ import annotations

import threading
import time

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from examples.receiver import Received, Reply, always
from hookline import send_webhook
from hookline.core.endpoint import generate_secret
from hookline.core.signing import public_key
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import wait_until
from tests.support.cli import fails, json_out, succeeds
from tests.support.endpoints import wait_delivered
from tests.support.signatures import verified_v1a

pytestmark = pytest.mark.usefixtures("worker")


def printed(output: str, label: str) -> str:
    """The value of the ``label: value`` line the command printed."""
    return next(line.split(": ", 1)[1] for line in output.splitlines()
                if line.startswith(label + ": "))


def kinds_signed(request: Received) -> list[str]:
    return [entry.split(",")[0] for entry in request.headers["webhook-signature"].split(" ")]


def test_an_ed25519_endpoints_deliveries_verify_with_the_printed_public_key(receiver):
    url = receiver.route("/signed", always(Reply(204)))
    added = succeeds("endpoint", "add", "signed", "--url", url, "--signature", "ed25519")
    public = printed(added.output, "public key")
    [private] = EndpointRegistry().require("signed").secrets
    event_id = send_webhook("signed", "order.created", {"order": 7})
    wait_delivered("signed", event_id)
    [request] = receiver.requests_to("/signed")
    assert kinds_signed(request) == ["v1a"]
    assert verified_v1a(public, request.headers, request.body) == 1
    assert verified_v1a(public, request.headers, request.body.replace(b"7", b"8")) == 0

    shown = succeeds("endpoint", "show", "signed").output
    as_json = json_out("endpoint", "show", "signed")
    assert public in shown and as_json["public_keys"] == [public]
    assert as_json["secret_kinds"] == ["ed25519"] and as_json["secrets"] == ["whsk_...****"]
    for output in (added.output, shown, str(as_json), succeeds("endpoint", "list").output):
        assert private.removeprefix("whsk_")[:42] not in output  # nor the seed's base64


def test_hmac_to_ed25519_under_deliveries_fails_no_verification(receiver):
    url = receiver.route("/moving", always(Reply(204)))
    secret = printed(succeeds("endpoint", "add", "moving", "--url", url).output,
                     "signing secret")
    sent: list[str] = []
    stop = threading.Event()

    def steady_load() -> None:
        while not stop.wait(0.02):  # a pace, not a wait for something
            sent.append(send_webhook("moving", "order.created", {"n": len(sent)}))

    loader = threading.Thread(target=steady_load)
    loader.start()
    try:
        wait_until(lambda: len(receiver.requests_to("/moving")) >= 10)
        rotated = succeeds("endpoint", "rotate-secret", "moving", "--signature", "ed25519",
                           "--overlap", "3600")
        public = printed(rotated.output, "new public key")
        # The receiver takes the public key once requests signed with it come in.
        wait_until(lambda: sum("v1a" in kinds_signed(r)
                               for r in receiver.requests_to("/moving")) >= 10)
        switched_at = time.time()
        wait_until(lambda: sum(r.at > switched_at for r in receiver.requests_to("/moving")) >= 10)
    finally:
        stop.set()
        loader.join()
    for event_id in sent:
        wait_delivered("moving", event_id)

    failed = []
    for request in receiver.requests_to("/moving"):
        try:
            if request.at <= switched_at:
                Webhook(secret).verify(request.body, request.headers)
            elif verified_v1a(public, request.headers, request.body) != 1:
                failed.append(request.webhook_id)
        except WebhookVerificationError:
            failed.append(request.webhook_id)
    assert failed == []
    signed = [kinds_signed(r) for r in receiver.requests_to("/moving")]
    assert ["v1"] in signed and ["v1a", "v1"] in signed  # before, and during the overlap
    assert {r.webhook_id for r in receiver.requests_to("/moving")} == set(sent)


def test_update_replaces_the_keys_at_once_and_rotation_keeps_the_kind():
    succeeds("endpoint", "add", "kinds", "--url", "http://127.0.0.1:9/")
    updated = succeeds("endpoint", "update", "kinds", "--signature", "ed25519",
                       "--timeout", "2")
    public = printed(updated.output, "new public key")
    endpoint = EndpointRegistry().require("kinds")
    assert [secret[:5] for secret in endpoint.secrets] == ["whsk_"] and endpoint.timeout == 2
    assert endpoint.secrets[0].removeprefix("whsk_")[:42] not in updated.output

    rotated = succeeds("endpoint", "rotate-secret", "kinds", "--overlap", "60")
    assert "new signing secret" not in rotated.output and "whsec_" not in rotated.output
    assert printed(rotated.output, "new public key") != public
    shown = json_out("endpoint", "show", "kinds")
    assert shown["secret_kinds"] == ["ed25519", "ed25519"]
    assert shown["public_keys"][1] == public and shown["secret_expires_at"][1]

    back = succeeds("endpoint", "update", "kinds", "--signature", "hmac")
    assert EndpointRegistry().require("kinds").secrets == (printed(back.output,
                                                                   "new signing secret"),)


def test_a_key_of_the_wrong_kind_is_refused_before_anything_changes():
    succeeds("endpoint", "add", "strict-kind", "--url", "http://127.0.0.1:9/a")
    before = EndpointRegistry().require("strict-kind")
    hmac = EndpointRegistry().add("other-kind", "http://127.0.0.1:9/").secrets[0]
    refused = fails("endpoint", "update", "strict-kind", "--url", "http://127.0.0.1:9/b",
                    "--signature", "ed25519", "--secret", hmac)
    assert "no ed25519 key" in refused.stderr and hmac not in refused.output
    assert EndpointRegistry().require("strict-kind") == before
    public = public_key(generate_secret("ed25519"))
    refused = fails("endpoint", "add", "pub", "--url", "http://127.0.0.1:9/", "--secret", public)
    assert "public key, which verifies but cannot sign" in refused.stderr
