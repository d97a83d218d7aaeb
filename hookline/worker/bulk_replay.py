"""The bulk replay task, ``hookline.replay_job``: thin, it runs one job
(``hookline.delivery.replay_job``).

A run ends when the job's next batch is not due yet, its next run parked in the retry schedule
(the releaser hands it to a worker when due): the task never holds a slot while the job waits.
Acknowledged late: a worker killed in the middle leaves the message to be restored to another
worker, whose run takes the job's lease once the killed one's runs out (parking itself until
then) and resumes at the recorded cursor. Hookline's Redis failing retries the task (backing
off); the job stays ``running`` meanwhile.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.exceptions import OperationalError

from hookline.delivery.replay_job import REPLAY_JOB_TASK_NAME, run_replay_job
from hookline.worker.celery import worker_app


@worker_app.task(bind=True, name=REPLAY_JOB_TASK_NAME, shared=False, acks_late=True,
                 autoretry_for=(redis.RedisError, OperationalError), retry_backoff=True,
                 retry_backoff_max=60, max_retries=None)
def replay_job(self: Any, job_id: str) -> dict[str, Any]:
    """Replay the dead letters of bulk replay job ``job_id`` that are due now, batch by
    batch; the state is ``waiting`` when the rest is parked for later."""
    return {"job_id": job_id, "state": run_replay_job(job_id)}
