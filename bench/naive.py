"""The contenders ``bench.compare`` puts beside Hookline: a no-op task (the broker's ceiling)
and the webhook task a user would write first, on a Celery app with Celery's defaults.

    BENCH_NAIVE_BROKER_URL=redis://... celery -A bench.naive worker -P threads -c 64

Celery's defaults apply except where nothing else makes sense: no result backend (a webhook
task has nothing to return), JSON (the default anyway). So: early acknowledgement, prefetch
multiplier 4, no task events, the ``celery`` queue. The pool and concurrency come from the
command line, the same as Hookline's worker. Benchmark use only: nothing in ``app`` knows
about it.
"""

from __future__ import annotations

import os
from typing import Any

import requests
from celery import Celery

QUEUE = "celery"

app = Celery("naive")
app.conf.update(
    broker_url=os.environ.get("BENCH_NAIVE_BROKER_URL", "redis://127.0.0.1:1/0"),
    result_backend=None,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
)


@app.task(name="naive.noop")
def noop(*args: Any, **kwargs: Any) -> None:
    """Nothing: what the broker and the worker cost on their own."""


@app.task(name="naive.webhook", autoretry_for=(requests.RequestException,), retry_backoff=True)
def webhook(url: str, payload: Any) -> int:
    """POST the payload; any network error or 4xx/5xx retries, with Celery's backoff
    (full jitter over 1, 2, 4 ... s) and its default of 3 retries."""
    response = requests.post(url, json=payload, timeout=10)
    response.raise_for_status()
    return response.status_code
