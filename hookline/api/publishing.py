"""``hookline.publish`` and its errors, where the public names have always been: the rules live
in ``hookline.delivery.publishing``, where the outbox's relay (a layer below the faces) reaches
them too."""

from __future__ import annotations

from hookline.delivery.publishing import (
    PublishedEventConflict,
    SchemaViolation,
    UnknownApplication,
    publish,
)

__all__ = ["PublishedEventConflict", "SchemaViolation", "UnknownApplication", "publish"]
