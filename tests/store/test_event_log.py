"""The event log against a real Redis: rows written where the change happens (settle, a held
endpoint's park, a dead letter), retention by age and by count per endpoint, the filters
alone and together, exact cursor paging across shards, and a tenant's scope."""

from __future__ import annotations

import time
import uuid

import pytest

from hookline.core import config
from hookline.service import event_log as service
from hookline.service.actor import Actor, NotFound
from hookline.store import connection as store
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.event_log import EventLog, log_key, log_shards, rows_key
from hookline.store.event_log_pages import EventLogPages, LogFilter
from hookline.store.gates import Gate
from hookline.store.history import AttemptRecord

OPERATOR = Actor(name="alice", session="s-1")


@pytest.fixture
def settings_of():
    """Set event log settings for one test (the environment's again after)."""
    def apply(**overrides: str) -> None:
        config.configure(overrides)

    yield apply
    config.configure()


def record(attempt: int, outcome: str, status: int | None) -> AttemptRecord:
    return AttemptRecord(attempt=attempt, at=time.time(), outcome=outcome, status=status,
                         latency=0.01)


def rows(page) -> list[tuple[str, str, str]]:
    return [(row.endpoint_id, row.event_id, row.status) for row in page.rows]


def everything(pages: EventLogPages, selection: LogFilter, limit: int):
    """Every row the filter selects, page by page; and the pages' sizes."""
    found, sizes, after = [], [], None
    while True:
        page = pages.page(selection, limit=limit, after=after)
        found.extend(page.rows)
        sizes.append(len(page.rows))
        if page.after is None:
            return found, sizes
        after = page.after


def test_settle_logs_delivered_and_retrying_with_type_attempts_and_status():
    endpoint = EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/h")
    gate = Gate()
    gate.admit(endpoint.id, "evt-1", "t1")
    gate.settle(endpoint.id, "evt-1", "t1", "failed", record=record(1, "failed", 503),
                event_type="order.created")
    row = EventLogPages().get(endpoint.id, "evt-1")
    assert (row.status, row.event_type, row.attempts, row.last_status) == (
        "retrying", "order.created", 1, 503)
    first_seen = row.first_seen
    gate.admit(endpoint.id, "evt-1", "t2")
    gate.settle(endpoint.id, "evt-1", "t2", "delivered", record=record(2, "delivered", 200),
                event_type="order.created")
    row = EventLogPages().get(endpoint.id, "evt-1")
    assert (row.status, row.attempts, row.last_status) == ("delivered", 2, 200)
    assert row.first_seen == first_seen and row.changed_at >= first_seen
    page = EventLogPages().page(LogFilter(), limit=10)
    assert rows(page) == [(endpoint.id, "evt-1", "delivered")]  # one row per event: the latest


def test_a_dead_letter_and_a_held_park_log_their_status():
    EventLog().record("ep-a", "evt-1", "retrying", event_type="invoice.paid", attempts=3,
                      last_status=500)
    EventLog().record_held([("ep-a", "evt-1", "")])
    row = EventLogPages().get("ep-a", "evt-1")
    assert (row.status, row.event_type, row.attempts, row.last_status) == (
        "held", "invoice.paid", 3, 500)  # a park keeps what it does not know
    DeadLetterQueue().add(DeadLetter("ep-a", "evt-1", "invoice.paid", {"secret": "x"},
                                     "exhausted", attempts=5, last_status=502))
    row = EventLogPages().get("ep-a", "evt-1")
    assert (row.status, row.attempts, row.last_status) == ("dead", 5, 502)
    stored = store.client().hget(rows_key("ep-a"), "evt-1")
    assert "secret" not in stored  # never a payload
    dead = EventLogPages().page(LogFilter(status="dead"), limit=5)
    assert rows(dead) == [("ep-a", "evt-1", "dead")]
    assert EventLogPages().page(LogFilter(status="held"), limit=5).rows == []


def test_a_conflicting_copy_does_not_mark_the_event_dead():
    EventLog().record("ep-a", "evt-1", "delivered", event_type="t", attempts=1)
    DeadLetterQueue().add(DeadLetter("ep-a", "evt-1", "t", {}, "conflict"))
    assert EventLogPages().get("ep-a", "evt-1").status == "delivered"


def test_retention_by_count_keeps_each_endpoints_latest(settings_of):
    settings_of(HOOKLINE_EVENT_LOG_PER_ENDPOINT="3")
    log = EventLog()
    now = int(time.time() * 1000)
    for n in range(5):
        log.record("ep-a", f"a{n}", "delivered", event_type="t", at_ms=now + n)
        log.record("ep-b", f"b{n}", "dead", event_type="t", at_ms=now + n)
    client = store.client()
    assert client.zcard(log_key("ep-a")) == 3
    assert client.hlen(rows_key("ep-a")) == 3 + 1  # and the upkeep's field
    found, _ = everything(EventLogPages(), LogFilter(), 10)
    assert sorted(row.event_id for row in found) == ["a2", "a3", "a4", "b2", "b3", "b4"]
    shard = log_shards(1)[0]
    assert client.zcard(shard.index("delivered", "t")) == 3  # the index forgot them too


def test_retention_by_age_trims_and_never_shows_older_rows(settings_of):
    settings_of(HOOKLINE_EVENT_LOG_RETENTION="60")
    log = EventLog()
    now = int(time.time() * 1000)
    log.record("ep-a", "old", "delivered", event_type="t", at_ms=now - 120_000)
    log.record("ep-b", "old", "delivered", event_type="t", at_ms=now - 120_000)
    assert EventLogPages().page(LogFilter(), limit=10).rows == []  # past the retention
    log.record("ep-a", "new", "delivered", event_type="t")
    client = store.client()
    assert client.zrange(log_key("ep-a"), 0, -1) == ["new"]
    assert sorted(client.hkeys(rows_key("ep-a"))) == [" upkeep", "new"]
    index = log_shards(1)[0].index("delivered", "t")
    assert client.zrange(index, 0, -1) == ["ep-a/new"]  # other endpoints' old entries too
    # a quiet endpoint's log expires: its retention plus the upkeep's interval (a tenth of it)
    assert 60_000 < client.pttl(log_key("ep-a")) <= 66_000


@pytest.fixture
def varied():
    """Rows of three endpoints, two type families and every status, a second apart."""
    log = EventLog()
    base = int(time.time() * 1000) - 100_000
    made = []
    statuses = ["delivered", "retrying", "held", "dead"]
    for n in range(40):
        endpoint_id = f"ep-{n % 3}"
        event_type = ("order.created", "order.paid", "invoice.sent")[n % 3 if n % 5 else 2]
        status = statuses[n % 4]
        log.record(endpoint_id, f"evt-{n:02d}", status, event_type=event_type, attempts=1,
                   at_ms=base + n * 1000)
        made.append((endpoint_id, f"evt-{n:02d}", status, event_type, (base + n * 1000) / 1e3))
    made.reverse()  # newest first
    return made


@pytest.mark.parametrize("selection, wanted", [
    (LogFilter(), lambda r: True),
    (LogFilter(endpoint_ids=["ep-1"]), lambda r: r[0] == "ep-1"),
    (LogFilter(type_prefix="order."), lambda r: r[3].startswith("order.")),
    (LogFilter(type_prefix="order.p"), lambda r: r[3] == "order.paid"),
    (LogFilter(status="dead"), lambda r: r[2] == "dead"),
    (LogFilter(endpoint_ids=["ep-2"], status="retrying"),
     lambda r: r[0] == "ep-2" and r[2] == "retrying"),
    (LogFilter(type_prefix="order.", status="delivered"),
     lambda r: r[3].startswith("order.") and r[2] == "delivered"),
    (LogFilter(endpoint_ids=["ep-0", "ep-1"], type_prefix="invoice", status="held"),
     lambda r: r[0] in ("ep-0", "ep-1") and r[3] == "invoice.sent" and r[2] == "held"),
])
def test_filters_alone_and_together_select_exactly_their_rows(varied, selection, wanted):
    found, _ = everything(EventLogPages(), selection, 4)
    expected = [(r[0], r[1], r[2]) for r in varied if wanted(r)]
    assert expected  # the data has some of each
    assert [(row.endpoint_id, row.event_id, row.status) for row in found] == expected


def test_a_time_window_selects_the_rows_changed_within_it(varied):
    since, until = varied[30][4], varied[10][4]
    found, _ = everything(EventLogPages(), LogFilter(since=since, until=until, status="dead"), 3)
    assert [row.event_id for row in found] == [
        r[1] for r in varied[10:31] if r[2] == "dead"]


def test_cursor_paging_is_exact_across_shards_with_equal_times():
    shards = 4
    log = EventLog(shards=shards)
    at = int(time.time() * 1000) - 5000
    expected = []
    for n in range(60):
        endpoint_id = f"ep-{n % 12}"
        log.record(endpoint_id, f"evt-{n:02d}", "delivered", event_type="t",
                   at_ms=at + n // 10)  # ten rows share each time
        expected.append((at + n // 10, f"{endpoint_id}/evt-{n:02d}"))
    expected.sort(reverse=True)
    client = store.client()
    assert sum(1 for shard in log.shards if client.exists(shard.index("delivered", "t"))) > 1
    pages = EventLogPages(shards=shards)
    for limit in (1, 7, 10, 60):
        found, sizes = everything(pages, LogFilter(), limit)
        assert [row.entry_id for row in found] == [entry for _, entry in expected]
        assert all(size == limit for size in sizes[:-1])
    # a row that changed after the cursor was taken appears once, at its new time
    first = pages.page(LogFilter(), limit=5)
    moved = first.rows[-1]
    log.record(moved.endpoint_id, moved.event_id, "dead", event_type="t")
    rest, _ = everything_after(pages, first.after)
    assert moved.entry_id not in [row.entry_id for row in rest]
    assert len(rest) == 55


def everything_after(pages: EventLogPages, after):
    found = []
    while after is not None:
        page = pages.page(LogFilter(), limit=9, after=after)
        found.extend(page.rows)
        after = page.after
    return found, None


def test_a_tenant_sees_only_its_applications_endpoints():
    AppRegistry().add("app-a")
    AppRegistry().add("app-b")
    registry = EndpointRegistry()
    registry.add("ep-a1", "http://127.0.0.1:9/a", app="app-a")
    registry.add("ep-b1", "http://127.0.0.1:9/b", app="app-b")
    log = EventLog()
    log.record("ep-a1", "evt-a", "dead", event_type="t")
    log.record("ep-b1", "evt-b", "dead", event_type="t")
    tenant = Actor(name="portal:app-a", session="s", app_scope="app-a")
    listing = service.list_page(tenant, service.LogQuery())
    assert [row.entry_id for row in listing.items] == ["ep-a1/evt-a"]
    with pytest.raises(NotFound) as other:
        service.list_page(tenant, service.LogQuery(endpoint="ep-b1"))
    with pytest.raises(NotFound) as unknown:
        service.list_page(tenant, service.LogQuery(endpoint="ep-nope"))
    assert str(other.value).replace("ep-b1", "X") == str(unknown.value).replace("ep-nope", "X")
    everyone = service.list_page(OPERATOR, service.LogQuery())
    assert {row.entry_id for row in everyone.items} == {"ep-a1/evt-a", "ep-b1/evt-b"}


@pytest.mark.parametrize("params, problem", [
    ({"status": "lost"}, "status 'lost' is not one of delivered, retrying, held, dead"),
    ({"endpoint": "no/such"}, "endpoint 'no/such' is not an endpoint id"),
    ({"since": "yesterday"}, "since: 'yesterday' is not a time"),
    ({"since": "1h", "until": "2h"}, "since is later than until"),
])
def test_a_bad_filter_value_is_refused_in_one_line(params, problem):
    with pytest.raises(service.InvalidQuery) as refused:
        service.LogQuery.from_params(params)
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_a_bad_cursor_is_refused():
    with pytest.raises(ValueError, match="not an event log position"):
        service.list_page(OPERATOR, service.LogQuery(), cursor="%%%")


def test_an_unreadable_row_is_written_anew_and_never_fails_the_settle():
    endpoint = EndpointRegistry().add(f"ep-{uuid.uuid4().hex[:8]}", "http://127.0.0.1:9/h")
    client = store.client()
    for garbage in ("not json", '["d"]', '[1, 2, 3, 4, 5, 6]'):
        client.hset(rows_key(endpoint.id), "evt-1", garbage)
        gate = Gate()
        gate.admit(endpoint.id, "evt-1", "t1")
        settled = gate.settle(endpoint.id, "evt-1", "t1", "failed",
                              record=record(1, "failed", 500), event_type="order.paid")
        assert not settled.fenced
        row = EventLogPages().get(endpoint.id, "evt-1")
        assert (row.status, row.event_type, row.last_status) == ("retrying", "order.paid", 500)
