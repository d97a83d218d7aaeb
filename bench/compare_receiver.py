"""The receiver of ``bench.compare``: a minimal asyncio HTTP/1.1 server in its own process.

    python -m bench.compare_receiver [--refuse NAME ...]

No nginx on this machine, and Python's ``http.server`` spends a thread per connection, so this
is the fastest receiver at hand: one event loop, keep-alive, every POST answered ``204``. The
path picks the behaviour and the counter: ``/d<ms>/<name>`` answers after ``<ms>`` milliseconds
(``/d0/fast``, ``/d100/slow``) and counts under ``<name>``; ``/s<status>/<name>`` answers
``<status>`` at once, empty (``/s200/ok``, ``/s500/failing``), and counts likewise. Each
``--refuse NAME`` opens one more port that accepts a connection and resets it at once
(SO_LINGER 0): a receiver that is down, whose connection attempts can still be counted (a
closed port counts nothing).

Control paths (GET, same port): ``/_stats/<name>`` (hits, distinct ``webhook-id`` values, first
and last arrival), ``/_times/<name>`` (every arrival, Unix seconds), ``/_wait/<name>?count=N&
timeout=S`` (like stats, returned once N arrived or S seconds passed). Started, it prints one
JSON line: ``{"port": P, "refuse": {NAME: PORT}}``. Stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import struct
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

NO_CONTENT = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
REASONS = {200: "OK", 204: "No Content", 500: "Internal Server Error", 503: "Service Unavailable"}


def status_line(status: int) -> bytes:
    """An empty response with ``status`` (``/s<status>/<name>``)."""
    reason = REASONS.get(status, "Status")
    return f"HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\n\r\n".encode()


@dataclass
class Counter:
    times: list[float] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, webhook_id: str) -> None:
        self.times.append(time.time())
        if webhook_id:
            self.ids.add(webhook_id)
        self.changed.set()

    def stats(self) -> dict[str, Any]:
        return {"hits": len(self.times), "distinct": len(self.ids),
                "first": self.times[0] if self.times else None,
                "last": self.times[-1] if self.times else None}


counters: defaultdict[str, Counter] = defaultdict(Counter)


async def control(path: str, query: dict[str, list[str]]) -> bytes:
    kind, _, name = path[2:].partition("/")
    counter = counters[name]
    if kind == "times":
        data: Any = counter.times
    elif kind == "wait":
        want = int(query.get("count", ["1"])[0])
        deadline = time.monotonic() + float(query.get("timeout", ["1"])[0])
        while len(counter.times) < want and (left := deadline - time.monotonic()) > 0:
            counter.changed.clear()
            try:
                await asyncio.wait_for(counter.changed.wait(), left)
            except TimeoutError:
                break
        data = counter.stats()
    else:
        data = counter.stats()
    body = json.dumps(data).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    """One request's method, target and headers (lower-case names); its body read past."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if length := int(headers.get("content-length") or 0):
        await reader.readexactly(length)
    return method, target, headers


#: Answers one request: (method, its split target, its headers, the connection's writer).
Responder = Callable[[str, SplitResult, dict[str, str], asyncio.StreamWriter], Awaitable[None]]


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     respond: Responder) -> None:
    """One connection's requests answered in turn by ``respond`` (HTTP/1.1 keep-alive) until
    the client closes it or asks to."""
    try:
        while True:
            method, target, headers = await read_head(reader)
            await respond(method, urlsplit(target), headers, writer)
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                break
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


async def respond(method: str, url: SplitResult, headers: dict[str, str],
                  writer: asyncio.StreamWriter) -> None:
    if url.path.startswith("/_"):
        writer.write(await control(url.path, parse_qs(url.query)))
    elif method == "POST" and url.path.startswith("/d"):
        delay, _, name = url.path[2:].partition("/")
        if int(delay):
            await asyncio.sleep(int(delay) / 1000)
        counters[name].record(headers.get("webhook-id", ""))
        writer.write(NO_CONTENT)
    elif method == "POST" and url.path.startswith("/s"):
        status, _, name = url.path[2:].partition("/")
        counters[name].record(headers.get("webhook-id", ""))
        writer.write(status_line(int(status)))
    else:
        writer.write(NOT_FOUND)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await keep_alive(reader, writer, respond)


def refuser(name: str) -> Any:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counters[name].record("")
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    return reset


async def main(refuse: list[str]) -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    ports = {}
    for name in refuse:
        down = await asyncio.start_server(refuser(name), "127.0.0.1", 0, backlog=1024)
        ports[name] = down.sockets[0].getsockname()[1]
    print(json.dumps({"port": server.sockets[0].getsockname()[1], "refuse": ports}), flush=True)
    await until_signalled()


async def until_signalled() -> None:
    """Return on SIGTERM or SIGINT (the benchmark stopping its receiver)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refuse", action="append", default=[], metavar="NAME")
    asyncio.run(main(parser.parse_args().refuse))
