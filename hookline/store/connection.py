"""The Redis connection, the Lua script loader and the doorbell (key names: ``keys.py``).

Every key an endpoint owns carries the endpoint id as a hash tag (``hookline:{ep_1}:...``), so a
Lua script that touches one endpoint's keys stays in one Redis Cluster slot.
"""

from __future__ import annotations

import os
import threading
from importlib import resources

import redis

from hookline.core.config import settings
from hookline.store.keys import DOORBELL_KEY

_lock = threading.Lock()
_client: tuple[int, str, redis.Redis] | None = None

def ring(pipe: redis.Redis | redis.client.Pipeline) -> object:
    """Add the doorbell entry to ``pipe`` (a pipeline or client), after a push onto a queue."""
    return pipe.xadd(DOORBELL_KEY, {"n": "1"}, maxlen=1, approximate=False)


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
    """The text of ``hookline/store/lua/<name>.lua``."""
    return resources.files("hookline.store.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
