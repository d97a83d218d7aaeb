"""How full the outbox is, for ``hookline stats``, the console's overview and the
``hookline metrics`` gauges: the rows waiting and the age of the oldest, read from the host's
database (one ``COUNT(*)`` and ``MIN(due_at)``; the database's own cost grows with the backlog,
so the gauges are read at scrape time, not by the relays)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hookline.core.config import Settings, settings
from hookline.core.env import ConfigError
from hookline.outbox.relay import Outage, Relay, relay_from_settings


@dataclass(frozen=True)
class OutboxDepth:
    """The outbox at one look; ``waiting`` is None when the database could not be read
    (``error`` says why, in a few words)."""

    waiting: int | None
    #: Seconds since the oldest waiting row was due (None: no row waits).
    oldest_age: float | None
    #: Where the rows are (no password).
    database: str
    error: str | None = None


_relays: dict[tuple[str, str], Relay] = {}
_lock = threading.Lock()


def _relay(config: Settings) -> Relay:
    """One relay object per database and process, for its connection (never started)."""
    key = (config.outbox_url, config.outbox_database)
    with _lock:
        if key not in _relays:
            _relays[key] = relay_from_settings(config)
        return _relays[key]


def outbox_depth(config: Settings | None = None) -> OutboxDepth | None:
    """The outbox's depth, or None when it is off (``HOOKLINE_OUTBOX``)."""
    config = config or settings()
    if not config.outbox:
        return None
    try:
        relay = _relay(config)
    except ConfigError as exc:
        return OutboxDepth(None, None, "(none)", str(exc))
    try:
        waiting, oldest = relay.depth()
    except Outage as outage:
        return OutboxDepth(None, None, relay.database.describe(), str(outage))
    age = None if oldest is None else round(max(0.0, time.time() - oldest), 3)
    return OutboxDepth(waiting, age, relay.database.describe())


class OutboxCollector(Collector):
    """The outbox's gauges, read at each scrape (``hookline metrics`` serves them when the
    outbox is on)."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        found = outbox_depth()
        if found is None:
            return
        up = GaugeMetricFamily("hookline_outbox_up",
                               "1 if the last scrape could read the outbox's database.")
        up.add_metric([], 0 if found.waiting is None else 1)
        yield up
        if found.waiting is None:
            return
        rows = GaugeMetricFamily("hookline_outbox_rows",
                                 "Events waiting in the outbox (the host's database) for a "
                                 "relay to publish them.")
        rows.add_metric([], found.waiting)
        yield rows
        age = GaugeMetricFamily("hookline_outbox_oldest_age_seconds",
                                "Seconds since the oldest waiting outbox row was due (0 when "
                                "none waits): how far behind the relays are.")
        age.add_metric([], found.oldest_age or 0.0)
        yield age
