"""The transactional outbox's table, ``hookline_outbox`` (:class:`hookline.contrib.django.models
.OutboxRow`), with its two indexes: due rows by due time, and a line's rows by id."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("hookline", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="OutboxRow",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("due_at", models.FloatField()),
                ("line", models.CharField(max_length=300)),
                ("endpoint_id", models.CharField(max_length=64, null=True)),
                ("app_id", models.CharField(max_length=64, null=True)),
                ("channels", models.TextField(null=True)),
                ("event_id", models.CharField(max_length=200)),
                ("event_type", models.CharField(max_length=200)),
                ("payload", models.TextField()),
                ("digest", models.CharField(max_length=64)),
                ("deadline", models.FloatField(null=True)),
                ("ordering_key", models.CharField(max_length=200, null=True)),
                ("claim", models.CharField(max_length=32, null=True)),
                ("claimed_until", models.FloatField(null=True)),
            ],
            options={
                "db_table": "hookline_outbox",
                "default_permissions": (),
                "indexes": [
                    models.Index(fields=["due_at", "id"], name="hookline_outbox_due"),
                    models.Index(fields=["line", "id"], name="hookline_outbox_line"),
                ],
            },
        ),
    ]
