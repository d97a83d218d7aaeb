"""``hookline.store.connection.call_script``: the admit and settle scripts' lean call on a
plain Redis gives what redis-py's ``Script`` call gives, in every case that call handles: the
script not loaded, the connection dropped by the server, the script's own error; other clients
go through ``Script`` itself. On a Redis server of the test's own (it kills connections)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest
import redis

from hookline.store.connection import call_script
from tests.conftest import PrivateRedis

ECHO = "redis.call('INCR', KEYS[1]) return {KEYS[1], ARGV[1], redis.call('GET', KEYS[1])}"


@pytest.fixture
def own_redis(tmp_path) -> Iterator[redis.Redis]:
    server = PrivateRedis(tmp_path)
    client = server.start()
    try:
        yield client
    finally:
        client.close()
        server.stop()


def test_the_reply_is_the_scripts_and_runs_once(own_redis):
    script = own_redis.register_script(ECHO)
    assert call_script(script, ["k"], ["a"]) == ["k", "a", "1"]
    assert script(keys=["k"], args=["b"]) == ["k", "b", "2"]
    assert call_script(script, ["k"], [3]) == ["k", "3", "3"]


def test_a_flushed_script_is_loaded_again(own_redis):
    script = own_redis.register_script(ECHO)
    call_script(script, ["k"], ["a"])
    own_redis.script_flush()
    assert call_script(script, ["k"], ["a"]) == ["k", "a", "2"]


def test_a_connection_the_server_closed_is_replaced(own_redis):
    script = own_redis.register_script(ECHO)
    call_script(script, ["k"], ["a"])  # a connection now waits in the free list
    killed = own_redis.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    assert call_script(script, ["k"], ["a"]) == ["k", "a", "2"]
    assert call_script(script, ["k"], ["a"]) == ["k", "a", "3"]


def test_connections_the_server_closed_do_not_use_up_the_pools_limit(own_redis):
    """A dropped connection is kept, to reconnect on its next call, rather than thrown away
    while the pool still counts it: at each Redis restart a worker threw away one per busy
    thread, and the pool's count of connections made (its limit, max_connections) only grew,
    until, restarts later, every call would fail with "Too many connections"."""
    client = redis.Redis(connection_pool=redis.ConnectionPool(
        **own_redis.connection_pool.connection_kwargs, max_connections=3))
    script = client.register_script(ECHO)
    try:
        for n in range(1, 11):
            assert call_script(script, ["k"], ["a"]) == ["k", "a", str(n)]
            assert own_redis.client_kill_filter(_type="normal", skipme=True) >= 1
    finally:
        client.close()


def test_calls_that_timed_out_on_a_paused_redis_do_not_use_up_the_pools_limit(tmp_path):
    """The same for a Redis paused (SIGSTOP) past the read timeout: each call raises
    TimeoutError (never tried again), and once Redis goes on the calls go through, however
    many timed out before."""
    server = PrivateRedis(tmp_path)
    server.start().close()
    assert server.process is not None
    client = redis.Redis(connection_pool=redis.ConnectionPool.from_url(
        server.url, max_connections=2, socket_timeout=0.2, decode_responses=True))
    script = client.register_script(ECHO)
    try:
        assert call_script(script, ["k"], ["a"]) == ["k", "a", "1"]
        for _ in range(5):
            server.process.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(redis.TimeoutError):
                    call_script(script, ["k"], ["a"])
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert call_script(script, ["k"], ["a"])[:2] == ["k", "a"]
    finally:
        client.close()
        server.stop()


def test_the_scripts_own_error_is_raised_and_the_connection_stays_usable(own_redis):
    failing = own_redis.register_script("return redis.error_reply('NOPE: refused')")
    script = own_redis.register_script(ECHO)
    with pytest.raises(redis.ResponseError, match="refused"):
        call_script(failing, [], [])
    assert call_script(script, ["k"], ["a"]) == ["k", "a", "1"]


def test_threads_share_the_free_connections_and_each_call_gets_its_own_reply(own_redis):
    script = own_redis.register_script(ECHO)
    own_redis.script_load(ECHO)  # no NoScriptError detour through the pool
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            for i in range(200):
                reply = call_script(script, [f"t{n}"], [f"{n}-{i}"])
                assert reply[:2] == [f"t{n}", f"{n}-{i}"] and reply[2] == str(i + 1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    # About one connection per thread beside the pool's few (1,600 calls): none per call.
    clients = own_redis.client_list()
    assert len(clients) <= 8 + 4, clients


def test_another_client_class_goes_through_script(own_redis):
    class Counting(redis.Redis):
        calls = 0

        def evalsha(self, *args, **kwargs):
            Counting.calls += 1
            return super().evalsha(*args, **kwargs)

    other = Counting(port=own_redis.connection_pool.connection_kwargs["port"],
                     decode_responses=True)
    script = other.register_script(ECHO)
    other.script_load(ECHO)
    assert call_script(script, ["k"], ["a"]) == ["k", "a", "1"]
    assert Counting.calls == 1
    other.close()
