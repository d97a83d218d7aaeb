"""The bulk replay task, ``hookline.replay_job``: thin, it runs one job
(``hookline.delivery.replay_job``).

Acknowledged late: a worker killed in the middle leaves the message to be restored to another
worker, whose run takes the job's lease once the killed one's runs out and resumes at the
recorded cursor. Hookline's Redis failing retries the task (backing off); the job stays
``running`` meanwhile.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.exceptions import OperationalError

from hookline.delivery.replay_job import REPLAY_JOB_TASK_NAME, run_replay_job
from hookline.worker.celery import app


@app.task(bind=True, name=REPLAY_JOB_TASK_NAME, shared=False, acks_late=True,
          autoretry_for=(redis.RedisError, OperationalError), retry_backoff=True,
          retry_backoff_max=60, max_retries=None)
def replay_job(self: Any, job_id: str) -> dict[str, Any]:
    """Replay the dead letters of bulk replay job ``job_id``, batch by batch, to its end or
    its cancel."""
    return {"job_id": job_id, "state": run_replay_job(job_id)}
