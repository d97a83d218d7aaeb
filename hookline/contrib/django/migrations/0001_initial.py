"""The console's permissions (``hookline.view_console``, ``hookline.act_console``) on a model
without a table: nothing is created in the host's database but the permission rows."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True
    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Console",
            fields=[
                ("id", models.AutoField(auto_created=True, primary_key=True, serialize=False,
                                        verbose_name="ID")),
            ],
            options={
                "managed": False,
                "default_permissions": (),
                "permissions": [
                    ("view_console", "Can view the Hookline console"),
                    ("act_console",
                     "Can act in the Hookline console (pause, replay, rotate...)"),
                ],
            },
        ),
    ]
