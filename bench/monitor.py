"""Which Redis commands a client sent and which ran inside Lua scripts, read from MONITOR.

Redis counts commands a script runs in ``INFO commandstats`` as well, so commandstats alone
cannot tell round trips from script work; MONITOR shows script commands as ``[0 lua]``.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

_CONTAINERS = {"client", "config", "script", "function", "object", "memory", "command", "acl"}
_LINE = re.compile(r'\[\d+ ([^\]]*)\] "((?:[^"\\]|\\.)*)"(?: "((?:[^"\\]|\\.)*)")?')


def script_names() -> dict[str, str]:
    """SHA1 -> script name for Hookline's Lua scripts (the store's and the broker's), as
    EVALSHA names them: the text Redis runs, with its ``--#include`` pieces composed."""
    from hookline.store import lua as store_scripts
    from hookline.transport import lua as broker_scripts

    return {contract.sha: contract.script
            for contract in (*store_scripts.CONTRACTS, *broker_scripts.CONTRACTS)}


@dataclass(frozen=True)
class Counts:
    """Commands MONITOR had shown up to a marker: sent by clients, run inside scripts, and
    commands per client address."""

    top: Counter[str]
    lua: Counter[str]
    sources: Counter[str]

    def __sub__(self, earlier: Counts) -> Counts:
        return Counts(self.top - earlier.top, self.lua - earlier.lua,
                      self.sources - earlier.sources)


class CommandMonitor:
    """Reads MONITOR on the state Redis in a thread and counts, by command name, what clients
    sent (round trips) apart from what Lua scripts ran (``[0 lua]`` lines); EVALSHA is counted
    by script (``scripts``: SHA1 -> name). The benchmark's own control connection (one socket)
    is not counted: its ``ECHO <token>`` marks a point in Redis's command order, where the
    counts are taken, so a marker sent in the same MULTI as CONFIG RESETSTAT or INFO lines
    MONITOR up exactly with commandstats."""

    def __init__(self, url: str, control: redis.Redis, scripts: dict[str, str]) -> None:
        self.control = control
        self.scripts = scripts
        self.control_addr = str(control.client_info()["addr"])
        self.client = redis.Redis.from_url(url)
        self.connection = self.client.connection_pool.get_connection()
        self.connection.send_command("MONITOR")
        self.connection.read_response()
        self._counts = Counts(Counter(), Counter(), Counter())
        self._marks: dict[str, Counts] = {}
        #: The first argument (a key, a script) of the first call of each client command.
        self.first_args: dict[str, str] = {}
        self._changed = threading.Condition()
        self._stop_token = f"bench-stop-{uuid.uuid4().hex}"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        counts = self._counts
        while True:
            try:
                line = self.connection.read_response()
            except (redis.ConnectionError, OSError):
                return  # the server went away; stop() or the caller reports it
            text = line.decode(errors="replace") if isinstance(line, bytes) else str(line)
            match = _LINE.search(text)
            if not match:
                continue
            source, name, first = match.group(1), match.group(2).lower(), match.group(3) or ""
            if name in _CONTAINERS and first:
                name = f"{name}|{first.lower()}"
            elif name == "evalsha":
                name = f"evalsha {self.scripts.get(first.lower(), first[:12])}"
            with self._changed:
                if source == "lua":
                    counts.lua[name] += 1
                elif source != self.control_addr:
                    counts.top[name] += 1
                    self.first_args.setdefault(name, first)
                    counts.sources[source] += 1
                elif name == "echo":
                    self._marks[first] = Counts(counts.top.copy(), counts.lua.copy(),
                                                counts.sources.copy())
                    self._changed.notify_all()
                    if first == self._stop_token:
                        return

    @staticmethod
    def token() -> str:
        return f"bench-mark-{uuid.uuid4().hex}"

    def counts_at(self, token: str, timeout: float = 30.0) -> Counts:
        """The counts when Redis ran ``ECHO token`` from the control connection."""
        with self._changed:
            if not self._changed.wait_for(lambda: token in self._marks, timeout):
                raise TimeoutError(f"MONITOR fell behind by more than {timeout}s")
            return self._marks.pop(token)

    def sync(self) -> Counts:
        token = self.token()
        self.control.echo(token)
        return self.counts_at(token)

    def wait_quiet(self, watch: tuple[str, ...], quiet: float = 0.5,
                   timeout: float = 30.0) -> None:
        """Wait until no client sends a ``watch`` command for ``quiet`` seconds (commands on a
        timer, such as a releaser's poll, would never let the whole server fall quiet)."""
        deadline = time.monotonic() + timeout
        seen = sum(self.sync().top[name] for name in watch)
        while time.monotonic() < deadline:
            time.sleep(quiet)
            now = sum(self.sync().top[name] for name in watch)
            if now == seen:
                return
            seen = now
        raise TimeoutError(f"{', '.join(watch)} still arriving after {timeout}s")

    def stop(self) -> None:
        try:
            self.control.echo(self._stop_token)
            self._thread.join(10.0)
        except redis.RedisError:
            pass  # the server is gone: nothing left to read
        finally:
            self.connection.disconnect()
            self.client.close()


def transaction(control: redis.Redis, *commands: tuple[str, ...]) -> list[Any]:
    """Run ``commands`` in one MULTI/EXEC on the control client's single connection (a
    pipeline would take another connection, which MONITOR would not know as the control)."""
    control.execute_command("MULTI")
    for command in commands:
        control.execute_command(*command)
    return list(control.execute_command("EXEC"))
