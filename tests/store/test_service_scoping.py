"""The service layer's two guards, on a real Redis with no worker: a read-only actor is refused
every change (ReadOnly, nothing changed, nothing audited), and an actor scoped to one
application gets NotFound for anything of another, with the very message an unknown one
gets, so nothing tells it apart."""

from __future__ import annotations

import pytest

from hookline.core.messages import RETRY_QUEUE, TASK_NAME
from hookline.delivery.publisher import publishing_app
from hookline.service import apps, audit, endpoint_actions, endpoints, events, schedule, stats
from hookline.service.actor import Actor, NotFound, ReadOnly, cli_actor
from hookline.store.apps import AppRegistry
from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue
from hookline.store.endpoints import EndpointRegistry
from hookline.store.schedule import RetrySchedule
from hookline.transport.envelope import build_message

OPERATOR = Actor(name="alice", session="s-1")
VIEWER = Actor(name="victor", session="s-2", can_act=False)
TENANT_A = Actor(name="portal:app-a", session="s-3", app_scope="app-a")
TENANT_A_VIEWER = Actor(name="portal:app-a", session="s-4", can_act=False, app_scope="app-a")


def retry_message(endpoint_id: str, event_id: str) -> str:
    return build_message(publishing_app(), task_name=TASK_NAME, task_id=f"t-{event_id}",
                         args=[endpoint_id, "order.created", {"n": 1}],
                         kwargs={"event_id": event_id, "attempts": 1}, retries=1,
                         queue=RETRY_QUEUE)


@pytest.fixture
def two_apps(quiet_redis):
    """app-a with ep-a, app-b with ep-b, and ep-free in no application; a dead letter and a
    scheduled retry at each endpoint."""
    AppRegistry().add("app-a")
    AppRegistry().add("app-b")
    registry = EndpointRegistry()
    registry.add("ep-a", "http://127.0.0.1:9/a/hook", app="app-a")
    registry.add("ep-b", "http://127.0.0.1:9/b/hook", app="app-b")
    registry.add("ep-free", "http://127.0.0.1:9/free/hook")
    for endpoint_id in ("ep-a", "ep-b"):
        DeadLetterQueue().add(DeadLetter(endpoint_id=endpoint_id, event_id="evt-1",
                                         event_type="order.created", payload={"n": 1},
                                         reason="exhausted", attempts=3))
        RetrySchedule().park(endpoint_id=endpoint_id, event_id="evt-2", countdown=60,
                             message=retry_message(endpoint_id, "evt-2"))
    return quiet_redis


MUTATIONS = [
    ("pause", lambda actor: endpoint_actions.pause(actor, "ep-a")),
    ("resume", lambda actor: endpoint_actions.resume(actor, "ep-a")),
    ("disable", lambda actor: endpoint_actions.disable(actor, "ep-a")),
    ("enable", lambda actor: endpoint_actions.enable(actor, "ep-a")),
    ("reset", lambda actor: endpoint_actions.reset_breaker(actor, "ep-a")),
    ("rotate", lambda actor: endpoint_actions.rotate_secret(actor, "ep-a")),
    ("update", lambda actor: endpoint_actions.update_endpoint(actor, "ep-a", timeout=3.0)),
    ("remove", lambda actor: endpoint_actions.remove_endpoint(actor, "ep-a")),
    ("add", lambda actor: endpoint_actions.add_endpoint(actor, "ep-new", "http://127.0.0.1:9/n/",
                                                        app="app-a")),
    ("replay", lambda actor: events.replay_event(actor, "ep-a", "evt-1")),
    ("add app", lambda actor: apps.add_app(actor, "app-c")),
    ("remove app", lambda actor: apps.remove_app(actor, "app-b")),
    ("add type", lambda actor: apps.add_event_type(actor, "order.created")),
]


@pytest.mark.parametrize("actor", [VIEWER, TENANT_A_VIEWER], ids=["viewer", "tenant viewer"])
@pytest.mark.parametrize("name, mutation", MUTATIONS, ids=[name for name, _ in MUTATIONS])
def test_a_read_only_actor_is_refused_every_change(two_apps, actor, name, mutation):
    before = EndpointRegistry().require("ep-a")
    with pytest.raises(ReadOnly, match=f"^read-only: {actor.name} cannot "):
        mutation(actor)
    assert EndpointRegistry().require("ep-a") == before
    assert EndpointRegistry().get("ep-new") is None
    assert DeadLetterQueue().get("ep-a/evt-1") is not None
    assert audit.recent(OPERATOR).items == []


def test_a_read_only_actor_still_reads(two_apps):
    assert endpoints.endpoint_health(VIEWER, "ep-a").summary.id == "ep-a"
    assert {item.id for item in endpoints.all_endpoints(VIEWER)} == {"ep-a", "ep-b", "ep-free"}


OUT_OF_SCOPE = [
    ("health", lambda actor: endpoints.endpoint_health(actor, "ep-b")),
    ("summary", lambda actor: endpoints.endpoint_summary(actor, "ep-b")),
    ("breaker", lambda actor: endpoints.breaker(actor, "ep-b")),
    ("pause", lambda actor: endpoint_actions.pause(actor, "ep-b")),
    ("resume", lambda actor: endpoint_actions.resume(actor, "ep-b")),
    ("disable", lambda actor: endpoint_actions.disable(actor, "ep-b")),
    ("enable", lambda actor: endpoint_actions.enable(actor, "ep-b")),
    ("reset", lambda actor: endpoint_actions.reset_breaker(actor, "ep-b")),
    ("rotate", lambda actor: endpoint_actions.rotate_secret(actor, "ep-b")),
    ("update", lambda actor: endpoint_actions.update_endpoint(actor, "ep-b", timeout=3.0)),
    ("remove", lambda actor: endpoint_actions.remove_endpoint(actor, "ep-b")),
    ("free endpoint", lambda actor: endpoint_actions.pause(actor, "ep-free")),
    ("replay", lambda actor: events.replay_event(actor, "ep-b", "evt-1")),
    ("event at endpoint", lambda actor: events.find_event(actor, "evt-1", endpoint="ep-b")),
    ("schedule", lambda actor: schedule.soonest_retries(actor, endpoint="ep-b")),
    ("schedule list", lambda actor: schedule.list_retries(actor, endpoint="ep-b")),
    ("app", lambda actor: apps.app_detail(actor, "app-b")),
    ("app's endpoints", lambda actor: endpoints.list_endpoints(actor, app="app-b")),
]


@pytest.mark.parametrize("name, lookup", OUT_OF_SCOPE, ids=[name for name, _ in OUT_OF_SCOPE])
def test_a_scoped_actor_finds_nothing_of_another_application(two_apps, name, lookup):
    with pytest.raises(NotFound) as other:
        lookup(TENANT_A)
    assert EndpointRegistry().require("ep-b").enabled
    assert not EndpointRegistry().require("ep-b").paused
    assert DeadLetterQueue().get("ep-b/evt-1") is not None
    # Only the name: no hint that would read differently for something that does not exist.
    assert str(other.value) in ("no endpoint 'ep-b'", "no endpoint 'ep-free'",
                                "no application 'app-b'")


def test_out_of_scope_and_unknown_read_the_same(two_apps):
    with pytest.raises(NotFound) as other:
        endpoints.endpoint_health(TENANT_A, "ep-b")
    with pytest.raises(NotFound) as unknown:
        endpoints.endpoint_health(TENANT_A, "ep-zz")
    assert str(other.value).replace("ep-b", "X") == str(unknown.value).replace("ep-zz", "X")
    with pytest.raises(NotFound) as operator_unknown:
        endpoints.endpoint_health(OPERATOR, "ep-zz")
    assert str(operator_unknown.value) == "no endpoint 'ep-zz': add it with 'hookline endpoint add'"


def test_a_scoped_actor_lists_and_acts_on_its_own_only(two_apps):
    assert [item.id for item in endpoints.all_endpoints(TENANT_A)] == ["ep-a"]
    assert [item.id for item in endpoints.list_endpoints(TENANT_A).items] == ["ep-a"]
    assert [listed.app.id for listed in apps.list_apps(TENANT_A)] == ["app-a"]
    assert [item.endpoint_id for item in schedule.due_counts(TENANT_A).items] == ["ep-a"]
    assert schedule.schedule_stats(TENANT_A).total == 1
    assert [retry.endpoint_id for retry in schedule.soonest_retries(TENANT_A).items] == ["ep-a"]
    found = events.find_event(TENANT_A, "evt-1")
    assert [delivery.endpoint_id for delivery in found.deliveries] == ["ep-a"]
    assert stats.series(TENANT_A) == []
    snapshot = stats.stats_snapshot(TENANT_A)
    assert [item.id for item in snapshot.endpoints] == ["ep-a"]
    assert snapshot.queues is None and snapshot.dead_letters is None
    endpoint_actions.pause(TENANT_A, "ep-a")
    assert EndpointRegistry().require("ep-a").paused


def test_a_scoped_actor_adds_endpoints_to_its_own_application_only(two_apps):
    added = endpoint_actions.add_endpoint(TENANT_A, "ep-a2", "http://127.0.0.1:9/a2/hook")
    assert added.summary.app == "app-a" and added.secret
    with pytest.raises(NotFound):
        endpoint_actions.add_endpoint(TENANT_A, "ep-a3", "http://127.0.0.1:9/a3/", app="app-b")
    with pytest.raises(NotFound):
        endpoint_actions.update_endpoint(TENANT_A, "ep-a", app="app-b")
    with pytest.raises(NotFound):
        endpoint_actions.update_endpoint(TENANT_A, "ep-a", app="none")
    assert EndpointRegistry().get("ep-a3") is None
    assert EndpointRegistry().require("ep-a").app == "app-a"


def test_a_tenant_that_may_act_still_cannot_change_applications_or_the_catalog(two_apps):
    for change in (lambda: apps.add_app(TENANT_A, "app-c"),
                   lambda: apps.remove_app(TENANT_A, "app-a"),
                   lambda: apps.add_event_type(TENANT_A, "order.created")):
        with pytest.raises(ReadOnly):
            change()
    assert AppRegistry().get("app-c") is None


def test_the_cli_actor_names_the_user_and_the_process():
    actor = cli_actor()
    assert actor.name.startswith("cli:") and actor.session.startswith("cli:")
    assert actor.can_act and actor.app_scope is None
