"""The Redis connection and the doorbell (key names: ``keys.py``; the Lua scripts:
``scripts.py``).

Every key an endpoint owns carries the endpoint id as a hash tag (``hookline:{ep_1}:...``), so a
Lua script that touches one endpoint's keys stays in one Redis Cluster slot.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import redis
import redis.cluster
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from hookline.core.config import CLUSTER_SCHEMES, settings
from hookline.store.keys import doorbell_key

_lock = threading.Lock()
_client: tuple[int, str, redis.Redis] | None = None

#: Most connections one process's client opens to Hookline's Redis (and, as kombu's
#: ``max_connections``, to a Redis broker): redis-py's default (100) and kombu's (10) fail
#: with "Too many connections" when the 512 attempts of a worker waiting on slow receivers get
#: their answers at once and all settle together. Connections are opened only as needed.
MAX_CONNECTIONS = 4096

#: Most wake-up tokens one ring pushes: more than there are idle consumers wakes nobody more.
RING_MAX = 64

#: Times a Redis call is tried again after its connection was refused or dropped, and the
#: longest pause before one (seconds): a Redis restarting is given a moment, a Redis that is
#: down fails the call in well under a second.
CONNECTION_RETRIES = 2
RETRY_PAUSE_MAX = 0.2


def bounded_options(timeout: float | None = None) -> dict[str, Any]:
    """The options that bound every call of a Redis client (``redis_for``): connecting and
    each answer wait at most ``timeout`` seconds (``HOOKLINE_REDIS_TIMEOUT`` by default), and a
    call is tried again only after a refused or dropped connection, never after a timeout: a
    stalled Redis (a paused host, a partition) would make each try wait the whole timeout
    again. redis-py's own default retries timeouts ten times."""
    seconds = settings().redis_timeout if timeout is None else timeout
    return {
        "socket_connect_timeout": seconds,
        "socket_timeout": seconds,
        "retry": Retry(ExponentialBackoff(cap=RETRY_PAUSE_MAX, base=0.05), CONNECTION_RETRIES,
                       supported_errors=(redis.ConnectionError,)),
    }


def ring(pipe: redis.Redis | redis.client.Pipeline, queue: str, count: int = 1) -> object:
    """Push ``count`` wake-up tokens onto ``queue``'s doorbell in ``pipe`` (a pipeline or
    client), after pushing ``count`` messages onto that queue: each wakes one idle consumer
    of it."""
    return pipe.lpush(doorbell_key(queue), *["1"] * max(1, min(count, RING_MAX)))


def redis_time(client: redis.Redis) -> float:
    """``client``'s server time, Unix seconds: the clock Hookline's due times, blocks and
    breakers are measured on. TIME is keyless: read on its own, never in a pipeline (a
    cluster pipeline cannot route it)."""
    seconds, micros = client.time()
    return int(seconds) + int(micros) / 1e6


def redis_for(url: str, *, decode_responses: bool = True, **options: object) -> redis.Redis:
    """A Redis client for ``url``: the one place a URL becomes a client, for Hookline's state
    (``REDIS_URL``) and for a Redis broker (``HOOKLINE_BROKER_URL``). ``options`` are passed
    to the client (timeouts, ``health_check_interval``, ...)."""
    if url.startswith(CLUSTER_SCHEMES):
        return _cluster_client(url, decode_responses=decode_responses, **options)
    if url.startswith("sentinel://"):
        from hookline.store.sentinel import master_client  # a master found by Redis Sentinel

        return master_client(url, decode_responses=decode_responses, **options)
    return redis.Redis.from_url(url, decode_responses=decode_responses, **options)


# -- Redis Cluster (REDIS_URL=redis+cluster://host:port): Hookline's state only --------------


def _cluster_client(url: str, **options: object) -> redis.Redis:
    """redis-py's RedisCluster for ``redis+cluster://`` (``rediss+cluster://``: TLS): the
    URL names one seed node, the others are discovered. Needs a redis-py whose cluster
    pipelines run MULTI/EXEC transactions on one slot (the dead-letter queue's writes)."""
    if not hasattr(redis.cluster, "TransactionStrategy"):
        raise ValueError(f"a Redis Cluster needs redis-py 6.1 or later (this is "
                         f"{redis.__version__}): its cluster pipelines run no transactions")
    plain = url.replace("+cluster://", "://", 1)
    options.pop("health_check_interval", None)  # RedisCluster's nodes check themselves
    client = redis.cluster.RedisCluster.from_url(plain, **options)
    return client  # type: ignore[return-value]


#: Per client connection pool: (pid, connections free for call_script). Made with the pool's
#: own ``make_connection``, used by one thread at a time, given back after each call (closed,
#: after an error: never thrown away, as the pool counts each one it made).
_free: weakref.WeakKeyDictionary[Any, tuple[int, list[Any]]] = weakref.WeakKeyDictionary()


def call_script(script: Any, keys: list[Any], args: list[Any]) -> Any:
    """``script(keys=keys, args=args)`` (a ``register_script`` object) for the scripts a
    delivery runs every time (admit, settle), at about two thirds of redis-py's CPU on a
    plain Redis: on a connection of a free list beside the client's pool, without the pool's
    per-command checks (a poll of the socket) and retry wrapper. Anything unusual (a Cluster
    or Sentinel client, the script not loaded, the connection broken) goes the ordinary way,
    redis-py's retries included, so the outcome is the same as ``script(...)``'s."""
    client = script.registered_client
    pool = getattr(client, "connection_pool", None)
    if type(client) is not redis.Redis or type(pool) is not redis.ConnectionPool:
        return script(keys=keys, args=args)
    pid = os.getpid()
    entry = _free.get(pool)
    if entry is None or entry[0] != pid:  # new, or inherited over a fork: not ours to use
        entry = _free[pool] = (pid, [])
    free = entry[1]
    try:
        connection = free.pop()
    except IndexError:
        connection = pool.make_connection()
    try:
        connection.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return connection.read_response()
    except redis.exceptions.NoScriptError:
        return script(keys=keys, args=args)  # loads it
    except redis.exceptions.ResponseError:
        raise  # the script's own error: the connection is fine
    except (redis.exceptions.ConnectionError, OSError):
        connection.disconnect()
        return script(keys=keys, args=args)
    except BaseException:
        # A timeout (not tried again, as script(...) would not: bounded_options), or a reply
        # perhaps half read.
        connection.disconnect()
        raise
    finally:
        # Back to the free list in every case, closed after an error (its next call connects
        # again): thrown away, it would still count as made in its pool (only the pool's own
        # release gives back), and each Redis restart, dropping one per busy thread, would
        # bring the pool nearer its max_connections: "Too many connections", restarts later.
        free.append(connection)


def client() -> redis.Redis:
    """This process's Redis client (thread-safe pool), made again after a fork or when
    ``REDIS_URL`` changes (``hookline.core.config.configure``)."""
    global _client
    pid, url = os.getpid(), settings().redis_url
    current = _client
    if current is not None and current[:2] == (pid, url):
        return current[2]
    with _lock:
        if _client is None or _client[:2] != (pid, url):
            _client = (
                pid,
                url,
                redis_for(url, max_connections=MAX_CONNECTIONS, health_check_interval=30,
                          **bounded_options()),
            )
        return _client[2]
