"""The outbox's ``traceparent`` column: the trace a row was written in, which the relay's
publish and the event's deliveries join (docs/operations/tracing.md). Nullable: rows written
before it, or where traces are off, have none."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("hookline", "0002_outbox")]

    operations = [
        migrations.AddField(
            model_name="outboxrow",
            name="traceparent",
            field=models.CharField(max_length=55, null=True),
        ),
    ]
