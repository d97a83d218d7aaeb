"""The dead-letter pages: a filtered, paginated list whose filters live in the query string (a
view can be bookmarked and shared), one entry, replay of one, and the bulk replay of exactly
the filtered set: a dry-run count first, then a confirmation, then a background job whose
progress refreshes itself and which can be cancelled.

The filters are read and checked by ``DeadLetterQuery.from_params`` (a bad value is a 400
naming it) and written back by ``to_params``, so every link a page builds carries the same
selection. What a bulk replay selects, its pace and who may start it are the service's.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from hookline.console.visit import Routes, Visit
from hookline.service import dead_letters, replay_jobs
from hookline.service.dead_letters import DeadLetterQuery

routes = Routes("dead_letters")

#: Dead letters per page unless ``?limit=`` asks for another number (the service bounds it).
PAGE_SIZE = 50
#: The reasons offered in the filter's list (the service checks any value it is given).
REASONS = sorted(dead_letters.REASONS)
#: Bulk replays listed under the dead letters, newest first.
RECENT_JOBS = 5


def _query(params: Any) -> DeadLetterQuery:
    return DeadLetterQuery.from_params(params)


@routes.get("/dead-letters")
def letter_list(visit: Visit) -> Response:
    """One page of the dead letters matching the query string's filters."""
    query = _query(visit.request.args)
    page = dead_letters.list_page(visit.actor, query, visit.param("cursor") or None,
                                  visit.limit(PAGE_SIZE))
    return visit.render("dead_letters.html", page=page, query=query,
                        params=query.to_params(), form=_form_values(visit), reasons=REASONS,
                        jobs=replay_jobs.jobs(visit.actor, limit=RECENT_JOBS))


def _form_values(visit: Visit) -> dict[str, str]:
    """The filter form's fields as the reader typed them (``1h`` stays ``1h``)."""
    return {name: visit.param(name) for name in dead_letters.PARAMS}


@routes.get("/dead-letters/entry")
def letter_show(visit: Visit) -> Response:
    """One dead letter (``?id=<endpoint>/<event id>``), its payload included."""
    entry = dead_letters.get(visit.actor, visit.param("id"))
    return visit.render("dead_letter.html", entry=entry)


@routes.post("/dead-letters/replay")
def replay_one(visit: Visit) -> Response:
    """Replay one entry now (same webhook-id); back to the list it was replayed from."""
    dead_letters.replay_one(visit.actor, visit.form("entry_id"))
    back = _query(visit.request.form).to_params()
    return visit.redirect("dead_letters.letter_list", {**back, "notice": "replayed"})


@routes.get("/dead-letters/bulk-replay")
def bulk_confirm(visit: Visit) -> Response:
    """The dry run: how many dead letters the filters select, and a form to replay exactly
    those."""
    query = _query(visit.request.args)
    total = dead_letters.count(visit.actor, query)
    return visit.render("bulk_confirm.html", query=query, params=query.to_params(),
                        total=total)


@routes.post("/dead-letters/bulk-replay")
def bulk_start(visit: Visit) -> Response:
    """Start the job for the posted filters (every dead letter only with ``all=1``)."""
    query = dead_letters.require_selection(_query(visit.request.form),
                                           visit.form("all") == "1")
    job_id = replay_jobs.start_bulk_replay(visit.actor, query)
    return visit.redirect("dead_letters.job_show", job_id=job_id)


@routes.get("/dead-letters/jobs/<job_id>")
def job_show(visit: Visit) -> Response:
    job = replay_jobs.job(visit.actor, str(visit.args["job_id"]))
    return visit.render("bulk_job.html", job=job)


@routes.get("/dead-letters/jobs/<job_id>/progress")
def job_progress(visit: Visit) -> Response:
    """The job's progress alone: the job page replaces its progress with it while it runs."""
    job = replay_jobs.job(visit.actor, str(visit.args["job_id"]))
    return visit.render("_job_progress.html", job=job)


@routes.post("/dead-letters/jobs/<job_id>/cancel")
def job_cancel(visit: Visit) -> Response:
    replay_jobs.cancel(visit.actor, str(visit.args["job_id"]))
    return visit.redirect("dead_letters.job_show", {"notice": "cancelled"},
                          job_id=visit.args["job_id"])
