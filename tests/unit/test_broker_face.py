"""The broker face: what each broker Hookline supports does beside its queues, answered in
``hookline/transport/face.py``, and no module above the transport or beside the settings
asking which broker is configured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hookline.core import config
from hookline.core.config import load_settings
from hookline.transport.face import BrokerFace, broker_face

PACKAGE = Path(__file__).resolve().parents[2] / "hookline"
#: Where the broker's kind may be asked: the transport, which the face belongs to, and the
#: settings that work it out from the URLs.
ALLOWED = ("transport/", "core/config.py")
#: What asks for the broker's kind: the settings' answers, the URL helpers, or the broker URL
#: compared or its scheme looked at.
KIND_QUESTION = re.compile(
    r"broker_is_state|broker_amqp|broker_is_amqp|broker_scheme"
    r"|broker_url\s*(?:==|!=|\.startswith|\.lower|\.split|\[)"
    r"|(?:==|!=)\s*[\w.()]*broker_url"
    r"|\bin\s+[\w.()]*broker_url"
    r"|is_sentinel\([^)]*broker_url")

REDIS = "redis://127.0.0.1:6379/0"
SENTINEL = {"REDIS_URL": "sentinel://10.0.0.1:26379,10.0.0.2:26379/0",
            "HOOKLINE_SENTINEL_MASTER": "hookline"}
RABBITMQ = {"REDIS_URL": REDIS, "HOOKLINE_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"}
FOREIGN_REDIS = {"REDIS_URL": REDIS, "HOOKLINE_BROKER_URL": "redis://127.0.0.1:6380/0"}


def _kind_questions(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if KIND_QUESTION.search(line)]


def test_no_module_outside_the_transport_and_the_settings_asks_which_broker_is_configured(
        ) -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ALLOWED):
            continue
        found += [f"hookline/{relative}: {line}"
                  for line in _kind_questions(path.read_text(encoding="utf-8"))]
    assert not found, "ask hookline.transport.face.broker_face() instead:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "if config.broker_is_state:",
    "amqp = settings().broker_amqp",
    "if broker_is_amqp(config.broker_url):",
    "return config.broker_url.startswith(('sentinel://',))",
    "own = config.broker_url == config.redis_url",
    "if config.redis_url != config.broker_url:",
    "if sentinel.is_sentinel(config.broker_url):",
])
def test_the_check_finds_each_way_of_asking_for_the_broker_s_kind(line: str) -> None:
    assert _kind_questions(line) == [line]


@pytest.mark.parametrize("line", [
    "broker = redis_for(config.broker_url, decode_responses=False)",
    "raise BrokerUnreachable(str(exc), url=config.broker_url, cause=exc)",
    'f"the Celery broker at {redacted(settings().broker_url)}"',
])
def test_the_check_lets_the_broker_url_be_used_to_connect_or_shown(line: str) -> None:
    assert _kind_questions(line) == []


def test_hookline_s_own_plain_redis_does_everything_in_its_scripts() -> None:
    face = BrokerFace.of(load_settings({"REDIS_URL": REDIS}))
    assert face == BrokerFace(
        receipts=True, doorbell=True, fair_waiting=True, ordered_lines=True,
        claims_on_publish=True, releases_by_script=True, pushes_by_script=True,
        parks_in_worker=False, paces_requeue=False, worker_registry=True,
        queues_are_lists=True, url_variable="REDIS_URL")


def test_the_same_url_named_twice_is_still_hookline_s_own_redis() -> None:
    face = BrokerFace.of(load_settings({"REDIS_URL": REDIS, "HOOKLINE_BROKER_URL": REDIS}))
    assert face == BrokerFace.of(load_settings({"REDIS_URL": REDIS}))


def test_hookline_s_own_redis_behind_sentinel_pushes_a_fan_out_through_kombu() -> None:
    face = BrokerFace.of(load_settings(SENTINEL))
    assert face.receipts and face.doorbell and face.fair_waiting and face.ordered_lines
    assert face.claims_on_publish and face.releases_by_script
    assert not face.pushes_by_script  # its publishes wait for the replicas
    assert not face.parks_in_worker and not face.paces_requeue
    assert face.worker_registry and face.queues_are_lists and face.url_variable == "REDIS_URL"


def test_rabbitmq_leaves_the_receipts_waiting_lists_and_parking_to_the_worker() -> None:
    face = BrokerFace.of(load_settings(RABBITMQ))
    assert face == BrokerFace(
        receipts=False, doorbell=False, fair_waiting=False, ordered_lines=False,
        claims_on_publish=False, releases_by_script=False, pushes_by_script=False,
        parks_in_worker=True, paces_requeue=True, worker_registry=False,
        queues_are_lists=False, url_variable="HOOKLINE_BROKER_URL")


def test_a_redis_broker_apart_from_hookline_s_redis_keeps_only_its_lists_and_registry() -> None:
    face = BrokerFace.of(load_settings(FOREIGN_REDIS))
    assert face == BrokerFace(
        receipts=False, doorbell=False, fair_waiting=False, ordered_lines=False,
        claims_on_publish=False, releases_by_script=False, pushes_by_script=False,
        parks_in_worker=False, paces_requeue=True, worker_registry=True,
        queues_are_lists=True, url_variable="HOOKLINE_BROKER_URL")


def test_the_face_is_worked_out_once_per_settings() -> None:
    try:
        first = config.configure(RABBITMQ)
        assert broker_face() is broker_face(first) and broker_face().parks_in_worker
        config.configure({"REDIS_URL": REDIS})
        assert broker_face().ordered_lines and not broker_face().parks_in_worker
    finally:
        config.configure()
