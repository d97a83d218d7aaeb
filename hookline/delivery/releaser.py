"""The releaser: moves due retries from the schedule onto the retry queue (a thread in every
worker, or ``hookline releaser`` on its own)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from hookline.core.config import Settings, settings
from hookline.core.logs import log_event
from hookline.core.messages import RETRY_QUEUE
from hookline.delivery.fanout import sweep_fanouts
from hookline.store.connection import bounded_options, redis_for
from hookline.store.schedule import RetrySchedule
from hookline.transport.errors import KombuError
from hookline.transport.face import broker_face
from hookline.transport.rabbitmq import BrokerUnavailable, RabbitBroker

#: Seconds a releaser waits after Redis or the broker failed before it looks again.
FAILURE_PAUSE = 1.0
#: Seconds between a releaser's looks at pending fan-outs (``sweep_fanouts``): one ZRANGEBYSCORE.
FANOUT_SWEEP_EVERY = 1.0


def broker_target(config: Settings) -> Any:
    """Where released retries go: None when the broker is Hookline's own Redis (release.lua
    pushes them itself), a Redis client for a Redis broker elsewhere, or a
    :class:`RabbitBroker` for RabbitMQ."""
    face = broker_face(config)
    if face.releases_by_script:
        return None
    if not face.queues_are_lists:
        return RabbitBroker()
    return redis_for(config.broker_url, decode_responses=False, **bounded_options())


def retry_queue_room(broker: Any, queue: str, limit: int) -> int:
    """How many more released retries the retry queue of a separate broker takes
    (``HOOKLINE_RETRY_QUEUE_LIMIT``), so first deliveries keep their share there too."""
    if isinstance(broker, RabbitBroker):
        depth = broker.depths([queue])[queue]
    else:
        depth = int(broker.llen(queue))
    return max(0, limit - depth)


class Releaser:
    """A thread that releases due retries: it sleeps until the next one is due (at most
    ``HOOKLINE_RELEASER_MAX_SLEEP``) and wakes early when a sooner retry is parked."""

    def __init__(self, *, queue: str = RETRY_QUEUE, batch: int = 500) -> None:
        self.queue = queue
        self.batch = batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Releaser:
        self._thread = threading.Thread(target=self.run, name="hookline-releaser", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        config = settings()
        schedule = RetrySchedule()
        broker = None
        swept = 0.0
        while not self._stop.is_set():
            if time.monotonic() - swept >= FANOUT_SWEEP_EVERY:
                swept = time.monotonic()
                self._sweep_fanouts()
            try:
                if broker is None:
                    broker = broker_target(config)
                batch = self.batch
                if broker is not None:
                    batch = min(batch, retry_queue_room(broker, self.queue,
                                                        config.retry_queue_limit))
                released, next_due = schedule.release_due(batch=batch, queue=self.queue,
                                                          broker=broker)
            except redis.RedisError as exc:
                self._failed("schedule.release_failed", exc)
                continue
            except (BrokerUnavailable, KombuError, OSError) as exc:
                self._failed("broker.release_failed", exc)
                continue
            except Exception as exc:  # the thread must outlive any one failure
                log_event("schedule.release_error", level=logging.ERROR,
                          error=type(exc).__name__, detail=str(exc)[:200])
                self._stop.wait(FAILURE_PAUSE)
                continue
            if batch and released >= batch:
                continue  # more are due: no sleep
            if next_due is None:
                wait = config.releaser_max_sleep
            elif next_due == 0:
                wait = 0.05  # due but held back: the retry queue is at its limit
            else:
                wait = min(next_due, config.releaser_max_sleep)
            try:
                schedule.wait_for_wake(wait)
            except redis.RedisError:
                self._stop.wait(FAILURE_PAUSE)

    def _sweep_fanouts(self) -> None:
        """Published events whose fan-out a dead publisher never queued (see
        ``sweep_fanouts``); a failure is logged and the next look tries again."""
        try:
            sweep_fanouts()
        except Exception as exc:  # the thread must outlive any one failure
            log_event("fanout.sweep_failed", level=logging.WARNING, error=type(exc).__name__,
                      detail=str(exc)[:200])

    def _failed(self, name: str, exc: BaseException) -> None:
        """Redis or the broker failed: logged, and tried again after a pause (claimed retries
        not confirmed are released again when their claim ends)."""
        log_event(name, level=logging.WARNING, error=type(exc).__name__)
        self._stop.wait(FAILURE_PAUSE)
