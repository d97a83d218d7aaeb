"""The receiver of ``bench.inflight``: a loopback HTTP/1.1 server in the benchmark's process
that holds many hundreds of slow requests open at once and counts, per path, what arrived.

Each route (``/<name>``) has its delay: every POST to it is counted on arrival, answered
``204`` (``Content-Length: 0``, keep-alive) after that many seconds, and meanwhile counted as
in flight. A route may also be *held*: its answers wait, past the delay, until
:meth:`InflightReceiver.release`. Per route: the arrivals (Unix time and ``webhook-id``, in
order), requests per ``webhook-id``, the ids answered, and the current and largest number of
requests in flight.

In flight means arrived and not yet answered: the count goes down just before the answer is
written, so it never exceeds the attempts the senders have open (an attempt ends when its
answer has been read), and a largest count over a cap is a real breach of it.

``bench/common.FastReceiver`` answers at once and counts only hits and distinct ids; this one
is a :class:`~http.server.ThreadingHTTPServer` (one daemon thread per connection, which
``time.sleep`` frees of the interpreter lock) with a listen backlog of 4,096.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

#: The longest a held answer waits for :meth:`InflightReceiver.release` (a safety net: the
#: benchmark releases it, or stops the receiver, which releases it too).
HOLD_LIMIT = 600.0


@dataclass
class Route:
    """One path's delay and counts (guarded by the receiver's lock)."""

    delay: float
    held: threading.Event | None = None
    #: (Unix seconds, webhook-id) of each request, in the order they arrived.
    arrivals: list[tuple[float, str]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    #: webhook-ids whose request got past its delay (an answer was written or tried).
    answered: set[str] = field(default_factory=set)
    in_flight: int = 0
    most_in_flight: int = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        receiver = cast(InflightReceiver, self.server)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        route = receiver.routes.get(self.path.partition("?")[0].strip("/"))
        if route is None:
            self._answer(404)
            return
        webhook_id = self.headers.get("webhook-id", "")
        receiver.arrive(route, webhook_id)
        try:
            if route.delay:
                time.sleep(route.delay)
            if route.held is not None:
                route.held.wait(HOLD_LIMIT)
        finally:
            receiver.leave(route, webhook_id)
        self._answer(204)

    def _answer(self, status: int) -> None:
        try:
            self.send_response_only(status)
            self.send_header("Content-Length", "0")
            self.end_headers()  # flushes: a sender that died makes this raise
        except OSError:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


class InflightReceiver(ThreadingHTTPServer):
    """Started on a free loopback port, serving from a thread of its own; :meth:`stop` ends
    it (held answers released)."""

    daemon_threads = True
    request_queue_size = 4096

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.changed = threading.Condition()
        self.port = int(self.server_address[1])
        self._thread = threading.Thread(target=self.serve_forever, args=(0.1,), daemon=True)
        self._thread.start()

    def route(self, name: str, delay: float, *, held: bool = False) -> str:
        """Add route ``name`` answering after ``delay`` seconds (and, ``held``, not before
        :meth:`release`); its URL."""
        self.routes[name] = Route(delay, threading.Event() if held else None)
        return f"http://127.0.0.1:{self.port}/{name}"

    def release(self, name: str) -> None:
        held = self.routes[name].held
        if held is not None:
            held.set()

    def arrive(self, route: Route, webhook_id: str) -> None:
        with self.changed:
            route.arrivals.append((time.time(), webhook_id))
            route.requests[webhook_id] += 1
            route.in_flight += 1
            route.most_in_flight = max(route.most_in_flight, route.in_flight)
            self.changed.notify_all()

    def leave(self, route: Route, webhook_id: str) -> None:
        with self.changed:
            route.in_flight -= 1
            route.answered.add(webhook_id)
            self.changed.notify_all()

    def answered(self, name: str) -> set[str]:
        with self.changed:
            return set(self.routes[name].answered)

    def in_flight(self, name: str) -> int:
        with self.changed:
            return self.routes[name].in_flight

    def reset_most(self, name: str) -> None:
        """Start the largest in-flight count of ``name`` again from its current one."""
        with self.changed:
            route = self.routes[name]
            route.most_in_flight = route.in_flight

    def snapshot(self, name: str) -> Route:
        """A copy of ``name``'s counts."""
        with self.changed:
            route = self.routes[name]
            return Route(route.delay, None, list(route.arrivals), Counter(route.requests),
                         set(route.answered), route.in_flight, route.most_in_flight)

    def wait_until(self, check: Callable[[], bool], timeout: float,
                   alive: Callable[[], None]) -> bool:
        """Until ``check()`` (called under the lock) holds: True, or False once ``timeout``
        seconds passed. ``alive`` raises if what should make it hold has died."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check():
                alive()
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.2))
        return True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A sender killed mid-request resets its connection: not worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def stop(self) -> None:
        for route in self.routes.values():
            if route.held is not None:
                route.held.set()
        self.shutdown()
        self.server_close()
