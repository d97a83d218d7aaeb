"""The console's two permissions, ``hookline.view_console`` and ``hookline.act_console``, on a
model with no table (``managed = False``): Django keeps permissions per model, and Hookline
keeps nothing of its own in the host's database.

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
