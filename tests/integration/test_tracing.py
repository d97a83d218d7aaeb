"""OpenTelemetry traces end to end: a traced web process (its SDK set up in code) sends an
event, a real worker run under ``opentelemetry-instrument`` (the standard ``OTEL_*`` variables,
OTLP over HTTP to a collector on loopback) delivers it to a real receiver that fails twice and
then answers 204. One trace: the request's span, Hookline's producer span, a task span per run
and a CLIENT span per attempt, the retries linked to the first attempt; ``traceparent`` reaches
the receiver only at an endpoint with ``trace_context``. Under the Celery instrumentation, no
task span is doubled. An outbox row written in a request's trace is relayed into that trace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from examples.receiver import Receiver, Reply, fail_first, in_order
from hookline.core.endpoint import generate_secret
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import ROOT, TEST_ENV, isolated_url
from tests.support.otlp import Collector, Span

pytestmark = pytest.mark.integration
INSTRUMENT = shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent))
SECRET = generate_secret()


@pytest.fixture(autouse=True)
def quiet(quiet_redis) -> None:
    """A database no worker of the session consumes: only this test's traced worker runs
    its deliveries."""


QUIET_URL = isolated_url(3)  # quiet_redis's


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    yield running
    running.stop()


@pytest.fixture
def signed_receiver() -> Iterator[Receiver]:
    # Verifies every request's Standard Webhooks signature (401 otherwise): traceparent is
    # a header beside the signed content (id.timestamp.body).
    with Receiver(secret=SECRET) as running:
        yield running


def worker_env(collector: Collector, *, celery_instrumentation: bool) -> dict[str, str]:
    env = {**collector.environment("hookline-worker"), "REDIS_URL": QUIET_URL}
    if not celery_instrumentation:
        env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "celery"
    return env


def traced_web(collector: Collector, *args: str, **extra: str) -> dict:
    env = {**os.environ, **TEST_ENV, **extra, "REDIS_URL": QUIET_URL,
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.endpoint}
    done = subprocess.run([sys.executable, "-m", "tests.support.traced_web", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def of_event(spans: list[Span], event_id: str, kind: str) -> list[Span]:
    return [s for s in spans if s.kind == kind and s.attributes.get("hookline.event.id")
            == event_id]


def by_attempt(spans: list[Span]) -> list[Span]:
    return sorted(spans, key=lambda s: s.attributes["hookline.attempt"])


def header(received, name: str) -> str | None:
    return {key.lower(): value for key, value in received.headers.items()}.get(name)


def add_endpoints(receiver: Receiver) -> None:
    registry = EndpointRegistry()
    for name, traced in (("traced", True), ("untraced", False)):
        # A query string (a token) that no span may show.
        receiver.route(f"/{name}?token=hush", fail_first(2, Reply(500)))
        registry.add(name, receiver.url(f"/{name}?token=hush"), secret=SECRET,
                     trace_context=traced)


@pytest.mark.skipif(INSTRUMENT is None, reason="opentelemetry-instrument is not installed")
def test_one_trace_from_the_request_to_every_attempt(collector, signed_receiver,
                                                     start_worker) -> None:
    add_endpoints(signed_receiver)
    assert INSTRUMENT is not None
    start_worker("otel", wrapper=(INSTRUMENT,),
                 extra_env=worker_env(collector, celery_instrumentation=False))
    sent = traced_web(collector, "send", "traced", "untraced")
    trace_id, (traced, untraced) = sent["trace_id"], sent["events"]
    assert signed_receiver.wait_for(lambda got: len(got) == 6 and all(
        r.status in (500, 204) for r in got))

    def complete(spans: list[Span]) -> bool:
        return all(len(of_event(spans, event, "CLIENT")) == 3 and
                   len(of_event(spans, event, "CONSUMER")) == 3 for event in sent["events"])

    spans = collector.wait_for(complete)
    assert complete(spans), spans
    request = next(s for s in spans if s.name == "POST /orders")
    for event, endpoint in ((traced, "traced"), (untraced, "untraced")):
        producer = of_event(spans, event, "PRODUCER")
        assert len(producer) == 1 and producer[0].parent_id == request.span_id
        assert producer[0].name == "send hookline"
        tasks = of_event(spans, event, "CONSUMER")
        clients = by_attempt(of_event(spans, event, "CLIENT"))
        assert {s.trace_id for s in [*producer, *tasks, *clients]} == {trace_id}
        # Every run of the task is a child of the producer's context, carried by the retries.
        assert {s.parent_id for s in tasks} == {producer[0].span_id}
        assert {s.name for s in tasks} == {"process hookline.deliver"}
        assert sorted(s.attributes["hookline.outcome"] for s in tasks) == [
            "delivered", "retry_scheduled", "retry_scheduled"]
        assert {c.parent_id for c in clients} == {t.span_id for t in tasks}
        first = clients[0]
        assert [c.attributes["http.response.status_code"] for c in clients] == [500, 500, 204]
        assert [c.attributes.get("error.type") for c in clients] == ["500", "500", None]
        assert [c.attributes["hookline.outcome"] for c in clients] == [
            "retry", "retry", "delivered"]
        assert first.name == "POST"
        assert first.attributes["http.request.method"] == "POST"
        assert first.attributes["server.address"] == "127.0.0.1"
        assert first.attributes["server.port"] == signed_receiver.port
        assert first.attributes["url.full"] == signed_receiver.url(f"/{endpoint}")
        assert first.attributes["hookline.endpoint.id"] == endpoint
        assert not any("hush" in str(value) for s in spans for value in s.attributes.values())
        # The retries link back to the first attempt's span (and their task spans too).
        assert first.links == []
        assert [c.links for c in clients[1:]] == [[(trace_id, first.span_id)]] * 2
        linked_tasks = [t for t in tasks if t.links]
        assert len(linked_tasks) == 2
        assert all(t.links == [(trace_id, first.span_id)] for t in linked_tasks)
        received = signed_receiver.requests_to(f"/{endpoint}?token=hush")
        assert [r.status for r in received] == [500, 500, 204]  # every signature verified
        if endpoint == "traced":
            parents = [header(r, "traceparent") for r in received]
            assert [p.split("-")[1] for p in parents] == [trace_id] * 3
            assert [p.split("-")[2] for p in parents] == [c.span_id for c in clients]
        else:
            assert [header(r, "traceparent") for r in received] == [None] * 3


@pytest.mark.skipif(INSTRUMENT is None, reason="opentelemetry-instrument is not installed")
def test_under_the_celery_instrumentation_no_task_span_is_doubled(collector, signed_receiver,
                                                                   start_worker) -> None:
    add_endpoints(signed_receiver)
    assert INSTRUMENT is not None
    start_worker("otelcelery", wrapper=(INSTRUMENT,),
                 extra_env=worker_env(collector, celery_instrumentation=True))
    sent = traced_web(collector, "send", "traced")
    trace_id, (event,) = sent["trace_id"], sent["events"]

    def complete(spans: list[Span]) -> bool:
        return len(of_event(spans, event, "CLIENT")) == 3 and len(
            [s for s in spans if s.trace_id == trace_id and s.kind == "CONSUMER"]) == 3

    spans = collector.wait_for(complete)
    assert complete(spans), spans
    worker_spans = [s for s in spans if s.service == "hookline-worker"]
    tasks = [s for s in worker_spans if s.kind == "CONSUMER"]
    # One task span per run: the instrumentation's, with Hookline's attributes on it.
    assert len(tasks) == 3
    assert {s.name for s in tasks} == {"run/hookline.deliver"}
    assert {s.trace_id for s in worker_spans} == {trace_id}
    assert all(s.attributes["hookline.event.id"] == event for s in tasks)
    clients = by_attempt(of_event(spans, event, "CLIENT"))
    assert {c.parent_id for c in clients} == {t.span_id for t in tasks}
    assert [c.links for c in clients[1:]] == [[(trace_id, clients[0].span_id)]] * 2
    producer = of_event(spans, event, "PRODUCER")
    assert {t.parent_id for t in tasks} == {producer[0].span_id}


@pytest.mark.skipif(INSTRUMENT is None, reason="opentelemetry-instrument is not installed")
def test_an_outbox_row_is_relayed_into_the_trace_that_wrote_it(collector, signed_receiver,
                                                                start_worker,
                                                                tmp_path) -> None:
    signed_receiver.route("/traced", lambda attempt: Reply(204))
    EndpointRegistry().add("traced", signed_receiver.url("/traced"), secret=SECRET,
                           trace_context=True)
    database = f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    sent = traced_web(collector, "outbox", database, "traced")
    trace_id, (event,) = sent["trace_id"], sent["events"]
    assert INSTRUMENT is not None
    start_worker("otelrelay", wrapper=(INSTRUMENT,),
                 extra_env={**worker_env(collector, celery_instrumentation=False),
                            "HOOKLINE_OUTBOX": "on", "HOOKLINE_OUTBOX_URL": database})
    # A span is exported when it ends, in the batch of its time: the task's span ends after
    # its attempt's, and may come in a later batch. Wait for both.
    spans = collector.wait_for(lambda found: all(
        len(of_event(found, event, kind)) == 1 for kind in ("CLIENT", "CONSUMER")))
    (client,) = of_event(spans, event, "CLIENT")
    (written,) = of_event(spans, event, "PRODUCER")
    (task,) = of_event(spans, event, "CONSUMER")
    assert written.name == "send hookline_outbox"
    assert {written.trace_id, task.trace_id, client.trace_id} == {trace_id}
    assert task.parent_id == written.span_id and client.parent_id == task.span_id
    (received,) = signed_receiver.requests_to("/traced")
    assert header(received, "traceparent").split("-")[1] == trace_id


@pytest.mark.skipif(INSTRUMENT is None, reason="opentelemetry-instrument is not installed")
def test_a_replayed_dead_letter_links_to_the_event_s_first_attempt(collector, signed_receiver,
                                                                   start_worker) -> None:
    # A retry (500), then a rejection (400: dead-lettered), then, replayed from the command
    # line (untraced, as an operator's shell is), a delivery.
    signed_receiver.route("/replayed", in_order(Reply(500), Reply(400), then=Reply(204)))
    EndpointRegistry().add("replayed", signed_receiver.url("/replayed"), secret=SECRET)
    assert INSTRUMENT is not None
    start_worker("otelreplay", wrapper=(INSTRUMENT,),
                 extra_env=worker_env(collector, celery_instrumentation=False))
    sent = traced_web(collector, "send", "replayed")
    trace_id, (event,) = sent["trace_id"], sent["events"]
    spans = collector.wait_for(lambda found: len(of_event(found, event, "CLIENT")) == 2)
    first, rejected = by_attempt(of_event(spans, event, "CLIENT"))
    assert rejected.attributes["hookline.outcome"] == "rejected"
    replay = subprocess.run(
        [str(Path(sys.executable).with_name("hookline")), "dlq", "replay", "--endpoint",
         "replayed"], cwd=ROOT, env={**os.environ, **TEST_ENV, "REDIS_URL": QUIET_URL},
        capture_output=True, text=True, timeout=60)
    assert replay.returncode == 0, replay.stderr
    # The replay's task span ends after its attempt's, and may be exported in a later batch.
    spans = collector.wait_for(lambda found: len(of_event(found, event, "CLIENT")) == 3 and len(
        of_event(found, event, "CONSUMER")) == 3)
    clients = of_event(spans, event, "CLIENT")
    (delivered,) = [c for c in clients if c.attributes["hookline.outcome"] == "delivered"]
    # The replay is the operator's act, in a trace of its own, linked to the first attempt.
    assert delivered.links == [(trace_id, first.span_id)]
    (task,) = [t for t in of_event(spans, event, "CONSUMER") if t.span_id == delivered.parent_id]
    assert task.links == [(trace_id, first.span_id)]
    assert [r.status for r in signed_receiver.requests_to("/replayed")] == [500, 400, 204]
