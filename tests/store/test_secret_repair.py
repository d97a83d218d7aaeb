"""The documented repair of a sealed secret that does not open (damaged, or copied from another
endpoint or field): ``update_endpoint(secret=...)`` and ``rotate_secret`` replace it, say so,
audit it and make the deliveries held for it due now, on a real Redis with no worker (the same
with a worker, a receiver and the CLI: tests/integration/test_encryption_at_rest.py).

Everything else that does not open is still refused with the sealing message: another field,
a key not held, any other action."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from hookline.core import config, sealing
from hookline.core.endpoint import Endpoint, SealedRecordError, generate_secret
from hookline.delivery.engine import Deferred, DeliveryEngine, DeliveryRequest, Finished
from hookline.delivery.sender import AttemptResult, WebhookEvent
from hookline.service import audit, endpoint_actions
from hookline.service.actor import Actor
from hookline.store import keys
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import DUE_KEY, RetrySchedule
from tests.conftest import isolated_url

KEY, OTHER_KEY = sealing.generate_key(), sealing.generate_key()
OPERATOR = Actor("alice", "session-1")
DAMAGED = "do not decrypt with key"


def use_keys(*keyring: str) -> None:
    url = isolated_url(3)
    config.configure({"REDIS_URL": url, "HOOKLINE_BROKER_URL": url,
                      "HOOKLINE_ENCRYPTION_KEYS": ",".join(keyring)})


@pytest.fixture
def sealed(quiet_redis: redis.Redis) -> Iterator[redis.Redis]:
    """``src`` and ``dst`` sealed with KEY, and ``src``'s sealed secrets copied into ``dst``
    (the "copied" damage: the right key, bound to another endpoint)."""
    use_keys(KEY)
    registry = EndpointRegistry()
    registry.add("src", "http://127.0.0.1:9/src")
    registry.add("dst", "http://127.0.0.1:9/dst", headers={"X-Api-Key": "k-1"})
    copy_field(quiet_redis, "secrets")
    yield quiet_redis


def copy_field(client: redis.Redis, field: str, source: str = "src") -> None:
    client.hset(keys.endpoint_key("dst"), field, client.hget(keys.endpoint_key(source), field))


def held_delivery(schedule: RetrySchedule) -> str:
    """One delivery to ``dst`` run through the engine (deferred: its secrets do not open) and
    parked as the worker parks a deferral; its retry id."""
    request = DeliveryRequest(endpoint_id="dst", event_type="order.paid", payload={"n": 1},
                              event_id=f"evt-{uuid.uuid4().hex[:8]}")
    deferred = DeliveryEngine(sender=lambda *_: pytest.fail("sent")).attempt(
        request, token=uuid.uuid4().hex)
    assert isinstance(deferred, Deferred) and deferred.reason == "secrets_unreadable"
    assert 30 <= deferred.countdown <= 35
    schedule.park(endpoint_id="dst", event_id=request.event_id, countdown=deferred.countdown,
                  message=f"message of {request.event_id}")
    return f"dst/{request.event_id}"


def due_in(client: redis.Redis, retry_id: str) -> float:
    """Seconds until the retry is due (negative: due already), on Redis time."""
    seconds, micros = client.time()
    return (float(client.zscore(DUE_KEY, retry_id) or 0) / 1000
            - (int(seconds) + int(micros) / 1e6))


def last_audit_detail() -> str:
    return audit.recent(OPERATOR, limit=1).items[0].detail


def test_update_with_a_secret_replaces_a_copied_one_and_releases_its_held_deliveries(sealed):
    schedule = RetrySchedule()
    held = [held_delivery(schedule) for _ in range(3)]
    backoff = "dst/own-backoff"
    schedule.park(endpoint_id="dst", event_id="own-backoff", countdown=600, message="m")
    with pytest.raises(SealedRecordError, match=DAMAGED):
        endpoint_actions.update_endpoint(OPERATOR, "dst", timeout=2.0)  # not a repair
    secret = generate_secret()
    updated = endpoint_actions.update_endpoint(OPERATOR, "dst", secret=secret)
    assert (updated.repaired, updated.released) == (True, 3)
    assert EndpointRegistry().require("dst").secrets == (secret,)
    assert EndpointRegistry().require("dst").headers == {"X-Api-Key": "k-1"}  # kept
    assert all(due_in(sealed, retry_id) <= 0 for retry_id in held)
    assert due_in(sealed, backoff) > 590  # a retry's own backoff is not brought forward
    assert last_audit_detail() == ("secret; replaced an unreadable sealed secret, "
                                   "3 held deliveries due")
    # Once repaired, a new secret is an ordinary update.
    again = endpoint_actions.update_endpoint(OPERATOR, "dst", secret=generate_secret())
    assert (again.repaired, again.released) == (False, 0)
    assert last_audit_detail() == "secret"


def test_rotate_secret_replaces_a_copied_one_keeping_none_and_releases_held(sealed):
    schedule = RetrySchedule()
    held = held_delivery(schedule)
    rotated = endpoint_actions.rotate_secret(OPERATOR, "dst", overlap=3600)
    assert (rotated.repaired, rotated.released) == (True, 1)
    assert rotated.previous_until == []  # nothing of the copied value to keep signing
    assert EndpointRegistry().require("dst").secrets == (rotated.secret,)
    assert due_in(sealed, held) <= 0
    assert last_audit_detail() == ("signature hmac, overlap 3600s; replaced an unreadable "
                                   "sealed secret, 1 held deliveries due")
    # The engine admits the endpoint's deliveries again, signed with the new secret.
    signed: list[str] = []

    def sender(endpoint: Endpoint, event: WebhookEvent) -> AttemptResult:
        signed.extend(endpoint.signing_secrets())
        return AttemptResult(status=204, latency=0.01)

    request = DeliveryRequest(endpoint_id="dst", event_type="order.paid", payload={"n": 2},
                              event_id="after-repair")
    sent = DeliveryEngine(sender=sender).attempt(request, token=uuid.uuid4().hex)
    assert isinstance(sent, Finished) and sent.outcome == "delivered"
    assert signed == [rotated.secret]


def test_what_else_does_not_open_is_still_refused(sealed):
    def repairs() -> list[Callable[[], object]]:
        return [lambda: endpoint_actions.rotate_secret(OPERATOR, "dst"),
                lambda: endpoint_actions.update_endpoint(OPERATOR, "dst",
                                                         secret=generate_secret())]

    copy_field(sealed, "headers")  # the headers copied too: a new secret does not mend them
    for repair in repairs():
        with pytest.raises(SealedRecordError, match=f"headers of endpoint 'dst' {DAMAGED}"):
            repair()
    # Sealed with a key this process does not hold: no damage (the fix is the key).
    use_keys(OTHER_KEY)
    EndpointRegistry().add("elsewhere", "http://127.0.0.1:9/elsewhere")
    use_keys(KEY)
    sealed.hset(keys.endpoint_key("dst"), "headers", "{}")
    copy_field(sealed, "secrets", source="elsewhere")
    for repair in repairs():
        with pytest.raises(SealedRecordError, match="HOOKLINE_ENCRYPTION_KEYS does not hold"):
            repair()
    assert all("unreadable" not in entry.detail
               for entry in audit.recent(OPERATOR, limit=50).items)
