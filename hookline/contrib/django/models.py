"""Hookline's models in the host's database:

- :class:`OutboxRow`, the transactional outbox (``hookline_outbox``): with ``HOOKLINE_OUTBOX=on``
  ``send_webhook_on_commit`` and ``publish_on_commit`` write a row in the caller's transaction,
  and a worker's relay moves it to the broker once committed (docs/guides/outbox.md);
- the console's two permissions, ``hookline.view_console`` and ``hookline.act_console``, on a
  model with no table (``managed = False``): Django keeps permissions per model.

Grant them like any permission (the admin, a group, ``user.user_permissions.add``); a
superuser has both.
"""

from __future__ import annotations

from django.db import models


class Console(models.Model):
    """Stands for the console in Django's permission tables; never queried, never stored."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_console", "Can view the Hookline console"),
            ("act_console", "Can act in the Hookline console (pause, replay, rotate...)"),
        ]


class OutboxRow(models.Model):
    """One event waiting for the relay (``hookline.outbox.rows.OutboxRow``: the same columns
    as SQLAlchemy's table, ``hookline.contrib.sqlalchemy``). Written by Hookline, read and
    removed by the relay: not for the host to edit."""

    id = models.BigAutoField(primary_key=True)
    due_at = models.FloatField()
    line = models.CharField(max_length=300)
    endpoint_id = models.CharField(max_length=64, null=True)
    app_id = models.CharField(max_length=64, null=True)
    channels = models.TextField(null=True)
    event_id = models.CharField(max_length=200)
    event_type = models.CharField(max_length=200)
    payload = models.TextField()
    digest = models.CharField(max_length=64)
    deadline = models.FloatField(null=True)
    ordering_key = models.CharField(max_length=200, null=True)
    #: SQLite's claims are leases (PostgreSQL and MySQL lock the rows instead).
    claim = models.CharField(max_length=32, null=True)
    claimed_until = models.FloatField(null=True)
    #: The W3C traceparent of the trace the row was written in (OpenTelemetry, where on).
    traceparent = models.CharField(max_length=55, null=True)

    class Meta:
        db_table = "hookline_outbox"
        default_permissions = ()
        indexes = [models.Index(fields=["due_at", "id"], name="hookline_outbox_due"),
                   models.Index(fields=["line", "id"], name="hookline_outbox_line")]
