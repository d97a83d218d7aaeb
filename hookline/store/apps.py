"""The application registry: a host's customers or tenants, each owning endpoints, to which
``hookline.publish`` fans an event out.

One hash per application (``hookline:{app:<id>}:app``) plus a set of all ids
(``hookline:apps``). The application's endpoint index (``hookline:{app:<id>}:endpoints``) is
the endpoint registry's: it is written with the endpoint.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hookline.core.errors import InvalidField
from hookline.core.event import check_text
from hookline.core.subscriptions import check_app_id
from hookline.store import connection as store
from hookline.store import keys

#: Longest application name, characters.
MAX_NAME_LENGTH = 200
#: Longest application description, characters.
MAX_DESCRIPTION_LENGTH = 1000


def unknown_app_message(app_id: str) -> str:
    """What every way in says of an application that does not exist."""
    return f"no application {app_id!r}: add it with 'hookline app add {app_id}'"


class AppError(InvalidField):
    """Bad application input, or an operation its state refuses; the message says why."""

    def __init__(self, message: str, field: str = "app") -> None:
        super().__init__(field, message)


class UnknownApplication(AppError):
    def __init__(self, app_id: str) -> None:
        super().__init__(unknown_app_message(app_id))
        self.app_id = app_id


class AppInUse(AppError):
    """An application that still has endpoints cannot be removed."""

    def __init__(self, app_id: str, endpoint_ids: list[str]) -> None:
        shown = ", ".join(endpoint_ids[:10]) + (" ..." if len(endpoint_ids) > 10 else "")
        super().__init__(
            f"application {app_id!r} still has {len(endpoint_ids)} endpoint(s) ({shown}): "
            "remove them, or move them with 'hookline endpoint update ID --app none', first")
        self.app_id = app_id
        self.endpoint_ids = endpoint_ids


@dataclass(frozen=True)
class App:
    """An application: a host's customer or tenant.

    :param id: ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``, as an endpoint id.
    :param name: a name for people, optional.
    :param description: free text, optional.
    """

    id: str
    name: str = ""
    description: str = ""
    created_at: float = 0.0

    def to_hash(self) -> dict[str, str]:
        return {"name": self.name, "description": self.description,
                "created_at": repr(self.created_at)}

    @classmethod
    def from_hash(cls, app_id: str, data: Mapping[str, str]) -> App:
        return cls(id=app_id, name=data.get("name", ""),
                   description=data.get("description", ""),
                   created_at=float(data.get("created_at") or 0))

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name or None,
                "description": self.description or None, "created_at": self.created_at}


def validate_app_id(app_id: str) -> str:
    try:
        return check_app_id(app_id)
    except InvalidField as exc:
        raise AppError(str(exc), "app_id") from None


def _checked_text(field: str, value: str | None, limit: int) -> str:
    if value is None or value == "":
        return ""
    try:
        return check_text(field, value, limit=limit)
    except InvalidField as exc:
        raise AppError(str(exc), field) from None


class AppRegistry:
    """Applications in Redis (see the module docstring)."""

    def __init__(self, redis_client: Any = None) -> None:
        self.redis: Any = redis_client or store.client()

    def add(self, app_id: str, *, name: str | None = None,
            description: str | None = None) -> App:
        """Register an application; refused if the id is taken."""
        app = App(id=validate_app_id(app_id),
                  name=_checked_text("name", name, MAX_NAME_LENGTH),
                  description=_checked_text("description", description,
                                            MAX_DESCRIPTION_LENGTH),
                  created_at=time.time())
        # Index first, then the hash (the same order, and for the same reason, as the endpoint
        # registry's: readers skip an indexed id without a hash). HSETNX of created_at claims
        # the id, so two adds of one id cannot both succeed.
        self.redis.sadd(keys.APP_INDEX, app_id)
        fields = app.to_hash()
        if not self.redis.hsetnx(keys.app_key(app_id), "created_at", fields.pop("created_at")):
            raise AppError(f"application {app_id!r} exists already")
        self.redis.hset(keys.app_key(app_id), mapping=fields)
        return app

    def get(self, app_id: str) -> App | None:
        validate_app_id(app_id)
        data = self.redis.hgetall(keys.app_key(app_id))
        return App.from_hash(app_id, data) if data else None

    def require(self, app_id: str) -> App:
        app = self.get(app_id)
        if app is None:
            raise UnknownApplication(app_id)
        return app

    def list(self) -> list[App]:
        ids = sorted(self.redis.smembers(keys.APP_INDEX))
        pipe = self.redis.pipeline(transaction=False)
        for app_id in ids:
            pipe.hgetall(keys.app_key(app_id))
        return [App.from_hash(app_id, data)
                for app_id, data in zip(ids, pipe.execute(), strict=True) if data]

    def endpoint_ids(self, app_id: str) -> builtins.list[str]:
        """The ids in the application's endpoint index whose endpoint still names it."""
        ids = sorted(self.redis.smembers(keys.app_endpoints_key(app_id)))
        pipe = self.redis.pipeline(transaction=False)
        for endpoint_id in ids:
            pipe.hget(keys.endpoint_key(endpoint_id), "app")
        return [endpoint_id for endpoint_id, owner in zip(ids, pipe.execute(), strict=True)
                if owner == app_id]

    def remove(self, app_id: str) -> None:
        """Forget the application; refused (:class:`AppInUse`) while endpoints belong to it.
        Its published events' records expire on their own."""
        self.require(app_id)
        members = self.endpoint_ids(app_id)
        if members:
            raise AppInUse(app_id, members)
        self.redis.delete(keys.app_key(app_id), keys.app_endpoints_key(app_id))
        self.redis.srem(keys.APP_INDEX, app_id)
