"""The transactional outbox: an event written as a row of the host's own database, in the host's
own transaction, and moved to the broker by a relay once that transaction has committed.

- ``rows``: what a row holds, checked where it is written (no Redis, no Celery);
- ``sql``: the claim, the line check and the removal, per dialect (PostgreSQL, MySQL/MariaDB,
  SQLite);
- ``database``: the relay's way to the host's database (Django's connection, or a URL);
- ``relay``: the relay (claim due rows, publish, remove; back off while the broker is away).

The guide: docs/guides/outbox.md.
"""
