"""A stalled Redis hangs no caller and wedges no worker (issue 31, "Bounded waits").

A private redis-server is paused with SIGSTOP, as a stalled host or a network partition leaves
it: connections stay open and nothing answers. Every call a web process makes
(``send_webhook``, ``publish``, ``deliver.delay``, ``portal_link``, a console page) then
raises ``hookline.RedisUnavailable`` within ``HOOKLINE_REDIS_TIMEOUT`` plus a second, as it
does at once against a Redis that refuses connections; the Django example answers 503 in that
bound; and a worker facing a 20 s pause delivers again within seconds of SIGCONT, without a
restart.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import hookline
from examples.receiver import Receiver, Reply, always
from hookline.core import config
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from hookline.store.gates import Gate
from tests.conftest import ROOT, TEST_ENV, PrivateRedis, free_port, stop_process, wait_until
from tests.support.console import Browser, console

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="needs redis-server to start a private Redis")

#: HOOKLINE_REDIS_TIMEOUT in these tests (the default is 5 s), and the bound of every call.
TIMEOUT = 2.0
BOUND = TIMEOUT + 1.0
#: How long the worker's Redis is paused.
PAUSE = 20.0


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private Redis that this process's Hookline uses, with a 2 s Redis timeout."""
    server = PrivateRedis(tmp_path)
    server.start()
    config.configure({"REDIS_URL": server.url, "HOOKLINE_REDIS_TIMEOUT": str(TIMEOUT)})
    yield server
    if server.process is not None and server.process.poll() is None:
        server.process.send_signal(signal.SIGCONT)
    config.configure()
    server.stop()


@contextmanager
def paused(server: PrivateRedis) -> Iterator[None]:
    """``server`` stopped (SIGSTOP) for the block: its sockets stay open, nothing answers."""
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.process.send_signal(signal.SIGCONT)


def timed_failure(call: Callable[[], Any]) -> tuple[float, hookline.RedisUnavailable]:
    """How long ``call`` took to raise RedisUnavailable, and the exception."""
    started = time.monotonic()
    with pytest.raises(hookline.RedisUnavailable) as raised:
        call()
    return time.monotonic() - started, raised.value


CALLS: dict[str, Callable[[], Any]] = {
    "send_webhook": lambda: hookline.send_webhook("stall", "order.created", {"n": 1}),
    "publish": lambda: hookline.publish("shop", "order.created", {"n": 1}),
    "deliver.delay": lambda: hookline.deliver.delay("stall", "order.created", {"n": 1}),
    "portal_link": lambda: hookline.portal_link("shop"),
}


@pytest.fixture
def web_process(private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch) -> PrivateRedis:
    """An endpoint and an application in the private Redis, the portal's settings, and every
    call made once while Redis answers (so the connections a web process keeps are open)."""
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", "k" * 32)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", "https://hooks.example.com/portal")
    AppRegistry().add("shop")
    EndpointRegistry().add("stall", "http://127.0.0.1:9/stall", app="shop")
    for call in CALLS.values():
        call()
    return private_redis


@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_against_a_paused_redis_raises_within_the_timeout(web_process, name):
    with paused(web_process):
        took, error = timed_failure(CALLS[name])
    print(f"\n{name} against a paused Redis: RedisUnavailable after {took:.2f}s: {error}")
    assert took < BOUND
    message = str(error)
    assert "\n" not in message
    assert f"{web_process.url} did not answer within 2s (HOOKLINE_REDIS_TIMEOUT)" in message
    assert error.timeout == TIMEOUT
    assert isinstance(error, hookline.HooklineError)


@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_against_a_redis_that_refuses_connections_fails_at_once(web_process, name):
    web_process.stop()
    took, error = timed_failure(CALLS[name])
    print(f"\n{name} against a refused connection: RedisUnavailable after {took:.2f}s")
    assert took < 1.0
    assert "Connection refused (HOOKLINE_REDIS_TIMEOUT=2s)" in str(error)
    assert "\n" not in str(error)


def test_a_console_page_answers_503_within_the_timeout(web_process):
    browser = Browser(console())
    assert browser.get("/endpoints").status_code == 200
    with paused(web_process):
        started = time.monotonic()
        page = browser.get("/endpoints")
        took = time.monotonic() - started
    assert page.status_code == 503
    assert "did not answer within 2s" in page.get_data(as_text=True)
    assert took < BOUND


# -- the Django example (examples/django_project), served by runserver --------------------------


@pytest.fixture
def django_server(private_redis: PrivateRedis, tmp_path: Path) -> Iterator[str]:
    """The example project served on loopback against the private Redis; yields its URL."""
    EndpointRegistry().add("orders", "http://127.0.0.1:9/orders")
    env = {**os.environ, **TEST_ENV, "REDIS_URL": private_redis.url,
           "HOOKLINE_REDIS_TIMEOUT": str(TIMEOUT), "ORDERS_WEBHOOK_ENDPOINT": "orders",
           "ORDERS_DB_PATH": str(tmp_path / "orders.sqlite3"),
           "DJANGO_SETTINGS_MODULE": "examples.django_project.settings"}
    manage = [sys.executable, "-m", "examples.django_project.manage"]
    subprocess.run([*manage, "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True,
                   timeout=120)
    port = free_port()
    log = (tmp_path / "runserver.log").open("w")
    server = subprocess.Popen([*manage, "runserver", "--noreload", f"127.0.0.1:{port}"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: post_order(url)[0] == 201, timeout=60,
               what=lambda: (tmp_path / "runserver.log").read_text())
    yield url
    stop_process(server)
    log.close()


def post_order(url: str) -> tuple[int, dict[str, Any], float]:
    """POST /orders: the status, the JSON body and how long the answer took (599: none came
    within 30 s, or the server is not up yet)."""
    request = urllib.request.Request(f"{url}/orders", method="POST",
                                     data=b'{"customer": "ada", "total": "9.99"}',
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    except OSError:
        return 599, {}, time.monotonic() - started
    return status, json.loads(body or b"{}"), time.monotonic() - started


def test_the_django_example_answers_503_within_the_timeout(private_redis, django_server):
    with paused(private_redis):
        answers = [post_order(django_server) for _ in range(2)]
    for status, body, took in answers:
        print(f"\nPOST /orders with Redis paused: {status} after {took:.2f}s: {body['error']}")
        assert status == 503
        assert "did not answer within 2s (HOOKLINE_REDIS_TIMEOUT)" in body["error"]
        assert took < BOUND
    assert post_order(django_server)[0] == 201  # and once Redis answers again, orders go


# -- a worker ---------------------------------------------------------------------------------


def test_a_worker_delivers_again_within_seconds_of_a_20s_pause(private_redis, tmp_path,
                                                               receiver: Receiver,
                                                               start_worker):
    """Three attempts are waiting on a slow receiver when Redis stops: their settles fail or
    wait. After 20 s Redis goes on; a new event is delivered within 10 s of that, and the
    three are delivered too, by the same worker process."""
    registry, gate = EndpointRegistry(), Gate()
    endpoint = registry.add("fast", receiver.route("/fast", always(Reply(204))))
    slow = registry.add("slow", receiver.route("/slow", always(Reply(204, delay=2))))
    worker = start_worker("stalled", concurrency=4, extra_env={
        "REDIS_URL": private_redis.url, "HOOKLINE_READ_TIMEOUT": "5",
        "HOOKLINE_DLQ_SPOOL": str(tmp_path / "spool.jsonl")})
    first = hookline.send_webhook(endpoint.id, "order.created", {"n": 1})
    wait_until(lambda: gate.is_delivered(endpoint.id, first), timeout=20)
    held = [hookline.send_webhook(slow.id, "order.created", {"n": n}) for n in range(3)]
    assert receiver.wait_for(lambda _: receiver.in_flight["/slow"] >= 3, timeout=20)
    with paused(private_redis):
        time.sleep(PAUSE)  # the pause itself is what the worker faces
    resumed = time.monotonic()
    after = hookline.send_webhook(endpoint.id, "order.created", {"n": 2})
    wait_until(lambda: gate.is_delivered(endpoint.id, after), timeout=60,
               what=worker.output)
    took = time.monotonic() - resumed
    wait_until(lambda: all(gate.is_delivered(slow.id, event_id) for event_id in held),
               timeout=60, what=worker.output)
    print(f"\nafter a {PAUSE:g}s pause: a new event delivered {took:.1f}s after it ended, "
          f"the three in flight at the pause {time.monotonic() - resumed:.1f}s after")
    assert took < 10
    assert worker.process.poll() is None
