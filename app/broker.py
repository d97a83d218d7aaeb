"""kombu's Redis transport with one guard: a list item that is not a kombu message (garbage
pushed onto a queue by hand or by a broken producer) is kept in the dead-letter queue instead
of stopping the worker with "Unrecoverable error: JSONDecodeError". Selected in celeryconfig
(``broker_transport``); the URL stays ``redis://...``."""

from __future__ import annotations

import json
from typing import Any

from kombu.transport import redis as kombu_redis

from app.consumer import dead_letter_text


class Channel(kombu_redis.Channel):
    def _brpop_read(self, **options: Any) -> Any:
        try:
            return super()._brpop_read(**options)
        except json.JSONDecodeError as exc:
            # BRPOP already took the item off the list: keep it, then carry on polling.
            dead_letter_text(str(exc.doc), f"not a broker message: {exc.msg}")
            raise kombu_redis.Empty() from None


class Transport(kombu_redis.Transport):
    Channel = Channel
