"""The dead-letter pages: a filtered, paginated list, newest first, whose filters live in the
query string (a view can be bookmarked and shared), one entry, replay of one, rows ticked on the
list replayed or deleted (a confirmation naming each first), the purge of exactly the filtered
set (a dry-run count, then a confirmation), and the bulk replay of exactly the filtered set: a
dry-run count first, then a confirmation, then a background job whose progress refreshes itself
and which can be cancelled. A replay to an endpoint that cannot receive now (disabled, removed,
paused) is confirmed first, the page saying what will become of it.

The filters are read and checked by ``DeadLetterQuery.from_params`` (a bad value is a 400
naming it) and written back by ``to_params``, so every link a page builds carries the same
selection. What a bulk replay or a purge selects, its pace and who may start it are the
service's (``dead_letters``, ``dead_letter_selection``, ``replay_jobs``). The tenant portal
routes the same actions (:func:`dead_letter_actions`) and draws the same pages through the
functions here that take the list to go back to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from werkzeug.wrappers import Response

from hookline.console.visit import Page, Routes, Visit
from hookline.core.errors import InvalidField
from hookline.core.times import format_time_param
from hookline.service import dead_letter_selection as selection
from hookline.service import dead_letters, replay_jobs
from hookline.service.dead_letters import DeadLetterQuery
from hookline.service.pages import time_param

routes = Routes("dead_letters")

#: Dead letters per page unless ``?limit=`` asks for another number (the service bounds it).
PAGE_SIZE = 50
#: The reasons offered in the filter's list (the service checks any value it is given).
REASONS = sorted(dead_letters.REASONS)
#: Bulk replays listed under the dead letters, newest first.
RECENT_JOBS = 5
#: How a face draws a page: ``draw(visit, template, **values)`` (the portal adds its own).
Draw = Callable[..., Response]
#: What is done to the confirmed rows: the action, its path, its page's name.
SELECTION_ACTIONS = (("delete", "/dead-letters/delete", "letter_delete"),
                     ("replay", "/dead-letters/replay-selected", "letter_replay_selected"))
#: What the list says was done to the selected rows (``?done=deleted&count=3``).
DONE = {"delete": "deleted", "replay": "replayed"}


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
                        reason_texts=dead_letters.REASONS,
                        jobs=replay_jobs.jobs(visit.actor, limit=RECENT_JOBS))


def _form_values(visit: Visit) -> dict[str, str]:
    """The filter form's fields as the reader typed them (``1h`` stays ``1h``)."""
    return {name: visit.param(name) for name in dead_letters.PARAMS}


@routes.get("/dead-letters/entry")
def letter_show(visit: Visit) -> Response:
    """One dead letter (``?id=<endpoint>/<event id>``), its payload included."""
    entry = dead_letters.get(visit.actor, visit.param("id"))
    return visit.render("dead_letter.html", entry=entry,
                        blocked=selection.blocked_entries(visit.actor, [entry]))


def replay_then_list(visit: Visit, back: DeadLetterQuery, page: str,
                     draw: Draw = Visit.render) -> Response:
    """Replay the posted ``entry_id``, then the list (``page``) the reader came from; first
    the confirmation, with the warning, when its endpoint cannot receive now."""
    entry_id = visit.form("entry_id")
    if visit.form("confirmed") != "1":
        entry = dead_letters.get(visit.actor, entry_id)
        blocked = selection.blocked_entries(visit.actor, [entry])
        if blocked:
            return _selection_page(visit, "replay", [entry], blocked, back, draw)
    dead_letters.replay_one(visit.actor, entry_id)
    return visit.redirect(page, {**back.to_params(), "notice": "replayed"})


def _selection_page(visit: Visit, action: str, entries: list[Any], blocked: list[Any],
                    back: DeadLetterQuery, draw: Draw) -> Response:
    return draw(visit, "dead_letter_selection.html", action=action, entries=entries,
                versions=selection.versions(entries), blocked=blocked, params=back.to_params())


def select(visit: Visit, back: DeadLetterQuery, draw: Draw = Visit.render) -> Response:
    """The rows ticked on a list (``entry_id``, repeated) and what to do with them
    (``action``: delete or replay): the confirmation, naming each, and for a replay the
    endpoints that cannot receive now. Nothing changes yet."""
    action = visit.form("action")
    if action not in ("delete", "replay"):
        raise InvalidField("action", f"action {action[:20]!r} is not one of delete, replay")
    entries = selection.selected(visit.actor, visit.request.form.getlist("entry_id"))
    blocked = selection.blocked_entries(visit.actor, entries) if action == "replay" else []
    return _selection_page(visit, action, entries, blocked, back, draw)


def act_on_selection(visit: Visit, action: str, back: DeadLetterQuery, page: str) -> Response:
    """Delete or replay exactly the confirmed entries (``entry``, repeated: as the
    confirmation showed them); back to the list with how many."""
    confirmed = selection.parse_versions(visit.request.form.getlist("entry"))
    if action == "delete":
        done = selection.delete_selected(visit.actor, confirmed).deleted
    else:
        done = len(selection.replay_selected(visit.actor, confirmed).replayed)
    return visit.redirect(page, {**back.to_params(), "done": DONE[action], "count": done})


def purge_dry_run(visit: Visit, query: DeadLetterQuery, draw: Draw = Visit.render
                  ) -> Response:
    """How many dead letters the filters select now, and a form to delete exactly those."""
    plan = selection.plan_purge(visit.actor, query)
    return draw(visit, "purge_confirm.html", plan=plan, query=query, params=query.to_params(),
                as_of=format_time_param(plan.as_of))


def purge_then_list(visit: Visit, query: DeadLetterQuery, page: str) -> Response:
    """Delete what the dry run counted (``as_of``: its moment); every dead letter only with
    ``all=1``."""
    query = dead_letters.require_selection(query, visit.form("all") == "1")
    as_of = time_param("as_of", visit.form("as_of"))
    if as_of is None:
        raise InvalidField("as_of", "as_of is missing: purge from the dry run's page")
    purged = selection.purge_matching(visit.actor, query, as_of)
    return visit.redirect(page, {**query.to_params(), "done": "purged", "count": purged})


def dead_letter_actions(routes: Routes, query_of: Callable[[Any], DeadLetterQuery],
                        draw: Draw) -> None:
    """Route the dead-letter actions the console and the portal share on ``routes``: replay of
    one, the ticked rows' confirmation, their deletion or replay, the purge's dry run and the
    purge, each back to the face's list (``letter_list``) with the filters it came from
    (``query_of`` reads them from a form or a query string); ``draw`` draws the pages."""
    listing = f"{routes.name}.letter_list"

    @routes.post("/dead-letters/replay", name="letter_replay")
    def replay(visit: Visit) -> Response:
        """Replay one entry now (same webhook-id); back to the list it was replayed from."""
        return replay_then_list(visit, query_of(visit.request.form), listing, draw)

    @routes.post("/dead-letters/selection", name="letter_selection")
    def selection_confirm(visit: Visit) -> Response:
        """The ticked rows' confirmation (another application's id: NotFound, as an
        unknown)."""
        return select(visit, query_of(visit.request.form), draw)

    for action, path, name in SELECTION_ACTIONS:
        routes.post(path, name=name)(_on_selection(action, query_of, listing))

    @routes.get("/dead-letters/purge", name="letter_purge_confirm")
    def purge_confirm(visit: Visit) -> Response:
        return purge_dry_run(visit, query_of(visit.request.args), draw)

    @routes.post("/dead-letters/purge", name="letter_purge")
    def purge(visit: Visit) -> Response:
        return purge_then_list(visit, query_of(visit.request.form), listing)


def _on_selection(action: str, query_of: Callable[[Any], DeadLetterQuery],
                  listing: str) -> Page:
    """The page that deletes or replays the confirmed rows."""
    def page(visit: Visit) -> Response:
        return act_on_selection(visit, action, query_of(visit.request.form), listing)
    return page


dead_letter_actions(routes, _query, Visit.render)


@routes.get("/dead-letters/bulk-replay")
def bulk_confirm(visit: Visit) -> Response:
    """The dry run: how many dead letters the filters select, the endpoints among them that
    cannot receive now, and a form to replay exactly those."""
    query = _query(visit.request.args)
    total = dead_letters.count(visit.actor, query)
    # Every registered endpoint's state is read when the replay is asked for, not here.
    blocked = selection.blocked_matching(visit.actor, query, every_endpoint=False) \
        if total else []
    return visit.render("bulk_confirm.html", query=query, params=query.to_params(),
                        total=total, blocked=blocked)


@routes.post("/dead-letters/bulk-replay")
def bulk_start(visit: Visit) -> Response:
    """Start the job for the posted filters (every dead letter only with ``all=1``); first the
    confirmation again, with the warning, when the dry run did not check the endpoints and
    some cannot receive (``confirmed=1``: it did, or this is that confirmation)."""
    query = dead_letters.require_selection(_query(visit.request.form),
                                           visit.form("all") == "1")
    if visit.form("confirmed") != "1":
        blocked = selection.blocked_matching(visit.actor, query)
        if blocked:
            return visit.render("bulk_confirm.html", query=query, params=query.to_params(),
                                total=dead_letters.count(visit.actor, query), blocked=blocked)
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
