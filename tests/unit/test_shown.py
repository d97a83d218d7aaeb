"""What Flower and the worker's log are shown of a delivery's arguments: never the payload."""

from __future__ import annotations

from hookline.core.messages import shown_keywords, shown_positional


def test_flower_is_shown_the_payload_size_never_its_content():
    secret = {"card": "4111 1111", "nested": [{"deep": "4111"}]}
    assert shown_positional(["shop", "order.created", secret, "ev-1"]) == (
        "('shop', 'order.created', '<payload: 47 bytes>', 'ev-1')")
    assert "4111" not in shown_positional(["shop", {"x": "4111"}, secret, ["4111"]])
    assert "not JSON" in shown_positional(["shop", "t", {1j}])
    assert "4111" not in shown_positional("4111" * 30)
    shown = shown_keywords({"payload": secret, "event_id": "e", "attempts": 2, "x": ["4111"]})
    assert shown == ("{'payload': '<payload: 47 bytes>', 'event_id': 'e', 'attempts': 2, "
                     "'x': '<list>'}")
