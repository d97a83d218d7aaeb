"""The event catalog: the event types an application publishes, each optionally with a JSON
Schema its payloads must satisfy (``hookline event-type add NAME --schema FILE``).

One hash, ``hookline:{catalog}:types``: type name -> JSON ``{"description", "schema",
"created_at"}``. Once it holds any type, publishing a type it does not hold is refused, and so
is subscribing an endpoint to a filter that matches none of its types.
"""

from __future__ import annotations

import builtins
import json
import time
from dataclasses import dataclass
from typing import Any

from hookline.core.errors import InvalidField
from hookline.core.event import check_text
from hookline.core.schemas import check_schema
from hookline.core.subscriptions import check_type_name
from hookline.store import connection as store
from hookline.store import keys

#: Longest description of an event type, characters.
MAX_DESCRIPTION_LENGTH = 1000


class CatalogError(InvalidField):
    def __init__(self, message: str, field: str = "event_type") -> None:
        super().__init__(field, message)


@dataclass(frozen=True)
class EventType:
    """A registered event type; ``schema`` is its JSON Schema as compact JSON, or None."""

    name: str
    description: str = ""
    schema: str | None = None
    created_at: float = 0.0

    def to_json(self) -> str:
        return json.dumps({"description": self.description, "schema": self.schema,
                           "created_at": self.created_at})

    @classmethod
    def from_json(cls, name: str, text: str) -> EventType:
        data = json.loads(text)
        return cls(name=name, description=data.get("description", ""),
                   schema=data.get("schema"), created_at=float(data.get("created_at") or 0))

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description or None,
                "schema": None if self.schema is None else json.loads(self.schema),
                "created_at": self.created_at}


class EventCatalog:
    """The event catalog in Redis (see the module docstring)."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def add(self, name: str, *, schema: Any = None, description: str | None = None
            ) -> EventType:
        """Register a type; its schema (a parsed JSON Schema) is checked first. Refused if the
        type is registered already (remove it first to change it)."""
        try:
            check_type_name(name, "name")
            text = None if schema is None else check_schema(schema)
            described = "" if not description else check_text(
                "description", description, limit=MAX_DESCRIPTION_LENGTH)
        except InvalidField as exc:
            raise CatalogError(str(exc), exc.field) from None
        added = EventType(name, described, text, time.time())
        if not self.redis.hsetnx(keys.CATALOG_KEY, name, added.to_json()):
            raise CatalogError(f"event type {name!r} is in the catalog already: remove it "
                               "first to change it")
        return added

    def get(self, name: str) -> EventType | None:
        text = self.redis.hget(keys.CATALOG_KEY, name)
        return EventType.from_json(name, text) if text else None

    def lookup(self, name: str) -> tuple[bool, EventType | None]:
        """Whether the catalog is in use (holds any type), and type ``name``: one round
        trip, for every publish."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hlen(keys.CATALOG_KEY)
        pipe.hget(keys.CATALOG_KEY, name)
        size, text = pipe.execute()
        return bool(size), EventType.from_json(name, text) if text else None

    def require(self, name: str) -> EventType:
        found = self.get(name)
        if found is None:
            raise CatalogError(f"event type {name!r} is not in the catalog: see "
                               "'hookline event-type list'")
        return found

    def list(self) -> list[EventType]:
        return [EventType.from_json(name, text)
                for name, text in sorted(self.redis.hgetall(keys.CATALOG_KEY).items())]

    def names(self) -> builtins.list[str]:
        return sorted(self.redis.hkeys(keys.CATALOG_KEY))

    def remove(self, name: str) -> None:
        """Forget a type. Endpoints subscribed to it keep their filter; published events of
        it are not touched."""
        if not self.redis.hdel(keys.CATALOG_KEY, name):
            raise CatalogError(f"event type {name!r} is not in the catalog")
