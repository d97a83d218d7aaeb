"""The soak's receiver: one process, a behaviour per path, one JSON line per request.

    python -m bench.soak_receiver --port 8097 --record FILE

The first part of the path picks the behaviour (the rest names the endpoint):
``/fast/...`` answers 204 at once; ``/slow/...`` after 1 to 2 s; ``/flaky/...`` answers 503 to
about a fifth of the events' first requests (chosen by the webhook-id, so every worker sees the
same answer), then 204; ``/fail/...`` answers 500, and ``/reject/...`` 400, always. Each request
is recorded: ``{"at", "path", "webhook_id", "body_id", "status"}``, ``body_id`` being the
``id`` the event's payload carries (the soak sends ``{"id": <event id>}``), so the report can
check that every copy of an event came under its own webhook-id with its own body.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: The share of events whose first request a flaky path answers 503.
FLAKY_SHARE = 0.2


def answer(kind: str, webhook_id: str, first: bool) -> tuple[int, float]:
    """``(status, delay)`` for a request to a path of ``kind``."""
    if kind == "slow":
        return 204, random.uniform(1.0, 2.0)
    if kind == "flaky" and first and zlib.crc32(webhook_id.encode()) % 100 < FLAKY_SHARE * 100:
        return 503, 0.0
    if kind == "fail":
        return 500, 0.0
    if kind == "reject":
        return 400, 0.0
    return 204, 0.0


class SoakReceiver:
    def __init__(self, port: int, record: str) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._record = open(record, "a", buffering=1)  # noqa: SIM115 - lives as long as we do
        ThreadingHTTPServer.request_queue_size = 256
        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.server.daemon_threads = True

    def first(self, webhook_id: str) -> bool:
        with self._lock:
            if webhook_id in self._seen:
                return False
            self._seen.add(webhook_id)
            return True

    def record(self, line: dict[str, Any]) -> None:
        with self._lock:
            self._record.write(json.dumps(line) + "\n")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                webhook_id = self.headers.get("webhook-id", "")
                kind = self.path.strip("/").split("/", 1)[0]
                status, delay = answer(kind, webhook_id, receiver.first(webhook_id))
                try:
                    body_id = json.loads(body)["data"]["id"]
                except (ValueError, KeyError, TypeError):
                    body_id = None
                if delay:
                    time.sleep(delay)
                receiver.record({"at": time.time(), "path": self.path,
                                 "webhook_id": webhook_id, "body_id": body_id,
                                 "status": status})
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8097)
    parser.add_argument("--record", metavar="FILE", required=True)
    options = parser.parse_args()
    receiver = SoakReceiver(options.port, options.record)
    print(f"soak receiver on http://127.0.0.1:{options.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        receiver.server.serve_forever()


if __name__ == "__main__":
    main()
