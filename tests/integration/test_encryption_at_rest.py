"""Secrets encrypted at rest (HOOKLINE_ENCRYPTION_KEYS): nothing of a signing secret or a header
value is in Redis in any form, deliveries still verify, a key is rotated under load without a
missed delivery or a failed verification, and a worker refuses or reports what it cannot open.

Each test has a redis-server of its own (its whole keyspace is scanned) and its own workers.
"""

from __future__ import annotations

import base64
import random
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from standardwebhooks import Webhook

from examples.receiver import Reply, always
from hookline.core import config, sealing, signing
from hookline.core.endpoint import SECRET_PREFIX
from hookline.service import audit
from hookline.service.actor import cli_actor
from hookline.store import keys, sealed
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule
from tests.conftest import PrivateRedis, wait_until
from tests.support.cli import fails, succeeds
from tests.support.queue import delivered, enqueue
from tests.support.signatures import verified_v1a

KEY_1, KEY_2 = sealing.generate_key(), sealing.generate_key()


@pytest.fixture
def private(tmp_path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()
    config.configure()


def use_keys(server: PrivateRedis, *keyring: str) -> None:
    """This process's settings: the private Redis, and these keys (newest first)."""
    config.configure({"REDIS_URL": server.url, "HOOKLINE_BROKER_URL": server.url,
                      "HOOKLINE_ENCRYPTION_KEYS": ",".join(keyring)})


def worker_env(server: PrivateRedis, *keyring: str) -> dict[str, str]:
    return {"REDIS_URL": server.url, "HOOKLINE_ENCRYPTION_KEYS": ",".join(keyring)}


def known_secret(n: int) -> tuple[str, bytes]:
    raw = bytes(random.Random(n).getrandbits(8) for _ in range(32))
    return SECRET_PREFIX + base64.b64encode(raw).decode(), raw


def forms(value: str | bytes) -> list[bytes]:
    """A secret as it could sit in Redis: raw, base64 (both alphabets), hex."""
    raw = value.encode() if isinstance(value, str) else value
    return [raw, base64.b64encode(raw).rstrip(b"="), base64.urlsafe_b64encode(raw).rstrip(b"="),
            raw.hex().encode(), raw.hex().upper().encode()]


def everything_stored(url: str) -> bytes:
    """Every key's name and value in the server, whatever its type, as one blob."""
    client = redis.Redis.from_url(url)
    parts: list[bytes] = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        parts.append(key)
        if kind == "string":
            parts.append(client.get(key) or b"")
        elif kind == "hash":
            parts += [item for pair in client.hgetall(key).items() for item in pair]
        elif kind == "list":
            parts += client.lrange(key, 0, -1)
        elif kind == "set":
            parts += list(client.smembers(key))
        elif kind == "zset":
            parts += [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            parts += [item for _, entry in client.xrange(key)
                      for pair in entry.items() for item in pair]
    client.close()
    return b"\n".join(parts)


def found_in(blob: bytes, values: list[str | bytes]) -> list[bytes]:
    return [form for value in values for form in forms(value) if form in blob]


def verify_all(requests: list[Any], secrets: dict[str, str]) -> list[str]:
    """The webhook-ids of requests whose signature does not verify with their endpoint's
    secret (the standardwebhooks library, not Hookline's code)."""
    failed = []
    for request in requests:
        try:
            Webhook(secrets[request.path]).verify(request.body, request.headers)
        except Exception:
            failed.append(request.webhook_id)
    return failed


def test_no_secret_or_header_value_is_stored_in_any_form_and_deliveries_verify(
        private, receiver, start_worker):
    use_keys(private, KEY_1)
    registry = EndpointRegistry()
    secrets, raws, tokens = {}, [], []
    for n in range(3):
        secret, raw = known_secret(n)
        token = f"Bearer tok-{n}-{random.Random(n).getrandbits(64):x}"
        registry.add(f"sealed-{n}", receiver.route(f"/sealed-{n}", always(Reply(204))),
                     secret=secret, headers={"Authorization": token})
        secrets[f"/sealed-{n}"] = secret
        raws.append(raw)
        tokens.append(token)
    # And one endpoint signing with ed25519: its private key is a secret like the others.
    ed_key = signing.generate_signing_key(signing.ED25519)
    registry.add("sealed-ed", receiver.route("/sealed-ed", always(Reply(204))), secret=ed_key)
    ed_raw = base64.b64decode(ed_key.removeprefix(signing.PRIVATE_KEY_PREFIX))
    start_worker("sealed", extra_env=worker_env(private, KEY_1))
    client = redis.Redis.from_url(private.url, decode_responses=True)
    event_ids = {n: enqueue(client, f"sealed-{n}", 5, prefix=f"s{n}") for n in range(3)}
    ed_events = enqueue(client, "sealed-ed", 5, prefix="sed")
    wait_until(lambda: all(delivered(client, f"sealed-{n}", ids) == 5
                           for n, ids in event_ids.items())
               and delivered(client, "sealed-ed", ed_events) == 5)

    hmac_requests = [r for r in receiver.received if r.path != "/sealed-ed"]
    assert len(hmac_requests) == 15
    assert verify_all(hmac_requests, secrets) == []
    assert {r.headers["authorization"] for r in hmac_requests} == set(tokens)
    ed_requests = receiver.requests_to("/sealed-ed")
    assert len(ed_requests) == 5
    assert all(verified_v1a(signing.public_key(ed_key), r.headers, r.body) == 1
               for r in ed_requests)  # libsodium's check, not Hookline's
    stored = everything_stored(private.url)
    assert found_in(stored, [*secrets.values(), *raws, *tokens, ed_key, ed_raw, ed_raw[:32]]) == []

    # The scan finds what is there: the same endpoint stored without keys shows its secret.
    use_keys(private)
    control, _ = known_secret(99)
    registry.add("control", "http://127.0.0.1:9/control", secret=control,
                 headers={"Authorization": "Bearer control-token"})
    assert found_in(everything_stored(private.url), [control, "Bearer control-token"])


def test_a_worker_without_the_key_refuses_to_start_naming_the_setting(private, start_worker):
    use_keys(private, KEY_1)
    EndpointRegistry().add("needs-key", "http://127.0.0.1:9/needs-key")
    from tests.conftest import WorkerProcess

    for keyring in ((), (KEY_2,)):  # no key at all, and only another key
        process = WorkerProcess(f"keyless-{len(keyring)}",
                                extra_env=worker_env(private, *keyring))
        assert process.process.wait(60) != 0
        output = process.output()
        process.stop()
        assert "HOOKLINE_ENCRYPTION_KEYS" in output and "needs-key" in output, output
        assert " ready." not in output
        assert KEY_1 not in output


def test_a_worker_says_once_that_secrets_are_stored_in_plain_text(private, start_worker):
    use_keys(private)
    EndpointRegistry().add("plain", "http://127.0.0.1:9/plain")
    process = start_worker("plain", extra_env=worker_env(private))
    assert process.output().count("secrets.plain_text") == 1


def test_a_record_that_does_not_open_is_reported_and_never_sent(private, receiver, start_worker):
    use_keys(private, KEY_1)
    registry = EndpointRegistry()
    registry.add("intact", receiver.route("/intact", always(Reply(204))))
    registry.add("copied", receiver.route("/copied", always(Reply(204))))
    client = redis.Redis.from_url(private.url, decode_responses=True)
    # A's sealed secrets copied into B's record: the right key, but bound to A.
    client.hset(keys.endpoint_key("copied"), "secrets",
                client.hget(keys.endpoint_key("intact"), "secrets"))
    worker = start_worker("damaged", extra_env=worker_env(private, KEY_1))
    assert "secrets.unreadable" in worker.output() and "copied" in worker.output()

    intact = enqueue(client, "intact", 3, prefix="ok")
    copied = enqueue(client, "copied", 3, prefix="bad")
    wait_until(lambda: delivered(client, "intact", intact) == 3)
    wait_until(lambda: worker.output().count("delivery.secrets_unreadable") >= 3)
    wait_until(lambda: RetrySchedule(client).stats().total == 3)  # waiting, not lost
    assert receiver.requests_to("/copied") == []
    assert delivered(client, "copied", copied) == 0


@pytest.mark.parametrize("command", ["rotate-secret", "update --secret"])
def test_a_copied_secret_is_repaired_with_the_documented_command_and_the_held_go(
        private, receiver, start_worker, command):
    """docs/operations/encryption.md's repair, as an operator runs it: the held deliveries
    are sent at once (not at their next look, 30 s on) and verify with the new secret."""
    use_keys(private, KEY_1)
    registry = EndpointRegistry()
    registry.add("src", receiver.route("/src", always(Reply(204))))
    registry.add("dst", receiver.route("/dst", always(Reply(204))))
    client = redis.Redis.from_url(private.url, decode_responses=True)
    client.hset(keys.endpoint_key("dst"), "secrets",
                client.hget(keys.endpoint_key("src"), "secrets"))
    worker = start_worker("repair", extra_env=worker_env(private, KEY_1))
    held = enqueue(client, "dst", 5, prefix="held")
    wait_until(lambda: RetrySchedule(client).stats().by_endpoint.get("dst") == 5)
    assert worker.output().count("delivery.secrets_unreadable") >= 5
    assert receiver.requests_to("/dst") == []

    refused = fails("endpoint", "show", "dst")  # what every other command still says
    assert "do not decrypt with key" in refused.output
    if command == "rotate-secret":
        result = succeeds("endpoint", "rotate-secret", "dst")
        secret = result.stdout.split("new signing secret: ", 1)[1].split()[0]
    else:
        secret, _ = known_secret(7)
        result = succeeds("endpoint", "update", "dst", "--secret", secret)
    repaired = time.monotonic()
    assert ("replaced an unreadable sealed secret (damaged, or copied from another endpoint or "
            "field); 5 held deliveries due now") in result.stdout
    wait_until(lambda: delivered(client, "dst", held) == 5, timeout=15)
    assert time.monotonic() - repaired < 15  # released by the repair, not their next look
    requests = receiver.requests_to("/dst")
    assert sorted(r.webhook_id for r in requests) == held
    assert verify_all(requests, {"/dst": secret}) == []  # the standardwebhooks library
    entry = audit.recent(cli_actor(), limit=1).items[0]
    assert (entry.action, entry.target) == (
        "endpoint.rotate_secret" if command == "rotate-secret" else "endpoint.update", "dst")
    assert "replaced an unreadable sealed secret, 5 held deliveries due" in entry.detail
    assert secret not in entry.detail


def test_rotating_the_key_under_load_misses_no_delivery_and_fails_no_verification(
        private, receiver, start_worker):
    use_keys(private, KEY_1)
    registry = EndpointRegistry()
    secrets = {}
    for n in range(3):
        endpoint = registry.add(f"rot-{n}", receiver.route(f"/rot-{n}", always(Reply(204))),
                                headers={"X-Api-Key": f"key-{n}"})
        secrets[f"/rot-{n}"] = endpoint.secrets[0]
    client = redis.Redis.from_url(private.url, decode_responses=True)
    sent: list[tuple[str, str]] = []
    stop = threading.Event()

    def steady_load() -> None:
        batch = 0
        while not stop.wait(0.05):
            endpoint_id = f"rot-{batch % 3}"
            sent.extend((endpoint_id, event_id) for event_id in
                        enqueue(client, endpoint_id, 2, prefix=f"load{batch}"))
            batch += 1

    # Each step as an operator takes it: every process gets the new key before it seals
    # anything, the records move, and only then does the old key go.
    steps = [(KEY_1,), (KEY_1, KEY_2), (KEY_2, KEY_1), (KEY_2,)]
    workers = [start_worker("rot-0", extra_env=worker_env(private, *steps[0]))]
    loader = threading.Thread(target=steady_load)
    loader.start()
    try:
        for n, keyring in enumerate(steps[1:], start=1):
            wait_until(lambda step=n: len(receiver.received) >= 20 * step, timeout=30)
            use_keys(private, *keyring)
            if keyring == (KEY_2,):
                assert sealed.census().fields == {sealing.key_id(
                    sealing.parse_key(KEY_2, 1)): 6}  # nothing left on the old key
            workers.append(start_worker(f"rot-{n}", extra_env=worker_env(private, *keyring)))
            workers[-2].stop(signal.SIGTERM)
            if keyring == (KEY_2, KEY_1):
                assert sealed.reencrypt().moved == 6
        wait_until(lambda: len(receiver.received) >= 20 * len(steps), timeout=30)
    finally:
        stop.set()
        loader.join()
    by_endpoint: dict[str, list[str]] = {}
    for endpoint_id, event_id in sent:
        by_endpoint.setdefault(endpoint_id, []).append(event_id)
    wait_until(lambda: sum(delivered(client, endpoint_id, ids)
                           for endpoint_id, ids in by_endpoint.items()) == len(sent), timeout=60)
    assert verify_all(receiver.received, secrets) == []
    assert {r.webhook_id for r in receiver.received} == {event_id for _, event_id in sent}
    assert not any("secrets_unreadable" in worker.output() for worker in workers)
