"""Acting on exactly the dead letters a person chose, against a real Redis: rows selected and
deleted (or replayed) as confirmed, an entry replaced or removed meanwhile, the purge of exactly
a filtered set as counted, scope (another application's id answers like an unknown one and
nothing goes), read-only refusals, the audit, the indexes left consistent, the endpoints a
replay cannot reach; and the list's last error (the receiver's status and excerpt), newest
first."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hookline.core.errors import InvalidField
from hookline.service import audit, dead_letters
from hookline.service import dead_letter_selection as selection
from hookline.service.actor import Actor, NotFound, ReadOnly
from hookline.service.dead_letters import DeadLetterQuery
from hookline.store import keys
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_filtering import DeadLetterPages
from hookline.store.dead_letter_index import status_label
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.history import AttemptRecord

OPERATOR = Actor("alice", "session-1")
VIEWER = Actor("victor", "session-2", can_act=False)
TENANT = Actor("portal:app-a", "session-3", app_scope="app-a")
T0 = float(int(time.time()) - 3600)
REASONS = ("exhausted", "rejected", "endpoint_gone")


def letter(endpoint_id: str, n: int, *, at: float | None = None, reason: str | None = None,
           status: int | None = 503) -> DeadLetter:
    return DeadLetter(endpoint_id, f"ev-{n:04d}", "order.paid", {"n": n},
                      reason or REASONS[n % 3], attempts=3, last_status=status,
                      dead_lettered_at=T0 + n if at is None else at)


@pytest.fixture
def queue(quiet_redis) -> DeadLetterQueue:
    """app-a owns ep-a1 and ep-a2, app-b owns ep-b; 20 letters each (entry n*3+k of the k-th
    endpoint): 7 exhausted, 7 rejected and 6 endpoint_gone, of statuses 410, 503 and none."""
    apps, registry = AppRegistry(), EndpointRegistry()
    for app, endpoints in (("app-a", ["ep-a1", "ep-a2"]), ("app-b", ["ep-b"])):
        apps.add(app)
        for endpoint_id in endpoints:
            registry.add(endpoint_id, f"http://127.0.0.1:9/{endpoint_id}", app=app)
    queue = DeadLetterQueue()
    queue._write([letter(endpoint_id, n * 3 + k, reason=REASONS[n % 3],
                         status=(410, 503, None)[n // 3 % 3])
                  for n in range(20) for k, endpoint_id in enumerate(["ep-a1", "ep-a2", "ep-b"])])
    return queue


def assert_indexes_consistent(queue: DeadLetterQueue) -> None:
    """Every index holds exactly the entries it should, at their times: no place left behind
    by a delete, none missing."""
    client = queue.redis
    for shard in queue.shards:
        entries = {entry_id: DeadLetter.from_json(text)
                   for entry_id, text in client.hgetall(shard.entries).items()}
        expected: dict[str, dict[str, float]] = {shard.by_time: {}}
        for entry_id, entry in entries.items():
            for key in (shard.by_time, shard.by_reason(entry.reason),
                        shard.by_endpoint(entry.endpoint_id),
                        shard.by_endpoint_reason(entry.endpoint_id, entry.reason),
                        shard.by_status(status_label(entry.last_status))):
                expected.setdefault(key, {})[entry_id] = entry.dead_lettered_at
        index_keys = {key for key in client.scan_iter(f"hookline:{{{shard.tag}}}:by_*")}
        for key in index_keys | set(expected):
            assert dict(client.zrange(key, 0, -1, withscores=True)) == expected.get(key, {}), key


class CountingPipelines:
    """A Redis client that counts the pipelines it runs."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.pipelines = 0

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        self.pipelines += 1
        return self.client.pipeline(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def page_ids(actor: Actor, query: DeadLetterQuery) -> list[str]:
    return [entry.id for entry in dead_letters.list_page(actor, query, limit=500).items]


# -- selected rows ---------------------------------------------------------------------------


def test_deleting_selected_rows_deletes_exactly_those_and_keeps_the_indexes_consistent(
        queue: DeadLetterQueue) -> None:
    before = page_ids(OPERATOR, DeadLetterQuery())
    of_503 = dead_letters.count(OPERATOR, DeadLetterQuery(status=503))
    chosen = ["ep-a1/ev-0003", "ep-b/ev-0011", "ep-a2/ev-0058"]
    entries = selection.selected(OPERATOR, chosen)
    assert [entry.id for entry in entries] == chosen
    confirmed = selection.parse_versions(selection.versions(entries))
    deletion = selection.delete_selected(OPERATOR, confirmed)
    assert (deletion.asked, deletion.deleted) == (3, 3)
    assert page_ids(OPERATOR, DeadLetterQuery()) == [i for i in before if i not in chosen]
    assert queue.count() == 57 and queue.get_many(chosen) == {}
    assert dead_letters.count(OPERATOR, DeadLetterQuery(endpoint="ep-b")) == 19
    assert dead_letters.count(OPERATOR, DeadLetterQuery(status=503)) == of_503 - 1
    assert_indexes_consistent(queue)
    [entry] = audit.recent(OPERATOR, limit=1).items
    assert (entry.actor, entry.action, entry.target) == ("alice", "dead_letter.delete",
                                                         "3 dead letter(s)")
    assert entry.detail == ", ".join(chosen)


def test_an_entry_replaced_or_removed_since_its_confirmation_is_not_deleted(
        queue: DeadLetterQueue) -> None:
    chosen = ["ep-a1/ev-0000", "ep-a1/ev-0003", "ep-a1/ev-0006"]
    confirmed = selection.parse_versions(selection.versions(selection.selected(OPERATOR,
                                                                                 chosen)))
    again = letter("ep-a1", 3, at=T0 + 5000, reason="rejected", status=400)
    queue.add(again)  # dead-lettered again: a new entry under the same id
    queue.remove(["ep-a1/ev-0006"])  # replayed by someone else meanwhile
    with pytest.raises(NotFound, match="dead letter 'ep-a1/ev-0006'"):
        selection.delete_selected(OPERATOR, confirmed)  # gone: refused, nothing deleted
    assert queue.get("ep-a1/ev-0000") is not None
    del confirmed["ep-a1/ev-0006"]
    assert selection.delete_selected(OPERATOR, confirmed).deleted == 1
    assert queue.get("ep-a1/ev-0000") is None
    kept = queue.get("ep-a1/ev-0003")
    assert kept is not None and kept.dead_lettered_at == again.dead_lettered_at
    assert_indexes_consistent(queue)


def test_a_tenant_selecting_another_applications_ids_is_answered_as_for_unknown_ones(
        queue: DeadLetterQueue) -> None:
    own = selection.versions(selection.selected(TENANT, ["ep-a1/ev-0000"]))
    foreign = [f"{T0 + 2!r} ep-b/ev-0002"]
    unknown = [f"{T0 + 2!r} ep-zz/ev-0002"]
    messages = []
    for versions in (own + foreign, own + unknown):
        confirmed = selection.parse_versions(versions)
        for call in (selection.selected, selection.delete_selected, selection.replay_selected):
            with pytest.raises(NotFound) as refused:
                call(TENANT, confirmed)
            messages.append(str(refused.value).replace("ep-zz", "ep-b"))
    assert len(set(messages)) == 1 and "endpoint 'ep-b'" in messages[0]
    assert queue.count() == 60 and audit.recent(OPERATOR).items == []
    with pytest.raises(NotFound, match="dead letter 'ep-a1/ev-9999'"):
        selection.selected(TENANT, ["ep-a1/ev-9999"])


def test_a_read_only_actor_can_neither_delete_nor_purge(queue: DeadLetterQueue) -> None:
    confirmed = selection.parse_versions(selection.versions(
        selection.selected(VIEWER, ["ep-a1/ev-0000"])))
    plan = selection.plan_purge(VIEWER, DeadLetterQuery(endpoint="ep-a1"))
    assert plan.total == 20  # the dry run is a read
    for call in (lambda: selection.delete_selected(VIEWER, confirmed),
                 lambda: selection.replay_selected(VIEWER, confirmed),
                 lambda: selection.purge_matching(VIEWER, plan.query, plan.as_of)):
        with pytest.raises(ReadOnly, match="read-only: victor cannot"):
            call()
    assert queue.count() == 60


@pytest.mark.parametrize(("values", "says"), [
    ([], "no dead letter selected"),
    (["ep-a1/ev-0000"], "is not a confirmed dead letter"),
    (["nan ep-a1/ev-0000"], "is not a confirmed dead letter"),
    ([f"1.0 ep/{'x' * 500}"], "is not a dead-letter id"),
    ([f"{n}.0 ep-a1/ev-{n}" for n in range(501)], "at most 500 at a time"),
])
def test_a_bad_selection_is_one_clear_error(values: list[str], says: str) -> None:
    with pytest.raises(InvalidField, match=says):
        selection.parse_versions(values)


def test_replaying_selected_rows_replays_exactly_those(queue: DeadLetterQueue,
                                                       published) -> None:
    chosen = ["ep-a1/ev-0000", "ep-a2/ev-0001"]
    confirmed = selection.parse_versions(selection.versions(selection.selected(TENANT, chosen)))
    outcome = selection.replay_selected(TENANT, confirmed)
    assert sorted(entry.id for entry in outcome.replayed) == chosen
    assert sorted(event[1:] for event in published.events) == [("ep-a1", "ev-0000"),
                                                                ("ep-a2", "ev-0001")]
    assert queue.count() == 58 and queue.get_many(chosen) == {}
    assert_indexes_consistent(queue)


# -- the purge of a filtered set -------------------------------------------------------------


def test_a_purge_deletes_exactly_the_filtered_set_it_counted(queue: DeadLetterQueue) -> None:
    query = DeadLetterQuery(reason="rejected", status=503)
    plan = selection.plan_purge(OPERATOR, query)
    matching = dead_letters.find(OPERATOR, query)
    assert plan.total == len(matching) == 6  # n in 4 and 13, at each endpoint
    later = letter("ep-a2", 900, at=plan.as_of + 1, reason="rejected")  # after the dry run
    queue.add(later)
    assert selection.purge_matching(OPERATOR, query, plan.as_of) == 6
    assert dead_letters.find(OPERATOR, query) == [later]
    assert queue.count() == 60 - 6 + 1
    untouched = {entry.id for entry in dead_letters.find(OPERATOR, DeadLetterQuery())}
    assert untouched.isdisjoint(entry.id for entry in matching)
    assert_indexes_consistent(queue)
    [entry] = audit.recent(OPERATOR, limit=1).items
    assert (entry.actor, entry.action, entry.target) == ("alice", "dead_letter.purge",
                                                         "6 dead letter(s)")
    assert entry.detail.startswith("matching reason=rejected, status=503, dead-lettered by ")


def test_a_tenants_purge_reaches_only_its_application(queue: DeadLetterQueue) -> None:
    plan = selection.plan_purge(TENANT, DeadLetterQuery(reason="exhausted"))
    assert plan.total == 14  # of ep-a1 and ep-a2 only
    assert selection.purge_matching(TENANT, plan.query, plan.as_of) == 14
    assert dead_letters.count(OPERATOR, DeadLetterQuery(endpoint="ep-b", reason="exhausted")) == 7
    with pytest.raises(NotFound, match="endpoint 'ep-b'"):
        selection.plan_purge(TENANT, DeadLetterQuery(endpoint="ep-b"))
    with pytest.raises(NotFound, match="endpoint 'ep-b'"):
        selection.purge_matching(TENANT, DeadLetterQuery(endpoint="ep-b"), time.time())
    assert queue.count() == 60 - 14
    [entry] = audit.recent(TENANT, limit=1).items
    assert entry.app == "app-a"
    assert_indexes_consistent(queue)


# -- what a replay meets ---------------------------------------------------------------------


def test_endpoints_a_replay_cannot_reach_are_named_with_what_becomes_of_their_replays(
        queue: DeadLetterQueue) -> None:
    registry = EndpointRegistry()
    registry.disable("ep-a1", "gone: the receiver answered 410 Gone")
    registry.disable("ep-b", "maintenance")
    registry.pause("ep-a2")
    queue.add(letter("ep-removed", 1000))
    entries = selection.selected(OPERATOR, ["ep-a1/ev-0000", "ep-a1/ev-0003", "ep-b/ev-0002",
                                            "ep-a2/ev-0001", "ep-removed/ev-1000"])
    blocked = {item.endpoint_id: item for item in selection.blocked_entries(OPERATOR, entries)}
    assert {name: (item.state, item.count) for name, item in blocked.items()} == {
        "ep-a1": ("gone", 2), "ep-b": ("disabled", 1), "ep-a2": ("paused", 1),
        "ep-removed": ("removed", 1)}
    assert blocked["ep-b"].reason == "maintenance"
    assert "dead-lettered again at once" in blocked["ep-b"].outcome
    assert "endpoint_disabled" in blocked["ep-b"].outcome
    assert "endpoint_gone" in blocked["ep-a1"].outcome
    assert "until the endpoint is resumed" in blocked["ep-a2"].outcome
    in_bulk = selection.blocked_matching(OPERATOR, DeadLetterQuery(reason="rejected"))
    assert {item.endpoint_id: item.count for item in in_bulk} == {
        "ep-a1": 7, "ep-a2": 7, "ep-b": 7}  # a removed endpoint only by name
    scoped = selection.blocked_matching(TENANT, DeadLetterQuery())
    assert [item.endpoint_id for item in scoped] == ["ep-a1", "ep-a2"]
    registry.enable("ep-b")
    assert [item.endpoint_id for item in selection.blocked_entries(OPERATOR, entries)] == [
        "ep-a1", "ep-a2", "ep-removed"]


# -- the list: newest first, with the last error ---------------------------------------------


def test_the_list_is_newest_first_with_exact_cursor_paging_and_oldest_on_request(
        queue: DeadLetterQueue) -> None:
    everything = sorted(dead_letters.find(OPERATOR, DeadLetterQuery()),
                        key=lambda entry: entry.dead_lettered_at)
    for query, expected in ((DeadLetterQuery(), everything[::-1]),
                            (DeadLetterQuery(order="oldest"), everything)):
        seen, cursor = [], None
        while True:
            page = dead_letters.list_page(OPERATOR, query, cursor, limit=7)
            seen += [entry.id for entry in page.items]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [entry.id for entry in expected]


def test_the_list_shows_the_receivers_last_answer_without_a_read_per_row(
        queue: DeadLetterQueue) -> None:
    long_body = '{"error":"bad signature"}' + "x" * 1000
    queue.add(DeadLetter("ep-a1", "kept", "order.paid", {}, "rejected", attempts=1,
                         last_status=400, last_response=long_body, dead_lettered_at=T0 + 200))
    # An entry moved from the retry schedule keeps no answer: the event's history has it.
    queue.add(DeadLetter("ep-a1", "moved", "order.paid", {}, "endpoint_gone", attempts=2,
                         last_status=500, dead_lettered_at=T0 + 201))
    record = AttemptRecord(attempt=2, at=T0 + 150, outcome="failed", status=500, latency=0.1,
                           response="upstream timeout")
    queue.redis.rpush(keys.history_key("ep-a1", "moved"), record.to_json())
    stored = queue.get("ep-a1/kept")
    assert stored is not None and stored.last_response.startswith('{"error":"bad signature"}')
    assert len(stored.last_response.encode()) == 256  # HOOKLINE_HISTORY_BODY_BYTES
    dead_letters.list_page(OPERATOR, DeadLetterQuery(endpoint="ep-a1"))  # indexed once
    counting = CountingPipelines(queue.redis)
    page = dead_letters.list_page(OPERATOR, DeadLetterQuery(endpoint="ep-a1"), limit=10,
                                  pages=DeadLetterPages(DeadLetterQueue(counting)))
    shown = {entry.event_id: entry for entry in page.items}
    assert list(shown)[:2] == ["moved", "kept"]  # newest first
    assert shown["moved"].last_response == "upstream timeout"
    assert shown["kept"].last_response == stored.last_response
    # Every row without an answer of its own looked up in the history in one round trip.
    assert counting.pipelines == 1
