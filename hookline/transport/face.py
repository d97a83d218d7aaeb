"""The broker face: what differs between Hookline's brokers, asked in one place.

Hookline's Redis as its own broker (``HOOKLINE_BROKER_URL`` unset or equal to ``REDIS_URL``,
plain or behind Sentinel), a Redis broker of its own, and RabbitMQ differ in what the broker
does beside the queues: whether a settle acknowledges the message, where deliveries wait for
their endpoint's share, who parks a held endpoint's deliveries, and so on. The layers above
the transport ask :func:`broker_face` by what they need; none of them asks which broker it is.
The store, below the transport, is told by its callers (``Gate(doorbell=...)``,
``Leases(doorbell=...)``, ``Gate.in_flight(waiting=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hookline.core.config import Settings, settings

__all__ = ["BrokerFace", "broker_face"]

#: ``REDIS_URL`` schemes of a plain Redis (not Sentinel, whose publishes wait for replicas).
_PLAIN_REDIS = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class BrokerFace:
    """What the configured broker does, each answer named by its meaning."""

    #: A delivery's settle acknowledges its message in the same step (the transport's receipt).
    receipts: bool
    #: Scripts on Hookline's Redis that free a slot or move a line ring the consume doorbell.
    doorbell: bool
    #: Deliveries waiting for their endpoint's share or cap wait in lists in Hookline's Redis.
    fair_waiting: bool
    #: Ordered endpoints can exist: consume.lua keeps their lines, one key at a time.
    ordered_lines: bool
    #: A publish claims the event id in the script that pushes the message (claim_push.lua).
    claims_on_publish: bool
    #: release.lua pushes due retries onto the retry queue itself (no broker client needed).
    releases_by_script: bool
    #: A batch is pushed by one script (push_fanout.lua, claim_push.lua): not behind Sentinel.
    pushes_by_script: bool
    #: The worker parks a held endpoint's deliveries itself (consume.lua cannot: RabbitMQ).
    parks_in_worker: bool
    #: A requeued message comes straight back: the worker paces it before the requeue.
    paces_requeue: bool
    #: The broker keeps the registry of live worker processes (hookline/transport/liveness.py).
    worker_registry: bool
    #: The queues are Redis lists (LLEN counts them); otherwise RabbitMQ's (a passive declare).
    queues_are_lists: bool
    #: The variable that names the broker's URL, in an error about reaching its queues.
    url_variable: str

    @classmethod
    def of(cls, config: Settings) -> BrokerFace:
        """The face of ``config``'s broker (worked out from its URLs, nothing connected)."""
        own = config.broker_is_state
        amqp = config.broker_amqp
        return cls(
            receipts=own, doorbell=own, fair_waiting=own, ordered_lines=own,
            claims_on_publish=own, releases_by_script=own,
            pushes_by_script=own and config.redis_url.startswith(_PLAIN_REDIS),
            parks_in_worker=amqp, paces_requeue=not own, worker_registry=not amqp,
            queues_are_lists=not amqp,
            url_variable="REDIS_URL" if own else "HOOKLINE_BROKER_URL",
        )


_face: tuple[Settings, BrokerFace] | None = None


def broker_face(config: Settings | None = None) -> BrokerFace:
    """The face of the broker ``config`` (the settings by default) names: worked out once per
    settings, so a worker's boot and every later call get the same answers."""
    global _face
    config = config or settings()
    found = _face
    if found is None or found[0] is not config:
        found = _face = (config, BrokerFace.of(config))
    return found[1]
