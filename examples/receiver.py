"""A webhook receiver on loopback that records every request and answers as scripted.

Used by the tests (real HTTP, no mocks), by ``make demo``, by docker-compose's ``receiver`` and
by the quickstart (docs/quickstart.md). Each path has a behaviour: a function of the attempt
number *for that webhook-id* (1 for the first request carrying an id, 2 for the next...)
returning a :class:`Reply`.

    python -m examples.receiver --port 8099      # the demo's routes, see DEMO_ROUTES
    python -m examples.receiver --port 8099 --secret whsec_...   # print and verify each request

With ``--secret`` (``Receiver(secret=...)``) each request's Standard Webhooks signature is
checked with the ``standardwebhooks`` package, as a real receiver would: a request that fails
is answered 401 and never reaches its route. ``--print`` (``show=True``) prints each request as
it arrives; ``--secret`` does too, with the verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """How to answer one request.

    :param action: ``None`` to answer normally; ``"close"`` drops the connection without an
        answer; ``"endless"`` sends a 200 whose body never ends (until the client gives up);
        ``"cut"`` sends a status line and half a body, then closes; ``"trickle"`` sends its
        headers one byte every 0.2 s, forever.
    """

    status: int = 204
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0
    action: str | None = None


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    webhook_id: str
    attempt: int
    status: int

    def json(self) -> Any:
        return json.loads(self.body)


Behaviour = Callable[[int], Reply]


def always(reply: Reply) -> Behaviour:
    return lambda attempt: reply


def fail_first(times: int, failure: Reply, then: Reply | None = None) -> Behaviour:
    """Answer ``failure`` to the first ``times`` attempts of each event, then ``then``."""
    success = then or Reply(204)
    return lambda attempt: failure if attempt <= times else success


def in_order(*replies: Reply, then: Reply | None = None) -> Behaviour:
    """Answer the route's requests with ``replies`` in arrival order, whatever their event,
    then ``then`` (204) for every later request."""
    pending = list(replies)
    lock = threading.Lock()
    final = then or Reply(204)

    def behaviour(attempt: int) -> Reply:
        with lock:
            return pending.pop(0) if pending else final

    return behaviour


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # hundreds of slow requests arrive at once


class Receiver:
    """A threaded HTTP server on 127.0.0.1; ``url(path)`` gives the address of a route."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 record_to: str | None = None, secret: str | None = None,
                 show: bool = False) -> None:
        self.routes: dict[str, Behaviour] = {}
        #: When set, each request's signature is verified with the ``standardwebhooks`` package
        #: and a request that fails is answered 401 (before any route or event reply).
        self.secret = secret
        #: Print each request (and, with a secret, the verdict) to standard output.
        self.show = show or secret is not None
        #: When set, one JSON line per request (at, path, webhook_id, status) is appended here.
        self.record_file = open(record_to, "a", buffering=1) if record_to else None  # noqa: SIM115
        self.default: Behaviour = always(Reply(204))
        #: Replies for given webhook-ids (answer_event), before any route's behaviour.
        self.by_event: dict[str, Reply] = {}
        self.received: list[Received] = []
        self._attempts: Counter[tuple[str, str]] = Counter()
        #: Requests being answered now, and the most at once, per path (a request counts from
        #: its arrival until its answer is written).
        self.in_flight: Counter[str] = Counter()
        self.most_in_flight: Counter[str] = Counter()
        #: The same per ordering key (an ordered endpoint's Hookline-Ordering-Key header).
        self.in_flight_by_key: Counter[str] = Counter()
        self.most_in_flight_by_key: Counter[str] = Counter()
        self._changed = threading.Condition()
        self.server = _Server((host, port), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer_event(self, webhook_id: str, reply: Reply | None) -> None:
        """Answer every request carrying ``webhook_id`` with ``reply``, whatever its route
        (None: as its route does again)."""
        with self._changed:
            if reply is None:
                self.by_event.pop(webhook_id, None)
            else:
                self.by_event[webhook_id] = reply

    def route(self, path: str, behaviour: Behaviour) -> str:
        """Answer requests to ``path`` with ``behaviour``; returns the route's URL."""
        self.routes[path] = behaviour
        return self.url(path)

    def start(self) -> Receiver:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests_to(self, path: str) -> list[Received]:
        with self._changed:
            return [r for r in self.received if r.path == path]

    def wait_for(self, predicate: Callable[[list[Received]], bool], timeout: float = 30.0) -> bool:
        """Block until ``predicate(received)`` holds or ``timeout`` passes; True if it held."""
        end = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.received):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True

    def verdict(self, headers: dict[str, str], body: bytes) -> str | None:
        """None when the request's signature verifies with :attr:`secret` (or no secret is
        set), else why it does not: ``standardwebhooks.Webhook.verify``'s message."""
        if self.secret is None:
            return None
        from standardwebhooks import Webhook

        try:
            Webhook(self.secret).verify(body, headers)
        except Exception as exc:  # WebhookVerificationError, or a malformed secret or header
            return f"{type(exc).__name__}: {exc}"
        return None

    def _show(self, method: str, path: str, headers: dict[str, str], body: bytes,
              refused: str | None) -> None:
        lines = [f"{method} {path}"]
        lines += [f"  {name}: {headers[name]}" for name in
                  ("webhook-id", "webhook-timestamp", "webhook-signature") if name in headers]
        lines.append(f"  body: {body.decode('utf-8', 'replace')}")
        if self.secret is not None:
            lines.append(f"  signature NOT verified ({refused}): answered 401" if refused else
                         "  signature verified with standardwebhooks")
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()

    def _record(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Reply]:
        webhook_id = headers.get("webhook-id", "")
        with self._changed:
            self._attempts[(path, webhook_id)] += 1
            attempt = self._attempts[(path, webhook_id)]
        refused = self.verdict(headers, body)
        if self.show:
            with self._changed:
                self._show("POST", path, headers, body, refused)
        if refused is not None:
            reply = Reply(401, body=b"signature verification failed")
        else:
            reply = self.by_event.get(webhook_id) or self.routes.get(path, self.default)(attempt)
        received = Received(path, headers, body, time.time(), webhook_id, attempt, reply.status)
        with self._changed:
            self.received.append(received)
            if self.record_file is not None:
                self.record_file.write(json.dumps({"at": received.at, "path": path,
                                                   "webhook_id": webhook_id,
                                                   "status": reply.status}) + "\n")
            self._changed.notify_all()
        return attempt, reply

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                key = self.headers.get("Hookline-Ordering-Key")
                with receiver._changed:
                    receiver.in_flight[self.path] += 1
                    receiver.most_in_flight[self.path] = max(
                        receiver.most_in_flight[self.path], receiver.in_flight[self.path])
                    if key is not None:
                        receiver.in_flight_by_key[key] += 1
                        receiver.most_in_flight_by_key[key] = max(
                            receiver.most_in_flight_by_key[key], receiver.in_flight_by_key[key])
                    receiver._changed.notify_all()
                self._key, self._counted = key, True
                try:
                    self._answer()
                finally:
                    self._done()

            def _done(self) -> None:
                """The request stops counting as in flight: just before its answer is sent
                (once sent, the sender may start its next request before this thread runs
                again, and the two would be counted side by side)."""
                if not self._counted:
                    return
                self._counted = False
                with receiver._changed:
                    receiver.in_flight[self.path] -= 1
                    if self._key is not None:
                        receiver.in_flight_by_key[self._key] -= 1
                    receiver._changed.notify_all()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                _, reply = receiver._record(self.path, headers, body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.action == "trickle":
                    self._trickle()
                    return
                if reply.action == "close":
                    self.close_connection = True
                    self.connection.close()
                    return
                self._done()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if reply.action == "endless":
                    self.send_header("Content-Length", str(10**12))
                    self.end_headers()
                    self._stream_forever()
                    return
                if reply.action == "cut":
                    self.send_header("Content-Length", str(len(reply.body) * 2 + 100))
                    self.end_headers()
                    self.wfile.write(reply.body)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                if reply.body:
                    self.wfile.write(reply.body)

            def _trickle(self) -> None:
                """A status line, then one header byte every 0.2 s, never finishing."""
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    while True:
                        self.wfile.write(b"z")
                        self.wfile.flush()
                        time.sleep(0.2)
                except OSError:
                    self.close_connection = True

            def _stream_forever(self) -> None:
                chunk = b"x" * 65536
                try:
                    while True:
                        self.wfile.write(chunk)
                except OSError:
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


#: The demo's routes: a healthy receiver, a flaky one, a throttling one, a slow one, a gone one.
DEMO_ROUTES: dict[str, Behaviour] = {
    "/ok": always(Reply(204)),
    "/flaky": fail_first(2, Reply(503, body=b"upstream unavailable")),
    # Throttling is the receiver's, not one event's: the first request of all is told to wait,
    # which holds back the whole endpoint for that second.
    "/throttled": in_order(Reply(429, headers={"Retry-After": "1"})),
    "/slow": fail_first(1, Reply(200, delay=3.0)),
    "/gone": always(Reply(410, body=b"this endpoint no longer exists")),
    "/rejects": always(Reply(400, body=b"bad payload")),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--record", metavar="FILE", help="append one JSON line per request")
    parser.add_argument("--print", dest="show", action="store_true",
                        help="print each request (webhook-* headers and body) as it arrives")
    parser.add_argument("--secret", metavar="whsec_...",
                        help="verify each request's signature with the standardwebhooks "
                             "package and print the verdict; a request that fails gets 401")
    options = parser.parse_args()
    receiver = Receiver(options.host, options.port, record_to=options.record,
                        secret=options.secret, show=options.show)
    for path, behaviour in DEMO_ROUTES.items():
        receiver.route(path, behaviour)
    routes = ", ".join(DEMO_ROUTES)
    verifying = "; verifying signatures" if options.secret else ""
    print(f"demo receiver on http://{options.host}:{receiver.port} routes: {routes} (any other "
          f"path: 204){verifying}", flush=True)
    receiver.server.serve_forever()


if __name__ == "__main__":
    main()
