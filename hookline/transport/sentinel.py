"""kombu's Redis Sentinel transport with everything Hookline's Redis transport adds
(hookline/transport/redis.py), selected in the Celery settings for a ``sentinel://`` broker URL.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.sentinel import Sentinel

from hookline.core.sentinel import SENTINELS_OPTION
from hookline.store.replication import wait_command, wait_for_replicas
from hookline.store.sentinel import (
    FollowingPool,
    WholeReplyConnection,
    WholeReplySSLConnection,
    follow,
)
from hookline.transport.redis import Channel, Transport


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """Hookline's channel on a Redis master that Redis Sentinel finds (``sentinel://``).

    Everything Hookline adds (the consume script, the doorbell, parking held deliveries, the
    shared client) comes from :class:`Channel`; the connection pools are kombu's
    ``SentinelChannel``'s (redis-py's ``Sentinel.master_for`` with ``master_name`` and
    ``sentinel_kwargs`` from the transport options), built here from every Sentinel in the
    transport options and with a pool that follows a failover. A message taken by
    consume.lua is in the unacked records in the same step there too, so the restore sweep
    brings back what a worker held.

    A master demoted by a failover keeps answering until Sentinel reconfigures it (about
    10 s after ``SENTINEL FAILOVER``), so before each consume the channel checks, at most
    every second (``hookline/store/sentinel.py``), that its master is still the master; when
    it moved, the consuming connection fails as if the old master had dropped it, and the
    worker reconnects to the new one (Celery's "Connection to broker lost").

    Publishing waits for ``HOOKLINE_REDIS_WAIT_REPLICAS`` replicas (Redis ``WAIT``, see
    ``hookline/store/replication.py``), so that a published event survives a failover."""

    #: Connections that close when a reply cannot be read whole, so that a late reply from
    #: a stalled master is never read by the next command (``hookline/store/sentinel.py``).
    connection_class = WholeReplyConnection
    #: (kombu declares its own TLS Sentinel class, which this one matches)
    connection_class_ssl = WholeReplySSLConnection  # type: ignore[assignment]
    #: The Sentinels, ``[[host, port], ...]`` (celery_settings puts them in the transport
    #: options; kombu's own way, a ``;`` list of URLs, loses the transport on a failover).
    from_transport_options = (  # type: ignore[assignment]
        *kombu_redis.SentinelChannel.from_transport_options, SENTINELS_OPTION)
    hookline_sentinels: list[list[Any]] | None = None

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        """kombu's, with every Sentinel from the transport options and a pool that follows a
        failover promptly (``hookline/store/sentinel.py``)."""
        params = self._connparams(asynchronous)
        host, port = params.pop("host", None), params.pop("port", None)
        sentinels = [(str(h), int(p)) for h, p in self.hookline_sentinels or [[host, port]]]
        manager = Sentinel(sentinels, min_other_sentinels=getattr(self, "min_other_sentinels", 0),
                           sentinel_kwargs=getattr(self, "sentinel_kwargs", None), **params)
        # kept where kombu 5.7 keeps them, to close their connections with the channel's
        if asynchronous:
            self._async_sentinel_manager = manager
        else:
            self._sentinel_manager = manager
        master_name = getattr(self, "master_name", None)
        if master_name is None:
            raise ValueError("'master_name' transport option must be specified.")
        credentials = {key: params[key] for key in ("username", "password") if key in params}
        return manager.master_for(master_name, redis.Redis, connection_pool_class=FollowingPool,
                                  **credentials).connection_pool

    def _brpop_start(self, timeout: Any = None) -> None:
        self._follow_master()
        return super()._brpop_start(timeout)

    def _follow_master(self) -> None:
        follow(self.pool)  # the publishing and acknowledging client's pool
        address = follow(self.async_pool)
        consuming: Any = getattr(self.client, "connection", None)
        host = getattr(consuming, "host", None)
        if address is not None and host and (host, consuming.port) != tuple(address):
            raise RedisConnectionError(f"the Redis master moved to {address[0]}:{address[1]}")

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        publish_batch = kwargs.get("_publish_batch")
        super()._put(queue, message, **kwargs)
        if publish_batch is not None:
            # kombu 5.7's batched publish: the WAIT joins the batch's pipeline, on the
            # connection that sends its pushes; its reply is not checked (kombu keeps the
            # batch's replies), and Hookline itself publishes no batches.
            command = wait_command(publish_batch.pipeline)
            if command is not None:
                publish_batch.add("execute_command", *command)
            return
        with self.conn_or_acquire() as client:
            wait_for_replicas(client)


class SentinelTransport(Transport, kombu_redis.SentinelTransport):
    """Selected in the Celery settings for a ``sentinel://`` broker URL."""

    Channel = SentinelChannel
