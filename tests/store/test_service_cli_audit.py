"""The CLI's actions go through the service, so they are audited too: who acted (the
operating-system user) and from where (this process on this host)."""

from __future__ import annotations

import getpass
import os
import socket

from hookline.service import audit
from hookline.service.actor import Actor
from tests.support.cli import fails, succeeds

OPERATOR = Actor(name="reader", session="r")


def test_cli_actions_leave_audit_entries_naming_the_user_and_process(quiet_redis):
    succeeds("endpoint", "add", "shop", "--url", "http://127.0.0.1:9/hook")
    succeeds("endpoint", "pause", "shop")
    succeeds("breaker", "reset", "shop")
    succeeds("endpoint", "rotate-secret", "shop")
    fails("endpoint", "pause", "nope")  # refused: nothing recorded
    entries = audit.recent(OPERATOR).items
    assert [(entry.action, entry.target) for entry in entries] == [
        ("endpoint.rotate_secret", "shop"), ("breaker.reset", "shop"),
        ("endpoint.pause", "shop"), ("endpoint.add", "shop")]
    assert {entry.actor for entry in entries} == {f"cli:{getpass.getuser()}"}
    assert {entry.session for entry in entries} == {f"cli:{os.getpid()}@{socket.gethostname()}"}
