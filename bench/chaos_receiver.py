"""A receiver that flaps: it answers 200 for a few seconds, then 503, then too slowly, and over.

    python -m bench.chaos_receiver --port 8098 --record FILE [--phases 200:4,503:3,slow:3]

Every path behaves the same. The phase is chosen by the clock (seconds since the receiver
started), not by the request, so all workers see the same receiver state at the same time.
In the ``slow`` phase a request is answered 200 only after ``--slow-delay`` seconds, longer
than the worker's read timeout: the sender has given up by then and will retry. Other answers
take ``--delay`` seconds (0.2), like a receiver doing some work, so that a worker killed at any
moment is likely to have requests in flight.

Like ``examples.receiver --record``, one JSON line per request is appended to FILE:
``{"at", "path", "webhook_id", "status"}``, plus ``"phase"`` and, for answers the sender
cannot have seen in time, ``"late": true``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_PHASES = "200:4,503:3,slow:3"


def parse_phases(text: str) -> list[tuple[str, float]]:
    """``200:4,503:3,slow:3`` -> [("200", 4.0), ("503", 3.0), ("slow", 3.0)]."""
    phases: list[tuple[str, float]] = []
    for part in text.split(","):
        name, _, seconds = part.strip().partition(":")
        if name not in ("200", "503", "slow") or float(seconds) <= 0:
            raise ValueError(f"phase {part!r}: use 200:SECONDS, 503:SECONDS or slow:SECONDS")
        phases.append((name, float(seconds)))
    return phases


class FlappingReceiver:
    """A threaded HTTP server whose answer depends on the phase of a fixed cycle."""

    def __init__(self, port: int, record: str, phases: list[tuple[str, float]],
                 slow_delay: float, delay: float) -> None:
        self.phases = phases
        self.delay = delay
        self.cycle = sum(seconds for _, seconds in phases)
        self.slow_delay = slow_delay
        self.started = time.time()
        self._lock = threading.Lock()
        self._record = open(record, "a", buffering=1)  # noqa: SIM115 - lives as long as we do
        ThreadingHTTPServer.request_queue_size = 128
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True

    def phase(self, at: float) -> str:
        offset = (at - self.started) % self.cycle
        for name, seconds in self.phases:
            if offset < seconds:
                return name
            offset -= seconds
        return self.phases[-1][0]

    def record(self, line: dict[str, Any]) -> None:
        with self._lock:
            self._record.write(json.dumps(line) + "\n")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                at = time.time()
                phase = receiver.phase(at)
                status = 503 if phase == "503" else 200
                line: dict[str, Any] = {"at": at, "path": self.path,
                                        "webhook_id": self.headers.get("webhook-id", ""),
                                        "status": status, "phase": phase}
                if phase == "slow":
                    line["late"] = True
                receiver.record(line)
                time.sleep(receiver.slow_delay if phase == "slow" else receiver.delay)
                body = b"unavailable" if status == 503 else b""
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the sender gave up (slow phase)
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8098)
    parser.add_argument("--record", metavar="FILE", required=True)
    parser.add_argument("--phases", default=DEFAULT_PHASES,
                        help=f"NAME:SECONDS,... with NAME 200, 503 or slow ({DEFAULT_PHASES})")
    parser.add_argument("--slow-delay", type=float, default=2.5,
                        help="seconds a slow-phase answer takes (default 2.5)")
    parser.add_argument("--delay", type=float, default=0.2,
                        help="seconds the other answers take (default 0.2)")
    options = parser.parse_args()
    receiver = FlappingReceiver(options.port, options.record, parse_phases(options.phases),
                                options.slow_delay, options.delay)
    print(f"flapping receiver on http://127.0.0.1:{options.port} phases {options.phases}",
          flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        receiver.server.serve_forever()


if __name__ == "__main__":
    main()
