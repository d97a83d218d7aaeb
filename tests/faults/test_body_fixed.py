"""The body is fixed once, at publish: a worker killed with SIGKILL in the middle of attempts
(the receiver has the requests, the answers never come back) and a new worker that takes the
redelivered messages send byte-for-byte the same bodies. Before, the body's ``timestamp`` was
the attempt's time, so the redelivered body differed.

Own Redis database (12), own workers, visibility timeout 15 s: the killed worker's messages
come back within the test."""

from __future__ import annotations

import signal
from collections import defaultdict
from collections.abc import Iterator

import pytest
import redis
from standardwebhooks import Webhook

import hookline.celeryconfig  # noqa: F401  (see the isolated fixture)
from examples.receiver import Reply
from hookline import deliver, send_webhook
from hookline.core import config
from hookline.store.delivery import delivered
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import flushed, isolated_url, wait_until

URL = isolated_url(12)
ENV = {"REDIS_URL": URL, "CELERY_VISIBILITY_TIMEOUT": "15"}


@pytest.fixture
def isolated() -> Iterator[redis.Redis]:
    """The test process publishes to database 12 too, so no other worker takes the events.
    ``hookline.celeryconfig`` was imported above, with the session's settings: it reads the
    broker once, at import, and the worker app of the test process (other tests publish
    through it) must not be left on database 12."""
    for client in flushed(URL):
        config.configure({"REDIS_URL": URL, "HOOKLINE_BROKER_URL": URL})
        try:
            yield client
        finally:
            config.configure()


def slow_first(attempt: int) -> Reply:
    """Each event's first request is answered after 0.8 s (the worker is dead by then);
    later ones at once."""
    return Reply(204, delay=0.8) if attempt == 1 else Reply(204)


def test_a_redelivery_after_sigkill_sends_the_same_body_bytes(isolated, receiver, start_worker):
    endpoint = EndpointRegistry(isolated).add("fixed", receiver.route("/fixed", slow_first))
    first = start_worker("fixed-1", concurrency=8, extra_env=ENV)
    event_ids = [deliver.delay(endpoint.id, "order.created", {"order": n, "note": "ünïcode"}).id
                 for n in range(3)]
    event_ids += [send_webhook(endpoint.id, "order.paid", {"order": n}) for n in range(3)]
    # Every event's first attempt is in flight at the receiver: kill the worker now.
    assert receiver.wait_for(lambda got: {r.webhook_id for r in got} >= set(event_ids), 20)
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(10)
    start_worker("fixed-2", concurrency=8, extra_env=ENV)

    def all_delivered() -> bool:
        return all(delivered(isolated, [(endpoint.id, event_id) for event_id in event_ids]))

    wait_until(all_delivered, timeout=60)
    bodies: dict[str, list[bytes]] = defaultdict(list)
    for request in receiver.requests_to("/fixed"):
        bodies[request.webhook_id].append(request.body)
        Webhook(endpoint.secrets[0]).verify(request.body, request.headers)
    assert set(bodies) == set(event_ids)
    for event_id in event_ids:
        sent = bodies[event_id]
        assert len(sent) == 2, (event_id, len(sent))  # the killed attempt, the redelivery
        assert sent[0] == sent[1], (event_id, sent)
