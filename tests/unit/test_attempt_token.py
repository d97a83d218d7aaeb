"""Attempt tokens (``hookline.worker.tasks.attempt_token``), the lease owner admit and settle
compare: unique within a process, and a forked child draws a prefix of its own."""

from __future__ import annotations

from hookline.worker import tasks


def test_tokens_are_unique_and_a_new_process_draws_a_new_prefix(monkeypatch):
    tokens = {tasks.attempt_token() for _ in range(10_000)}
    assert len(tokens) == 10_000
    prefix = next(iter(tokens)).split("-")[0]
    assert all(token.startswith(prefix + "-") for token in tokens)
    assert len(prefix) in (16, 24)  # this process's liveness token if it consumed, else random
    real = tasks.os.getpid()
    monkeypatch.setattr(tasks.os, "getpid", lambda: real + 1)  # as in a forked child
    child = tasks.attempt_token()
    assert not child.startswith(prefix) and child not in tokens


def test_a_consuming_process_prefixes_its_tokens_with_its_liveness_token(monkeypatch):
    """So that the worker declaring this process dead can release exactly its leases."""

    class Registration:
        token = "0123456789abcdef"

    class Live:
        def current(self) -> Registration:
            return Registration()

    monkeypatch.setattr(tasks, "process_liveness", lambda create=False: Live())
    assert tasks.attempt_token().startswith("0123456789abcdef-")
