"""``bench.naive_retry``: the naive retry, Celery's own countdown, the baseline of
``bench.schedule``.

A separate Celery app with the broker-only part of Hookline's configuration (JSON, late
acknowledgement, prefetch 1, threads -c 32, no results) and Celery's defaults otherwise
(visibility timeout 3600 s, no ``worker_eta_task_limit``). Its one task retries once with
``countdown=1800``: the retry goes back to the broker with an ETA and the worker that receives it
holds it, unacknowledged, in memory until it is due. Run as

    BENCH_NAIVE_BROKER_URL=redis://... celery -A bench.naive_countdown worker -P threads -c 32

Benchmark use only: nothing in ``app`` knows about it.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task

QUEUE = "naive"
#: Long enough for 100,000 first attempts to all be held before the first comes due, and
#: shorter than the visibility timeout (kombu's default 3600 s), past which a held ETA
#: message would be delivered twice.
COUNTDOWN = 1800

app = Celery("naive")
app.conf.update(
    broker_url=os.environ.get("BENCH_NAIVE_BROKER_URL", "redis://127.0.0.1:1/0"),
    result_backend=None,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_pool="threads",
    worker_concurrency=32,
    task_default_queue=QUEUE,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=True,
    worker_redirect_stdouts=False,
)


@app.task(bind=True, name="bench.naive_retry", acks_late=True, max_retries=None)
def naive_retry(self: Task, endpoint_id: str, event_type: str, payload: Any,
                event_id: str | None = None) -> str:
    """Hookline's task signature; the first run fails and retries in ``COUNTDOWN`` seconds."""
    if not self.request.retries:
        raise self.retry(countdown=COUNTDOWN)
    return "retried"
