"""A host's operational-event receivers, as a worker imports them (``HOOKLINE_WORKER_IMPORTS``):
each event is recorded in a Redis list the test reads, and one callback always raises (it must
change nothing). Imported by the worker only: importing it connects its callbacks."""

from __future__ import annotations

import json

import hookline.operational
from hookline.core.operational_events import OperationalEvent
from hookline.store import connection as store

#: The list the events are recorded in (a hookline: key: each test starts without it).
RECORD_KEY = "hookline:test:operational"


@hookline.operational.connect("*")
def record(event: OperationalEvent) -> None:
    store.client().rpush(RECORD_KEY, json.dumps({"kind": event.kind,
                                                 "endpoint_id": event.endpoint_id,
                                                 "event_id": event.event_id,
                                                 **event.data}))


@hookline.operational.connect("*")
def broken(event: OperationalEvent) -> None:
    raise RuntimeError("a receiver with a bug")

