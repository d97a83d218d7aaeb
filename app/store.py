"""The Redis connection and Hookline's key names.

Every key an endpoint owns carries the endpoint id as a hash tag (``hookline:{ep_1}:...``), so a
Lua script that touches one endpoint's keys stays in one Redis Cluster slot.
"""

from __future__ import annotations

import os
import threading
from importlib import resources

import redis

from app.config import settings

_lock = threading.Lock()
_client: tuple[int, str, redis.Redis] | None = None

#: Key of the set of all endpoint ids.
ENDPOINT_INDEX = "hookline:endpoints"
#: The broker's doorbell: a one-entry stream every push onto a queue adds to, so idle
#: consumers blocked on it wake (app/broker.py).
DOORBELL_KEY = "hookline:broker:doorbell"


def ring(pipe: redis.Redis | redis.client.Pipeline) -> object:
    """Add the doorbell entry to ``pipe`` (a pipeline or client), after a push onto a queue."""
    return pipe.xadd(DOORBELL_KEY, {"n": "1"}, maxlen=1, approximate=False)


def endpoint_key(endpoint_id: str) -> str:
    return f"hookline:{{{endpoint_id}}}:endpoint"


def done_key(endpoint_id: str, event_id: str) -> str:
    return f"hookline:{{{endpoint_id}}}:done:{event_id}"


def lease_key(endpoint_id: str, event_id: str) -> str:
    return f"hookline:{{{endpoint_id}}}:lease:{event_id}"


def starts_key(endpoint_id: str, event_id: str) -> str:
    return f"hookline:{{{endpoint_id}}}:starts:{event_id}"


def breaker_key(endpoint_id: str) -> str:
    """Circuit breaker and Retry-After block of one endpoint (a hash)."""
    return f"hookline:{{{endpoint_id}}}:breaker"


def rate_key(endpoint_id: str) -> str:
    """The rate limiter's theoretical arrival time (GCRA), milliseconds of Redis time."""
    return f"hookline:{{{endpoint_id}}}:rate"


def client() -> redis.Redis:
    """This process's Redis client (thread-safe pool), made again after a fork or when
    ``REDIS_URL`` changes (``app.config.configure``)."""
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
                redis.Redis.from_url(
                    url,
                    decode_responses=True,
                    health_check_interval=30,
                    socket_connect_timeout=5,
                    socket_timeout=10,
                    retry_on_timeout=True,
                ),
            )
        return _client[2]


def load_script(name: str) -> str:
    """The text of ``app/lua/<name>.lua``."""
    return resources.files("app.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
