"""The SSRF guard: its address rules without any allowlist, and the guard at work with a real
receiver on loopback (allowlisted for the tests, as HOOKLINE_ALLOWED_NETWORKS=127.0.0.0/8)."""

from __future__ import annotations

import ipaddress
import time
import uuid

import pytest

from examples.receiver import Reply, always
from hookline import send_webhook
from hookline.core.endpoint import Endpoint, EndpointError
from hookline.core.endpoint_validation import check_target
from hookline.core.ssrf import (
    TargetRefused,
    check_address,
    parse_networks,
    pin_address,
    why_refused,
)
from hookline.delivery.http import PinnedPools
from hookline.delivery.sender import WebhookEvent, send
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.dead_letter_queue import DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import wait_until


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
        ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
        ("100.64.0.1", "CGNAT"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
        ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("fd00::1", "private"),
        ("::ffff:10.0.0.1", "IPv4-mapped"), ("::ffff:8.8.8.8", "IPv4-mapped"),
        ("240.0.0.1", "address"), ("198.18.0.1", "private"), ("192.0.2.1", "private"),
        ("64:ff9b::a00:1", "address"),
    ],
)
def test_non_public_addresses_are_refused(address, kind):
    reason = why_refused(ipaddress.ip_address(address))
    assert reason is not None and kind in reason


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "93.184.216.34",
                                     "2606:4700:4700::1111"])
def test_public_addresses_pass(address):
    assert why_refused(ipaddress.ip_address(address)) is None
    check_address(ipaddress.ip_address(address))


def test_the_allowlist_lets_a_private_network_through_and_only_it():
    allowed = parse_networks("127.0.0.0/8, 10.20.0.0/16")
    check_address(ipaddress.ip_address("127.0.0.1"), allowed)
    check_address(ipaddress.ip_address("10.20.3.4"), allowed)
    with pytest.raises(TargetRefused, match="HOOKLINE_ALLOWED_NETWORKS"):
        check_address(ipaddress.ip_address("10.21.0.1"), allowed)
    with pytest.raises(ValueError, match="not a network"):
        parse_networks("10.0.0.0/33")


def test_a_name_is_refused_if_any_of_its_addresses_is_private():
    def resolve(host, port):
        return ["93.184.216.34", "10.0.0.7"]

    with pytest.raises(TargetRefused, match=r"shop\.example resolves to 10\.0\.0\.7"):
        pin_address("shop.example", 443, resolve=resolve)


def test_a_name_resolving_to_loopback_is_refused_without_the_allowlist():
    with pytest.raises(TargetRefused, match="loopback"):
        pin_address("localhost", 80)


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/",
                                 "http://10.0.0.1/hook", "http://[::ffff:127.0.0.1]/",
                                 "http://192.168.0.10:8080/"])
def test_private_and_metadata_urls_are_refused_when_an_endpoint_is_added(url):
    with pytest.raises(EndpointError, match="url refused"):
        EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:6]}", url)


def test_https_only_refuses_http_at_registration(monkeypatch):
    from hookline.core import config

    monkeypatch.setattr(config, "_configured",
                        config.load_settings({**config.os.environ,
                                              "HOOKLINE_HTTPS_ONLY": "true"}))
    with pytest.raises(EndpointError, match="HTTPS_ONLY"):
        check_target("http://127.0.0.1:9/hook")
    assert check_target("https://127.0.0.1:9/hook")


def test_the_connection_goes_to_the_address_that_was_checked(receiver):
    """DNS rebinding: the guard resolves once; a second answer (private) is never used."""
    receiver.route("/pinned", always(Reply(204)))
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])
    lookups = []

    def rebinding(host, port):
        lookups.append(host)
        return next(answers)

    from hookline.delivery import sender

    original = sender.pools()
    sender._local.pools = PinnedPools(resolve=rebinding)
    try:
        endpoint = Endpoint(id="pinned", url=f"http://rebind.test:{receiver.port}/pinned",
                            secrets=(EndpointRegistry().add("k", "http://127.0.0.1:9/").secrets))
        result = send(endpoint, WebhookEvent("evt-pin", "t", {}, time.time()))
    finally:
        sender._local.pools = original
    assert result.status == 204 and lookups == ["rebind.test"]
    [request] = receiver.requests_to("/pinned")
    assert request.headers["host"] == f"rebind.test:{receiver.port}"


def test_a_target_refused_at_send_time_is_dead_lettered_as_refused(receiver, worker):
    endpoint = EndpointRegistry().add("sneaky", receiver.route("/sneaky", always(Reply(204))))
    # The URL changed behind the registry's back (or the allowlist shrank): the send-time
    # check refuses what the registration check would have.
    store.client().hset(keys.endpoint_key("sneaky"), "url", "http://10.1.1.1/internal")
    event_id = send_webhook(endpoint.id, "order.created", {})
    entry = wait_until(lambda: DeadLetterQueue().get(f"sneaky/{event_id}"))
    assert (entry.reason, entry.attempts) == ("refused", 1)
    assert entry.last_error.startswith("refused: 10.1.1.1 is a private address")
    assert receiver.received == []


def test_a_receiver_trickling_its_headers_cannot_hold_a_worker_past_the_attempt_budget(
        receiver):
    endpoint = Endpoint(id="slow", url=receiver.route("/trickle", always(Reply(action="trickle"))),
                        secrets=EndpointRegistry().add("k2", "http://127.0.0.1:9/").secrets)
    started = time.monotonic()
    result = send(endpoint, WebhookEvent("evt-trickle", "t", {}, time.time()))
    elapsed = time.monotonic() - started
    # Test settings: connect 1 s + 2 x read 1 s = 3 s in all, though every byte came in time.
    assert result.status is None and result.error.startswith("attempt_timeout")
    assert 2.9 <= elapsed < 4.5
