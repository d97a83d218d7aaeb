"""Operational events reported once: a marker per occurrence (``keys.occurrence_key``).

Two workers may meet the same occurrence (each of several events in flight gets the 410 that
disables their endpoint): the first to set the marker reports it, the others do not."""

from __future__ import annotations

from typing import Any

from hookline.store import connection as store
from hookline.store import keys

#: Seconds an occurrence is remembered.
REMEMBERED = 7 * 86400


def first_report(endpoint_id: str, occurrence_id: str, redis_client: Any = None) -> bool:
    """True for the first caller with this occurrence (within :data:`REMEMBERED`)."""
    client = redis_client or store.client()
    return bool(client.set(keys.occurrence_key(endpoint_id, occurrence_id), "1", nx=True,
                           ex=REMEMBERED))
