"""Dead letters for the tests of the queue's indexes: a client that counts the entries read,
and entries numbered from ``T0``."""

from __future__ import annotations

import time
from typing import Any

from hookline.store.dead_letter_queue import DeadLetter

#: When entry 0 was dead-lettered (entry n: ``T0 + n``), an hour ago.
T0 = float(int(time.time()) - 3600)


class CountingClient:
    """A Redis client that counts the entries read from the entries hash (HMGET's ids)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.entries_read = 0

    def hmget(self, key: str, ids: list[str]) -> list[Any]:
        self.entries_read += len(ids)
        return self.client.hmget(key, ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def letter(endpoint_id: str, n: int, reason: str = "exhausted", *, status: int | None = 503,
           at: float | None = None) -> DeadLetter:
    """Entry ``n`` of ``endpoint_id`` (event ``ev-<n>``), dead-lettered at ``T0 + n``."""
    return DeadLetter(endpoint_id, f"ev-{n:05d}", "order.paid", {"n": n}, reason,
                      attempts=1 + n % 5, last_status=status,
                      dead_lettered_at=T0 + n if at is None else at)
