"""The receiver of ``bench.ordered``: an asyncio HTTP/1.1 server in its own process that keeps,
per ordering key, the order its deliveries arrived in and how many were in flight at once.

    python -m bench.ordered_receiver

``POST /o/<name>?fail=P&delay=MS&refuse=ID`` counts under ``<name>`` (an endpoint) and answers:
``400`` to event ``ID`` (every attempt: a delivery that fails for good), ``503`` to the first
attempt of an event when ``crc32(event id) % 100 < P`` (decided per event, so the same events
fail on every run), else ``204``; each after ``MS`` milliseconds. All three are optional.

Per key (the ``Hookline-Ordering-Key`` header; ``""`` without one) it keeps each ``204`` in
the order answered: event id, ``Hookline-Sequence`` and the time. A request is in flight from
its head read until its answer is written; the most in flight at once is kept per key, so
two attempts of one key overlapping show as 2.

Control paths (GET, same port): ``/_stats/<name>`` (hits: 204 answers; distinct: events
answered 204; requests; statuses; most in flight per key and how many keys had over one;
first and last 204), ``/_wait/<name>?count=N&timeout=S`` (the stats once ``distinct`` reached
N, or S seconds passed), ``/_lines/<name>`` (key -> ``[[event id, sequence, time], ...]``).
Started, it prints one JSON line: ``{"port": P, "refuse": {}}`` (what
``bench.compare_procs.ReceiverProcess`` reads). Stopped by SIGTERM.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qs

from bench.compare_receiver import NOT_FOUND, keep_alive, status_line, until_signalled

#: What a request's status is answered with, ready to write.
ANSWERS = {status: status_line(status) for status in (204, 400, 503)}


@dataclass(frozen=True)
class Behaviour:
    """How an endpoint's URL asks to be answered (its query string)."""

    fail_percent: int = 0
    delay_ms: int = 0
    refused: str = ""

    def status(self, event_id: str, attempt: int) -> int:
        """The answer to attempt ``attempt`` (1 = the first this receiver saw) of an event."""
        if event_id == self.refused:
            return 400
        if attempt == 1 and zlib.crc32(event_id.encode()) % 100 < self.fail_percent:
            return 503
        return 204


@functools.lru_cache(maxsize=1024)
def behaviour_of(query: str) -> Behaviour:
    found = parse_qs(query)
    return Behaviour(int(found.get("fail", ["0"])[0]), int(found.get("delay", ["0"])[0]),
                     found.get("refuse", [""])[0])


@dataclass
class Tally:
    """One endpoint's requests: the 204s per key in order, attempts per event, overlap."""

    lines: defaultdict[str, list[tuple[str, int, float]]] = field(
        default_factory=lambda: defaultdict(list))
    delivered: set[str] = field(default_factory=set)
    hits: int = 0
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    most_in_flight: Counter[str] = field(default_factory=Counter)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def arrived(self, event_id: str, key: str) -> int:
        """A request's head was read: the event's attempt number here."""
        self.requests += 1
        self.attempts[event_id] += 1
        if key:
            self.in_flight[key] += 1
            self.most_in_flight[key] = max(self.most_in_flight[key], self.in_flight[key])
        return self.attempts[event_id]

    def answered(self, event_id: str, key: str, sequence: int, status: int) -> None:
        self.statuses[status] += 1
        if status == 204:
            self.hits += 1
            self.delivered.add(event_id)
            self.lines[key].append((event_id, sequence, time.time()))
            self.changed.set()

    def left(self, key: str) -> None:
        """Its answer was written (or its connection was lost)."""
        if key:
            self.in_flight[key] -= 1

    def stats(self) -> dict[str, Any]:
        times = [line[-1][2] for line in self.lines.values() if line]
        return {"hits": self.hits, "distinct": len(self.delivered), "requests": self.requests,
                "statuses": dict(self.statuses),
                "most_in_flight": max(self.most_in_flight.values(), default=0),
                "keys_overlapping": sum(1 for n in self.most_in_flight.values() if n > 1),
                "first": min((line[0][2] for line in self.lines.values() if line), default=None),
                "last": max(times, default=None)}


tallies: defaultdict[str, Tally] = defaultdict(Tally)


async def waited(tally: Tally, count: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while len(tally.delivered) < count and (left := deadline - time.monotonic()) > 0:
        tally.changed.clear()
        try:
            await asyncio.wait_for(tally.changed.wait(), left)
        except TimeoutError:
            break
    return tally.stats()


async def control(path: str, query: str) -> bytes:
    kind, _, name = path[2:].partition("/")
    tally = tallies[name]
    data: Any
    if kind == "lines":
        data = tally.lines
    elif kind == "wait":
        found = parse_qs(query)
        data = await waited(tally, int(found.get("count", ["1"])[0]),
                            float(found.get("timeout", ["1"])[0]))
    else:
        data = tally.stats()
    body = json.dumps(data).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def answer(writer: asyncio.StreamWriter, name: str, query: str,
                 headers: dict[str, str]) -> None:
    """A delivery to endpoint ``name``: answered as its query asks, counted while in flight."""
    tally, behaviour = tallies[name], behaviour_of(query)
    event_id, key = headers.get("webhook-id", ""), headers.get("hookline-ordering-key", "")
    attempt = tally.arrived(event_id, key)
    try:
        if behaviour.delay_ms:
            await asyncio.sleep(behaviour.delay_ms / 1000)
        status = behaviour.status(event_id, attempt)
        tally.answered(event_id, key, int(headers.get("hookline-sequence") or 0), status)
        writer.write(ANSWERS[status])
        await writer.drain()
    finally:
        tally.left(key)


async def respond(method: str, url: SplitResult, headers: dict[str, str],
                  writer: asyncio.StreamWriter) -> None:
    if url.path.startswith("/_"):
        writer.write(await control(url.path, url.query))
    elif method == "POST" and url.path.startswith("/o/"):
        await answer(writer, url.path[3:], url.query, headers)
    else:
        writer.write(NOT_FOUND)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await keep_alive(reader, writer, respond)


async def main() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    print(json.dumps({"port": server.sockets[0].getsockname()[1], "refuse": {}}), flush=True)
    await until_signalled()


if __name__ == "__main__":
    asyncio.run(main())
