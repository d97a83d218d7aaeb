"""Hostile input through every way in, one table per kind of input.

An event's fields go through each door that takes them: ``send_webhook``, the Flask and Django
helpers and ``hookline send`` refuse them with an error naming the field and enqueue nothing;
``hookline.deliver.delay()`` publishes them and the session worker ends them as a ``malformed``
dead letter that ``hookline event show`` finds by the event's own id; a replay of such a dead
letter leaves it in the queue and says why. An endpoint's fields go through the registry and
``hookline endpoint add`` / ``update``, which refuse them and leave the endpoint as it was.
Then the worker's own bad inputs: a bad Retry-After, a cut response, a malformed message.
(The pure checks alone: tests/unit/test_validation.py.)
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from examples.receiver import Receiver, Reply, always, fail_first
from hookline import WebhookInputError, deliver, send_webhook
from hookline.core import config
from hookline.core.endpoint import EndpointError
from hookline.core.errors import HooklineError
from hookline.store import connection as store
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterFilter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import wait_until
from tests.support.cli import run

pytestmark = pytest.mark.usefixtures("worker")

#: Stands for the test's own (valid, registered) endpoint in a table row.
ENDPOINT = object()


def nested(depth: int) -> Any:
    payload: Any = {"leaf": 1}
    for _ in range(depth - 1):
        payload = [payload]
    return payload


@dataclass(frozen=True)
class Event:
    """One hostile event: the fields as given (``ENDPOINT``: the test's endpoint; event id
    None: a fresh valid one), and what the refusal must name."""

    name: str
    names: str
    endpoint_id: Any = ENDPOINT
    event_type: Any = "order.created"
    payload: Any = None
    event_id: Any = None
    deadline: Any = None
    #: The payload as `hookline send --payload` takes it, when it differs from json.dumps.
    payload_text: str | None = None
    #: ``deliver.delay()`` refuses it at the call: it cannot even be encoded for the queue.
    refused_at_call: bool = False

    @property
    def field(self) -> str:
        """The field the refusal names (``WebhookInputError.field``)."""
        if self.endpoint_id is not ENDPOINT:
            return "endpoint_id"
        if self.event_type != "order.created":
            return "event_type"
        if self.event_id is not None:
            return "event_id"
        return "deadline" if self.deadline is not None else "payload"

    def fields(self, endpoint_id: str, event_id: str) -> tuple[Any, Any, Any, Any]:
        return (endpoint_id if self.endpoint_id is ENDPOINT else self.endpoint_id,
                self.event_type, {"n": 1} if self.payload is None else self.payload,
                event_id if self.event_id is None else self.event_id)


HOSTILE_EVENTS = [
    # identifiers
    Event("endpoint id with a trailing newline", "endpoint id", endpoint_id="shop-42\n"),
    Event("endpoint id with a header break", "endpoint id", endpoint_id="shop\r\nX-Evil: 1"),
    Event("endpoint id too long", "endpoint id", endpoint_id="e" * 65),
    Event("endpoint id of 100,000 characters", "endpoint id", endpoint_id="e" * 100_000),
    Event("endpoint id not a string", "endpoint id", endpoint_id=42),
    Event("event id with a trailing newline", "event id", event_id="evt-1\n"),
    Event("event id with a header break", "event id", event_id="evt\r\nX-Injected: yes"),
    Event("event id with a NUL", "event id", event_id="evt\x00"),
    Event("event id not ASCII", "event id", event_id="évènement-€"),
    Event("event id with a space", "event id", event_id="evt 1"),
    Event("event id too long", "event id", event_id="e" * 201),
    Event("event id of 100,000 characters", "event id", event_id="e" * 100_000),
    # text
    Event("event type forging a log line", "event type",
          event_type="order.created\n2026-01-01 ERROR delivery.succeeded forged=1"),
    Event("event type with a terminal escape", "event type", event_type="order\x1b[2Jcreated"),
    Event("event type with a line separator", "event type", event_type="order\u2028created"),
    Event("event type with a lone surrogate", "event type", event_type="order\udcffcreated"),
    Event("event type empty", "event type", event_type=""),
    Event("event type too long", "event type", event_type="t" * 201),
    # payload
    Event("payload over the size limit", "262144", payload={"blob": "x" * 300_000}),
    Event("payload nested 65 deep", "nested deeper than 64", payload=nested(65)),
    Event("payload nested 5,000 deep", "nested deeper than", payload=nested(5000),
          refused_at_call=True),
    Event("payload with a lone surrogate", "UTF-8", payload={"name": "ada\ud800"},
          payload_text='{"name": "ada\\ud800"}'),
    Event("payload with a lone surrogate in a key", "UTF-8", payload={"\udfff": 1},
          payload_text='{"\\udfff": 1}'),
    Event("payload with NaN", "not JSON-serialisable", payload={"total": math.nan},
          payload_text='{"total": NaN}'),
    # numbers
    Event("deadline NaN", "deadline", deadline=math.nan),
    Event("deadline infinite", "deadline", deadline=math.inf),
    Event("deadline in year 10^12", "deadline", deadline=1e20),
    Event("deadline in year 9999", "deadline", deadline="9999-12-31T23:59:59+00:00"),
    Event("deadline before 1970", "deadline", deadline=-86400),
    Event("deadline not a time", "deadline", deadline="next tuesday"),
]
EVENT_IDS = [case.name for case in HOSTILE_EVENTS]


@pytest.fixture(scope="module")
def quiet_receiver() -> Iterator[Receiver]:
    """One receiver for the module's hostile events (a receiver takes half a second to stop)."""
    with Receiver() as running:
        yield running


@pytest.fixture
def endpoint(quiet_receiver) -> Iterator[Any]:
    endpoint_id = f"ep-{uuid.uuid4().hex[:10]}"
    added = EndpointRegistry().add(endpoint_id, quiet_receiver.route(f"/{endpoint_id}",
                                                                     always(Reply(204))))
    yield added
    assert quiet_receiver.requests_to(f"/{endpoint_id}") == []  # nothing hostile was sent


def assert_names_field(error: BaseException | str, case: Event) -> None:
    message = str(error)
    assert case.names in message, message
    assert "\n" not in message and len(message) < 600, message  # quoted, escaped, bounded


# -- doors that refuse where the event enters ------------------------------------------------


@pytest.mark.parametrize("case", HOSTILE_EVENTS, ids=EVENT_IDS)
def test_send_webhook_refuses_naming_the_field(endpoint, published, case):
    endpoint_id, event_type, payload, event_id = case.fields(endpoint.id, f"evt-{uuid.uuid4()}")
    with pytest.raises(WebhookInputError) as refused:
        send_webhook(endpoint_id, event_type, payload, event_id, deadline=case.deadline)
    assert_names_field(refused.value, case)
    assert refused.value.field == case.field
    assert published.events == []


@pytest.mark.parametrize("case", HOSTILE_EVENTS, ids=EVENT_IDS)
def test_the_flask_helper_refuses_naming_the_field(endpoint, published, case):
    from flask import Flask

    from hookline.contrib.flask import Hookline

    webhooks = Hookline(Flask("bad_input"))
    endpoint_id, event_type, payload, event_id = case.fields(endpoint.id, f"evt-{uuid.uuid4()}")
    with pytest.raises(WebhookInputError) as refused:
        webhooks.send_webhook(endpoint_id, event_type, payload, event_id,
                              deadline=case.deadline)
    assert_names_field(refused.value, case)
    assert published.events == []


@pytest.mark.parametrize("case", HOSTILE_EVENTS, ids=EVENT_IDS)
def test_the_django_helper_refuses_at_the_call_naming_the_field(endpoint, published, case):
    from hookline.contrib.django import send_webhook_on_commit

    endpoint_id, event_type, payload, event_id = case.fields(endpoint.id, f"evt-{uuid.uuid4()}")
    with pytest.raises(WebhookInputError) as refused:
        send_webhook_on_commit(endpoint_id, event_type, payload, event_id,
                               deadline=case.deadline)
    assert_names_field(refused.value, case)
    assert published.events == []


CLI_EVENTS = [case for case in HOSTILE_EVENTS
              if case.deadline is None and not case.refused_at_call
              and (case.endpoint_id is ENDPOINT or isinstance(case.endpoint_id, str))]


@pytest.mark.parametrize("case", CLI_EVENTS, ids=[case.name for case in CLI_EVENTS])
def test_hookline_send_refuses_with_a_one_line_error(endpoint, published, case):
    endpoint_id, event_type, payload, event_id = case.fields(endpoint.id, f"evt-{uuid.uuid4()}")
    text = case.payload_text or json.dumps(payload)
    result = run("send", endpoint_id, "--type", event_type, "--payload", text,
                 "--event-id", event_id)
    assert result.exit_code in (1, 2), result.output  # an input error or a usage error
    assert isinstance(result.exception, SystemExit), result.exception  # never a traceback
    assert_names_field(result.output.strip().splitlines()[-1], case)
    assert published.events == []


def test_hookline_send_refuses_a_payload_too_deep_to_parse(endpoint, published):
    result = run("send", endpoint.id, "--payload", "[" * 100_000 + "]" * 100_000)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "payload is nested deeper than 64 levels" in result.output
    assert published.events == []


# -- deliver.delay(): the worker checks, and files a malformed dead letter -------------------


def event_show(event_id: str) -> dict[str, Any] | None:
    result = run("event", "show", event_id, "--json")
    return json.loads(result.stdout) if result.exit_code == 0 else None


@pytest.mark.parametrize("case", HOSTILE_EVENTS, ids=EVENT_IDS)
def test_deliver_delay_ends_as_a_malformed_dead_letter_found_by_its_event_id(endpoint, case):
    endpoint_id, event_type, payload, event_id = case.fields(endpoint.id, f"evt-{uuid.uuid4()}")
    if case.refused_at_call:
        with pytest.raises(HooklineError) as refused:
            deliver.delay(endpoint_id, event_type, payload, event_id, deadline=case.deadline)
        assert_names_field(refused.value, case)
        return
    deliver.delay(endpoint_id, event_type, payload, event_id, deadline=case.deadline)
    shown = wait_until(lambda: event_show(event_id))
    [delivery] = shown["deliveries"]
    entry = delivery["dead_letter"]
    assert delivery["state"] == "dead_lettered" and entry["reason"] == "malformed", shown
    assert case.names in entry["last_error"], entry
    expected_endpoint = endpoint.id if case.endpoint_id is ENDPOINT else "invalid"
    assert delivery["endpoint_id"] == expected_endpoint
    # the DLQ's own commands find it by the same id
    listed = run("dlq", "list", "--reason", "malformed", "--json")
    assert entry["id"] in {item["id"] for item in json.loads(listed.stdout)}
    assert run("dlq", "show", f"{expected_endpoint}/{event_id}").exit_code == 0


def test_the_worker_goes_on_after_hostile_deliveries(receiver):
    """Every hostile delivery above is one dead letter; the next good event is delivered."""
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {"ok": True})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 1


def test_a_dead_letter_log_line_cannot_be_forged(endpoint, worker):
    forged = "evt\n2026-01-01 INFO delivery.succeeded endpoint_id=victim"
    deliver.delay(endpoint.id, "order.created", {}, forged)
    wait_until(lambda: event_show(forged))

    def forged_lines() -> list[str]:
        return [line for line in worker.output().splitlines() if "delivery.succeeded" in line
                and "victim" in line]

    # The log line follows the dead letter's write: wait for it rather than read once.
    wait_until(forged_lines, timeout=10)
    lines = forged_lines()
    assert lines and all("delivery.dead_lettered" in line for line in lines), lines


# -- replay: a malformed dead letter stays where it is, with the reason ----------------------


REPLAYABLE = [case for case in HOSTILE_EVENTS if case.deadline is None
              and not case.refused_at_call and case.endpoint_id is ENDPOINT
              and not (isinstance(case.event_id, str) and len(case.event_id) > 1000)]


@pytest.mark.parametrize("case", REPLAYABLE, ids=[case.name for case in REPLAYABLE])
def test_replaying_a_malformed_dead_letter_refuses_it_and_keeps_it(endpoint, published, case):
    _, event_type, payload, event_id = case.fields(endpoint.id, f"evt-{uuid.uuid4()}")
    queue = DeadLetterQueue()
    entry = DeadLetter(endpoint_id=endpoint.id, event_id=event_id, event_type=event_type,
                       payload=payload, reason="malformed")
    queue.add(entry)
    result = run("dlq", "replay", "--reason", "malformed")
    assert result.exit_code == 0 and result.exception is None, result.output
    assert "replayed 0 dead letter(s)" in result.output
    refusal = [line for line in result.output.splitlines() if "not a valid event" in line]
    assert len(refusal) == 1 and case.names in refusal[0], result.output
    assert queue.get(entry.id) is not None
    assert published.events == []


def test_replaying_a_dead_letter_filed_under_an_invalid_endpoint_id_refuses_it():
    deliver.delay("shop\n", "order.created", {}, "evt-bad-endpoint")
    wait_until(lambda: event_show("evt-bad-endpoint"))
    result = run("dlq", "replay", "invalid/evt-bad-endpoint")
    assert "replayed 0" in result.output and "endpoint id was invalid" in result.output
    assert DeadLetterQueue().get("invalid/evt-bad-endpoint") is not None


# -- endpoint fields: the registry, endpoint add and endpoint update --------------------------


@dataclass(frozen=True)
class EndpointInput:
    name: str
    names: str
    endpoint_id: str = "shop-42"
    url: str = "http://127.0.0.1:9/hook"
    options: tuple[str, ...] = ()


HOSTILE_ENDPOINTS = [
    EndpointInput("id with a trailing newline", "endpoint id", endpoint_id="shop-42\n"),
    EndpointInput("id too long", "endpoint id", endpoint_id="e" * 65),
    EndpointInput("id with a space", "endpoint id", endpoint_id="shop 42"),
    EndpointInput("url with a trailing newline", "url", url="http://127.0.0.1:9/hook\n"),
    EndpointInput("url with a leading space", "url", url=" http://127.0.0.1:9/hook"),
    EndpointInput("url with a space in the host", "url", url="http://exa mple.com/hook"),
    EndpointInput("url with a space in the path", "url", url="http://example.com/a hook"),
    EndpointInput("url with a tab", "url", url="http://example.com/\thook"),
    EndpointInput("url with a NUL", "url", url="http://example.com/\x00"),
    EndpointInput("url with a CRLF", "url", url="http://example.com/\r\nX-Evil: 1"),
    EndpointInput("url with a backslash before @", "url",
                  url="http://169.254.169.254\\@example.com/"),
    EndpointInput("url with a percent-encoded host", "url", url="http://%31%32%37.0.0.1:9/"),
    EndpointInput("url with a non-ASCII host", "url", url="http://bücher.example/hook"),
    EndpointInput("url with a decimal IPv4 host", "url", url="http://2130706433:9/"),
    EndpointInput("url with credentials", "credentials", url="https://u:token@example.com/"),
    EndpointInput("url over 2048 characters", "2048",
                  url="https://example.com/" + "a" * 2100),
    EndpointInput("retry policy max_attempts a billion", "max_attempts",
                  options=("--retry-policy", '{"max_attempts": 1000000000}')),
    EndpointInput("retry policy max_attempts 1001", "max_attempts",
                  options=("--retry-policy", '{"max_attempts": 1001}')),
    EndpointInput("retry policy max_attempts true", "max_attempts",
                  options=("--retry-policy", '{"max_attempts": true}')),
    EndpointInput("retry policy multiplier 1e6", "multiplier",
                  options=("--retry-policy", '{"multiplier": 1e6}')),
    EndpointInput("retry policy multiplier below 1", "multiplier",
                  options=("--retry-policy", '{"multiplier": 0.5}')),
    EndpointInput("retry policy max_age 1e300", "max_age",
                  options=("--retry-policy", '{"max_age": 1e300}')),
    EndpointInput("retry policy max_age infinite", "max_age",
                  options=("--retry-policy", '{"max_age": Infinity}')),
    EndpointInput("retry policy jitter NaN", "jitter",
                  options=("--retry-policy", '{"jitter": NaN}')),
    EndpointInput("retry policy initial_backoff negative", "initial_backoff",
                  options=("--retry-policy", '{"initial_backoff": -1}')),
    EndpointInput("retry policy nested 100,000 deep", "retry policy is nested",
                  options=("--retry-policy", '{"a":' * 100_000 + "1" + "}" * 100_000)),
    EndpointInput("timeout NaN", "timeout", options=("--timeout", "nan")),
    EndpointInput("timeout infinite", "timeout", options=("--timeout", "inf")),
    EndpointInput("timeout negative", "timeout", options=("--timeout", "-1")),
    EndpointInput("burst 10^12", "burst", options=("--burst", "1000000000000")),
    EndpointInput("rate 10^11 per second", "rate", options=("--rate", "99999999999/s")),
]
ENDPOINT_IDS = [case.name for case in HOSTILE_ENDPOINTS]


def assert_one_line_error(result: Any, names: str) -> None:
    assert result.exit_code in (1, 2), result.output
    assert isinstance(result.exception, SystemExit), result.exception
    last = result.output.strip().splitlines()[-1]
    assert names in last and len(last) < 600, result.output


@pytest.mark.parametrize("case", HOSTILE_ENDPOINTS, ids=ENDPOINT_IDS)
def test_endpoint_add_refuses_naming_the_field(case):
    result = run("endpoint", "add", case.endpoint_id, "--url", case.url, *case.options)
    assert_one_line_error(result, case.names)
    assert EndpointRegistry().list() == []


@pytest.mark.parametrize("case", [case for case in HOSTILE_ENDPOINTS
                                  if case.endpoint_id == "shop-42"],
                         ids=[case.name for case in HOSTILE_ENDPOINTS
                              if case.endpoint_id == "shop-42"])
def test_endpoint_update_refuses_naming_the_field_and_changes_nothing(case):
    before = EndpointRegistry().add("shop-42", "http://127.0.0.1:9/hook")
    url = () if case.url == "http://127.0.0.1:9/hook" else ("--url", case.url)
    result = run("endpoint", "update", "shop-42", *url, *case.options)
    assert_one_line_error(result, case.names)
    assert EndpointRegistry().require("shop-42") == before


@pytest.mark.parametrize("case", [case for case in HOSTILE_ENDPOINTS if not case.options],
                         ids=[case.name for case in HOSTILE_ENDPOINTS if not case.options])
def test_the_registry_refuses_with_an_endpoint_error_naming_the_field(case):
    with pytest.raises(EndpointError) as refused:
        EndpointRegistry().add(case.endpoint_id, case.url)
    assert case.names in str(refused.value)


def test_endpoint_disable_refuses_a_reason_that_would_forge_a_log_line():
    EndpointRegistry().add("shop-42", "http://127.0.0.1:9/hook")
    result = run("endpoint", "disable", "shop-42", "--reason", "maintenance\nlevel=ERROR")
    assert_one_line_error(result, "reason")
    assert EndpointRegistry().require("shop-42").enabled


LOOPBACK_NAMES = ["localhost", "LOCALHOST", "api.localhost", "localhost.localdomain",
                  "ip6-localhost", "ip6-loopback", "localhost6"]


@pytest.fixture
def loopback_not_allowed() -> Iterator[None]:
    config.configure({"HOOKLINE_ALLOWED_NETWORKS": ""})
    yield
    config.configure()


@pytest.mark.parametrize("host", LOOPBACK_NAMES)
def test_localhost_names_are_refused_at_add_time_unless_loopback_is_allowed(host,
                                                                            loopback_not_allowed):
    result = run("endpoint", "add", "shop-42", "--url", f"http://{host}:8080/hook")
    assert_one_line_error(result, "names this machine")
    config.configure({"HOOKLINE_ALLOWED_NETWORKS": "10.0.0.0/8"})  # loopback still refused
    assert_one_line_error(run("endpoint", "add", "shop-42", "--url", f"http://{host}:8080/"),
                          "names this machine")
    config.configure({"HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8, ::1/128"})
    added = run("endpoint", "add", "shop-42", "--url", f"http://{host}:8080/")
    assert added.exit_code == 0, added.output


def test_endpoint_show_of_the_most_extreme_policy_answers_at_once():
    """It once computed the retry window one delay per allowed attempt (max_attempts 10^9
    spun a core for minutes); now max_attempts is bounded and the window summed in a few
    steps."""
    policy = json.dumps({"max_attempts": 1000, "multiplier": 1, "initial_backoff": 0.001,
                         "max_backoff": 3600, "max_age": 90 * 86400})
    assert run("endpoint", "add", "shop-42", "--url", "http://127.0.0.1:9/",
               "--retry-policy", policy).exit_code == 0
    started = time.monotonic()
    result = run("endpoint", "show", "shop-42")
    assert result.exit_code == 0 and time.monotonic() - started < 2, result.output
    assert "retry window" in result.output


# -- the worker's own bad inputs --------------------------------------------------------------


def new_endpoint(receiver, behaviour):
    endpoint_id = f"ep-{uuid.uuid4().hex[:10]}"
    return EndpointRegistry().add(endpoint_id, receiver.route(f"/{endpoint_id}", behaviour))


@pytest.mark.parametrize("value", ["soon", "-5", "Mon, 99 Foo 2023", "1.5"])
def test_an_invalid_retry_after_leaves_the_retry_to_the_policy(receiver, value):
    endpoint = new_endpoint(receiver, fail_first(1, Reply(503, headers={"Retry-After": value})))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
    first, second = receiver.requests_to(f"/{endpoint.id}")
    assert second.at - first.at < 1.5  # the policy's 0.2 s, not a block
    assert Gate().breaker_status(endpoint.id).blocked_until is None


def test_a_receiver_closing_mid_response_is_judged_by_its_status(receiver):
    endpoint = new_endpoint(receiver, always(Reply(200, body=b"partial body", action="cut")))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
    assert len(receiver.requests_to(f"/{endpoint.id}")) == 1


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"this is not json at all", "not a broker message"),
        (b'{"hello": "json, but not a kombu envelope"}', "not a broker message"),
        (b"[1, 2, 3]", "not a broker message"),
        (json.dumps({"body": "e30=", "headers": {"id": "t-unknown", "task": "no.such.task"},
                     "content-type": "application/json", "content-encoding": "utf-8",
                     "properties": {"delivery_tag": "x1", "body_encoding": "base64",
                                    "delivery_info": {"exchange": "", "routing_key": "hookline"},
                                    "priority": 0}}).encode(), "unknown task"),
    ],
)
def test_a_malformed_message_on_the_queue_is_kept_and_the_worker_goes_on(receiver, raw, problem):
    before = {entry.id for entry in DeadLetterQueue().find(DeadLetterFilter(reason="malformed"))}
    store.client().lpush("hookline", raw)
    entry = wait_until(lambda: next(
        (e for e in DeadLetterQueue().find(DeadLetterFilter(reason="malformed"))
         if e.id not in before), None))
    assert problem in entry.last_error
    if problem == "not a broker message":
        assert entry.payload == raw.decode()  # the item itself, kept as text
    wait_until(lambda: store.client().llen("hookline") == 0)  # removed once kept, not before
    endpoint = new_endpoint(receiver, always(Reply(204)))
    event_id = send_webhook(endpoint.id, "order.created", {})
    wait_until(lambda: Gate().is_delivered(endpoint.id, event_id))
