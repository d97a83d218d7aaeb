"""``hookline app``, ``endpoint add|update --app --events --channels``, ``hookline publish``,
``hookline event show`` for a published event and ``hookline event-type``, against the real
Redis of the tests. What ``publish`` enqueues is taken off the broker after each test
(the ``published`` fixture); the endpoints answer on a real receiver, in case a worker of
another test module is running."""

from __future__ import annotations

import json

import pytest

from examples.receiver import Reply, always
from hookline.store.fanouts import FanoutLog
from tests.support.cli import fails, json_out, succeeds


@pytest.fixture
def shop(receiver, published):
    """Application ``shop`` with endpoints ``orders`` (order.*), ``eu`` (channel eu) and
    ``all`` (no filter)."""
    succeeds("app", "add", "shop", "--name", "The Shop", "--description", "a tenant")
    for name, options in {"orders": ["--events", "order.*"], "eu": ["--channels", "eu"],
                          "all": []}.items():
        url = receiver.route(f"/{name}", always(Reply(204)))
        succeeds("endpoint", "add", name, "--url", url, "--app", "shop", *options)
    return "shop"


def test_app_add_list_show_and_remove(shop):
    listed = json_out("app", "list")
    assert [(item["id"], item["name"], item["endpoints"]) for item in listed] == [
        ("shop", "The Shop", 3)]
    assert "shop" in succeeds("app", "list").stdout
    shown = json_out("app", "show", "shop")
    assert {item["id"]: (item["event_types"], item["channels"])
            for item in shown["endpoints"]} == {
        "orders": (["order.*"], []), "eu": ([], ["eu"]), "all": ([], [])}
    text = succeeds("app", "show", "shop").stdout
    assert "order.*" in text and "every type; channels eu" in text
    refused = fails("app", "remove", "shop")
    assert "still has 3 endpoint(s) (all, eu, orders)" in refused.stderr
    for name in ("orders", "eu"):
        succeeds("endpoint", "remove", name, "--yes")
    succeeds("endpoint", "update", "all", "--app", "none")
    assert json_out("endpoint", "show", "all")["app"] is None
    assert "removed application shop" in succeeds("app", "remove", "shop").stdout
    assert json_out("app", "list") == []
    assert "no application 'shop'" in fails("app", "show", "shop").stderr


def test_app_add_refuses_a_bad_or_taken_id(shop):
    assert "application id 'bad id' is invalid" in fails("app", "add", "bad id").stderr
    assert "exists already" in fails("app", "add", "shop").stderr


def test_endpoint_subscriptions_are_shown_and_updated(shop):
    shown = json_out("endpoint", "show", "orders")
    assert (shown["app"], shown["event_types"], shown["channels"]) == ("shop", ["order.*"], [])
    assert "order.*" in succeeds("endpoint", "show", "orders").stdout
    succeeds("endpoint", "update", "orders", "--events", "order.created,invoice.*",
             "--channels", "eu,us")
    shown = json_out("endpoint", "show", "orders")
    assert (shown["event_types"], shown["channels"]) == (["order.created", "invoice.*"],
                                                         ["eu", "us"])
    succeeds("endpoint", "update", "orders", "--events", "none", "--channels", "none")
    shown = json_out("endpoint", "show", "orders")
    assert (shown["event_types"], shown["channels"]) == ([], [])


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--events", "order.*.created", "event filter 'order.*.created' is invalid"),
    ("--events", "order.created,order*", "event filter 'order*' is invalid"),
    ("--channels", "eu,e u", "channel 'e u' is invalid"),
    ("--app", "nowhere", "no application 'nowhere'"),
])
def test_endpoint_add_and_update_refuse_bad_subscriptions_naming_them(shop, option, value,
                                                                      message):
    assert message in fails("endpoint", "add", "new", "--url", "http://127.0.0.1:9/",
                            "--app", "shop", option, value).stderr
    assert message in fails("endpoint", "update", "orders", option, value).stderr


def test_publish_prints_the_event_id_and_event_show_lists_every_receiver(shop, receiver):
    event_id = succeeds("publish", "shop", "--type", "order.created", "--payload",
                        '{"order": 1}', "--id", "evt-cli-1", "--channel", "eu").stdout.strip()
    assert event_id == "evt-cli-1"
    assert FanoutLog().get("shop", event_id).receivers == ("all", "eu", "orders")
    text = succeeds("event", "show", event_id).stdout
    assert "shop" in text and "3 (fixed at publish)" in text
    for name in ("all", "eu", "orders"):
        assert f"\n{name}" in text
    report = json_out("event", "show", event_id, "--app", "shop")
    [record] = report
    assert record["receivers"] == ["all", "eu", "orders"]
    assert {item["endpoint_id"] for item in record["deliveries"]} == {"all", "eu", "orders"}
    assert all(item["state"] in ("pending", "in_flight", "delivered")
               for item in record["deliveries"])
    # Without the channel: the channel-only endpoint is not a receiver.
    other = succeeds("publish", "shop", "--type", "order.created", "--payload",
                     '{"order": 2}').stdout.strip()
    assert FanoutLog().get("shop", other).receivers == ("all", "orders")


@pytest.mark.parametrize(("args", "message"), [
    (["nowhere", "--type", "a.b", "--payload", "{}"], "no application 'nowhere'"),
    (["shop", "--type", "a\nb", "--payload", "{}"], "event type"),
    (["shop", "--type", "a.b", "--payload", "{nope"], "is not valid JSON"),
    (["shop", "--type", "a.b", "--payload", "{}", "--channel", "e u"],
     "channel 'e u' is invalid"),
    (["shop", "--type", "a.b", "--payload", "{}", "--id", "has space"], "event id"),
])
def test_publish_refuses_bad_input_with_a_specific_error(shop, args, message):
    assert message in fails("publish", *args).stderr


def test_publish_refuses_a_used_id_with_other_content(shop):
    succeeds("publish", "shop", "--type", "order.created", "--payload", "{}", "--id", "e1")
    assert succeeds("publish", "shop", "--type", "order.created", "--payload", "{}",
                            "--id", "e1").stdout.strip() == "e1"
    assert "already published to application 'shop'" in fails(
        "publish", "shop", "--type", "order.created", "--payload", '{"x": 1}', "--id",
        "e1").stderr


def test_event_type_catalog_with_a_schema(shop, tmp_path):
    schema = tmp_path / "order.json"
    schema.write_text(json.dumps({"type": "object", "required": ["total"],
                                  "properties": {"total": {"type": "number"}}}))
    assert "with its schema" in succeeds("event-type", "add", "order.created", "--schema",
                                         str(schema), "--description", "An order").stdout
    succeeds("event-type", "add", "order.paid")
    assert [item["name"] for item in json_out("event-type", "list")] == ["order.created",
                                                                         "order.paid"]
    assert "order.created" in succeeds("event-type", "list").stdout
    shown = json_out("event-type", "show", "order.created")
    assert shown["schema"]["required"] == ["total"] and shown["description"] == "An order"
    assert '"required"' in succeeds("event-type", "show", "order.created").stdout
    refused = fails("publish", "shop", "--type", "order.created", "--payload",
                    '{"total": "ten"}')
    assert "$.total: 'ten' is not of type 'number'" in refused.stderr
    assert "not in the event catalog" in fails("publish", "shop", "--type", "user.created",
                                               "--payload", "{}").stderr
    succeeds("publish", "shop", "--type", "order.created", "--payload", '{"total": 10}')
    # Subscriptions must match a catalog type once it is in use.
    assert "matches no type in the event catalog" in fails(
        "endpoint", "update", "orders", "--events", "invoice.*").stderr
    succeeds("endpoint", "update", "orders", "--events", "order.paid")
    assert "exists already" not in succeeds("event-type", "remove", "order.paid").stdout
    assert "not in the catalog" in fails("event-type", "show", "order.paid").stderr


@pytest.mark.parametrize(("content", "message"), [
    ('{"type": "nonsense"}', "not a valid JSON Schema at $.type"),
    ("{broken", "is not valid JSON"),
    (None, "cannot read schema file"),
])
def test_event_type_add_refuses_a_bad_schema(tmp_path, content, message):
    path = tmp_path / "schema.json"
    if content is not None:
        path.write_text(content)
    assert message in fails("event-type", "add", "order.created", "--schema",
                            str(path)).stderr
    assert "invalid" in fails("event-type", "add", "order.*").stderr
