"""HTTP plumbing under :mod:`hookline.delivery.sender`: connect only to the address the SSRF
guard checked, and end any attempt that outlives its total time budget.

* :class:`PinnedPools` resolves the host once per attempt, checks every address with
  :func:`hookline.core.ssrf.pin_address` and makes urllib3 connect to that address, with TLS
  SNI and certificate checks still against the host name. No second lookup, no rebinding.
* :class:`AttemptDeadline` shuts the socket of an attempt that passes its deadline, so a
  receiver that trickles its headers or body a byte at a time cannot hold a worker thread
  past connect + 2 x read timeout, however it paces the bytes.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import http.client
import itertools
import socket
import threading
import time
from typing import Any

import certifi
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import LocationParseError
from urllib3.util import Url, parse_url

from hookline.core.config import settings
from hookline.core.ssrf import Resolver, TargetRefused, pin_address, system_resolve

_current = threading.local()


class StatusKeepingResponse(http.client.HTTPResponse):
    """http.client's response, which raises when the answer's headers break its limits (more
    than 100 headers, a line over 65,536 bytes) and forgets the status line it had read: here
    the status travels on the exception (``status_of``), so the attempt's error can say that
    the receiver answered, say, 200 with unreadable headers."""

    def begin(self) -> None:
        try:
            super().begin()
        except http.client.HTTPException as exc:
            if isinstance(self.status, int):
                exc.hookline_status = self.status  # type: ignore[attr-defined]
            raise


def status_of(exc: BaseException) -> int | None:
    """The status line's code read before ``exc`` (see :class:`StatusKeepingResponse`)."""
    status = getattr(exc, "hookline_status", None)
    return status if isinstance(status, int) else None


class _Tracked:
    """Remembers, per thread, the connection the current request runs on; its responses keep
    their status line when their headers are malformed. Sends the request's head and its
    body in one write: urllib3 writes them apart (two system calls and two TCP segments per
    attempt, each handing the interpreter lock over)."""

    response_class: type[http.client.HTTPResponse] = StatusKeepingResponse
    #: The head written during ``request``, held for the body's write; None: none held.
    _held_head: bytes | None = None
    _holding = False

    def request(self, *args: Any, **kwargs: Any) -> Any:
        _current.connection = self
        self._holding, self._held_head = True, None
        try:
            result = super().request(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self._holding, self._held_head = False, None
            raise
        self._holding = False
        if self._held_head is not None:  # no body came: the head alone
            head, self._held_head = self._held_head, None
            super().send(head)
        return result

    def send(self, data: Any) -> None:
        if self._holding and isinstance(data, bytes | bytearray):
            if self._held_head is None:
                self._held_head = bytes(data)  # the head (http.client's endheaders)
                return
            data, self._held_head, self._holding = self._held_head + data, None, False
        elif self._held_head is not None:
            head, self._held_head = self._held_head, None
            super().send(head)  # type: ignore[misc]
        super().send(data)  # type: ignore[misc]


class TrackedHTTPConnection(_Tracked, HTTPConnection):
    pass


class TrackedHTTPSConnection(_Tracked, HTTPSConnection):
    pass


class TrackedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = TrackedHTTPConnection


class TrackedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = TrackedHTTPSConnection


class InvalidTarget(ValueError):
    """The URL cannot be requested at all (no http(s) scheme or host): never worth retrying."""


class PinnedPools:
    """One thread's HTTP connection pools, used straight through urllib3 (requests' session
    layer costs more CPU per attempt than the send itself on a fast receiver). Sends only to
    addresses the SSRF guard accepted (see module doc); never follows redirects, never
    retries, never asks for compressed answers."""

    def __init__(self, *, resolve: Resolver = system_resolve, num_pools: int = 32,
                 maxsize: int = 2) -> None:
        self.resolve = resolve
        self.manager = urllib3.PoolManager(num_pools=num_pools, maxsize=maxsize, block=False,
                                           retries=False)
        self.manager.pool_classes_by_scheme = {
            "http": TrackedHTTPConnectionPool, "https": TrackedHTTPSConnectionPool,
        }

    def post(self, url: str, body: bytes, headers: dict[str, str], *, connect_timeout: float,
             read_timeout: float) -> urllib3.BaseHTTPResponse:
        """POST ``body``; the answer's body is left unread (``preload_content=False``)."""
        try:
            parsed = _parsed(url)
        except LocationParseError:
            raise InvalidTarget("invalid_url") from None
        scheme = (parsed.scheme or "").lower()
        if scheme not in ("http", "https") or not parsed.host:
            raise InvalidTarget("invalid_url")
        config = settings()
        if config.https_only and scheme != "https":
            raise TargetRefused("HOOKLINE_HTTPS_ONLY is set: only https:// endpoints are served")
        port = parsed.port or (443 if scheme == "https" else 80)
        host = parsed.host.strip("[]")
        address = pin_address(host, port, config.allowed_networks, resolve=self.resolve)
        pool_kwargs: dict[str, Any] = {}
        if scheme == "https":
            pool_kwargs = {"server_hostname": host, "assert_hostname": host,
                           "cert_reqs": "CERT_REQUIRED", "ca_certs": certifi.where()}
        pool = self.manager.connection_from_host(address, port, scheme, pool_kwargs=pool_kwargs)
        return pool.urlopen(
            "POST", parsed.request_uri, body=body, headers=headers, redirect=False,
            retries=False, assert_same_host=False, preload_content=False,
            timeout=urllib3.Timeout(connect=connect_timeout, read=read_timeout),
        )


@functools.lru_cache(maxsize=1024)
def _parsed(url: str) -> Url:
    """urllib3's ``parse_url`` (immutable), kept for the URLs attempts go to: parsing and
    normalising one costs about 2% of a delivery's CPU. An unparseable URL raises each time."""
    return parse_url(url)


class AttemptDeadline:
    """One thread that shuts down the sockets of attempts past their deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._armed: dict[int, Any] = {}
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float) -> int:
        """Watch the calling thread's next request for ``seconds``; returns a ticket."""
        ticket = next(self._ids)
        _current.connection = None
        holder = _current.__dict__  # this thread's slot for its current connection
        with self._wake:
            self._armed[ticket] = holder
            entry = (time.monotonic() + seconds, ticket, holder)
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hookline-deadline",
                                                daemon=True)
                self._thread.start()
            if self._heap[0] is entry:
                self._wake.notify()  # earlier than the one the watchdog sleeps until
        return ticket

    def expired(self, ticket: int) -> bool:
        """True once the deadline of ``ticket`` struck (the socket was shut)."""
        with self._wake:
            return ticket not in self._armed

    def disarm(self, ticket: int) -> bool:
        """Stop watching; returns True if the deadline had already struck."""
        with self._wake:
            struck = self._armed.pop(ticket, None) is None
            self._drop_finished()
            return struck

    def _drop_finished(self) -> None:
        """Drop the entries of finished attempts from the top of the heap. Attempts end
        roughly in the order they start, so the heap stays about as large as the attempts in
        flight, and the watchdog sleeps until the deadline of one still running instead of
        waking at every finished attempt's (one wake-up per attempt, at a worker's rate)."""
        heap = self._heap
        while heap and heap[0][1] not in self._armed:
            heapq.heappop(heap)

    def _run(self) -> None:
        while True:
            with self._wake:
                self._drop_finished()
                while not self._heap:
                    self._wake.wait()
                    self._drop_finished()
                deadline, ticket, holder = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
                if self._armed.pop(ticket, None) is None:
                    continue  # finished in time
            connection = holder.get("connection")
            sock = getattr(connection, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):  # closed meanwhile
                    sock.shutdown(socket.SHUT_RDWR)


#: The process's watchdog for attempt deadlines.
attempt_deadline = AttemptDeadline()
