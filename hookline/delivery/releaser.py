"""The releaser: moves due retries from the schedule onto the retry queue (a thread in every
worker, or ``hookline releaser`` on its own)."""

from __future__ import annotations

import logging
import threading

import redis

from hookline.core.config import settings
from hookline.core.logs import log_event
from hookline.core.messages import RETRY_QUEUE
from hookline.store.connection import redis_for
from hookline.store.schedule import RetrySchedule


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
        if config.broker_url != config.redis_url:
            broker = redis_for(config.broker_url, decode_responses=False)
        while not self._stop.is_set():
            try:
                released, next_due = schedule.release_due(batch=self.batch, queue=self.queue,
                                                          broker=broker)
            except redis.RedisError as exc:
                log_event("schedule.release_failed", level=logging.WARNING,
                          error=type(exc).__name__)
                self._stop.wait(1.0)
                continue
            if released >= self.batch:
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
                self._stop.wait(1.0)
