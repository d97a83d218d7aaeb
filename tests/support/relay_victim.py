"""A relay that kills itself (``kill``: SIGKILL) or stops itself (``stop``: SIGSTOP, until a
SIGCONT) right after publishing its first ``after`` rows, before removing any: what a relay killed
or paused between its publish and its removal leaves behind.

    python -m tests.support.relay_victim <HOOKLINE_OUTBOX_URL> <after> kill|stop

Its hold (HOOKLINE_OUTBOX_HOLD) comes from the environment.
"""

from __future__ import annotations

import os
import signal
import sys

from hookline.core.config import settings
from hookline.core.errors import WebhookInputError
from hookline.outbox.database import UrlDatabase
from hookline.outbox.relay import Claimed, Outage, Relay, publish_rows


def main() -> None:
    url, after, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    hold = settings().outbox_hold

    def publish_then_stop(rows: list[Claimed]) -> list[WebhookInputError | None]:
        found = publish_rows(rows[:after])
        os.kill(os.getpid(), signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        return found + publish_rows(rows[after:])

    relay = Relay(UrlDatabase(url, hold=hold), batch=1000, lease=hold, publish=publish_then_stop)
    try:
        relay.drain()
    except Outage as outage:  # resumed after the hold: its session or lease is gone
        print(f"relay_victim: {outage}", file=sys.stderr)


if __name__ == "__main__":
    main()
