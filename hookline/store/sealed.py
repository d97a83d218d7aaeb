"""The endpoints' sealed credential fields, all of them at once: what keys they need
(a worker's check at start, ``hookline secrets status``) and moving them to the newest key
(``hookline secrets reencrypt``). One endpoint's fields are sealed and opened by
``hookline.core.endpoint`` (``seal_field``, ``open_field``) with :mod:`hookline.core.sealing`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hookline.core import sealing
from hookline.core.config import settings
from hookline.core.endpoint import SEALED_FIELDS, SealedRecordError, open_field, seal_field
from hookline.store import connection as store
from hookline.store import keys
from hookline.store.endpoints import registered_ids
from hookline.store.lua import RESEAL_ENDPOINT

#: Endpoints read per round trip.
_BATCH = 500
#: Times one endpoint is read again when it changed under ``reencrypt``.
_RETRIES = 5


@dataclass
class Census:
    """What the endpoints' credential fields are sealed with: ``fields`` counts them by key id
    (``plain`` for those stored in plain text); ``unreadable`` holds the error of each
    endpoint a field of which does not open with the keys configured."""

    endpoints: int = 0
    fields: Counter[str] = field(default_factory=Counter)
    unreadable: list[SealedRecordError] = field(default_factory=list)

    @property
    def plain(self) -> int:
        return self.fields["plain"]


def _stored(redis_client: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """(endpoint id, {field: stored value}) for every endpoint, a batch per round trip."""
    ids = registered_ids(redis_client)
    for start in range(0, len(ids), _BATCH):
        batch = ids[start:start + _BATCH]
        pipe = redis_client.pipeline(transaction=False)
        for endpoint_id in batch:
            pipe.hmget(keys.endpoint_key(endpoint_id), "url", *SEALED_FIELDS)
        for endpoint_id, (url, *values) in zip(batch, pipe.execute(), strict=True):
            if url:
                yield endpoint_id, {name: value or "" for name, value in
                                    zip(SEALED_FIELDS, values, strict=True)}


def census(redis_client: Any = None) -> Census:
    """Every endpoint's credential fields, counted by key, each opened with the configured
    keys (so a damaged one shows too)."""
    redis_client = redis_client or store.client()
    found = Census()
    for endpoint_id, stored in _stored(redis_client):
        found.endpoints += 1
        problem: SealedRecordError | None = None
        for name, value in stored.items():
            if not value:
                continue
            found.fields[sealing.sealed_key_id(value) or "plain"] += 1
            try:
                open_field(endpoint_id, name, value)
            except SealedRecordError as exc:
                problem = problem or exc
        if problem is not None:
            found.unreadable.append(problem)
    return found


@dataclass
class Resealed:
    """What ``reencrypt`` did: fields moved to the newest key (or sealed for the first time),
    fields already there, and endpoints left as they were because they do not open."""

    moved: int = 0
    current: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def reencrypt(redis_client: Any = None) -> Resealed:
    """Seal every credential field with the newest key of ``HOOKLINE_ENCRYPTION_KEYS``,
    endpoint by endpoint, each in one script that leaves an endpoint changed meanwhile to be
    read again: safe beside live workers and writers, and when interrupted, run it again."""
    redis_client = redis_client or store.client()
    newest = sealing.keyring(settings().encryption_keys).newest_id
    if newest is None:
        raise sealing.SealingError(f"{sealing.VARIABLE} is not set: there is no key to "
                                   "encrypt with")
    script = RESEAL_ENDPOINT.register(redis_client)
    done = Resealed()
    for endpoint_id, stored in _stored(redis_client):
        for _ in range(_RETRIES):
            try:
                moved = _reseal(script, endpoint_id, stored, newest)
            except SealedRecordError as exc:
                done.skipped.append((endpoint_id, str(exc)))
                break
            if moved is not None:
                done.moved += moved
                done.current += sum(1 for value in stored.values() if value) - moved
                break
            [url, *values] = redis_client.hmget(keys.endpoint_key(endpoint_id), "url",
                                                *SEALED_FIELDS)
            if not url:
                break  # removed meanwhile
            stored = {name: value or "" for name, value in zip(SEALED_FIELDS, values,
                                                                 strict=True)}
    return done


def _reseal(script: Any, endpoint_id: str, stored: dict[str, str], newest: str) -> int | None:
    """Reseal the fields of ``stored`` not sealed with ``newest``: how many, or None when the
    endpoint changed since it was read."""
    changes: list[str] = []
    for name, value in stored.items():
        if value and sealing.sealed_key_id(value) != newest:  # empty: nothing to protect
            changes += [name, value, seal_field(endpoint_id, name,
                                                open_field(endpoint_id, name, value))]
    if not changes:
        return 0
    if not script(endpoint=keys.endpoint_key(endpoint_id), changes=changes):
        return None
    return len(changes) // 3
