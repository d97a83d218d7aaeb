"""An attempt's request goes out in one write: the head and the body together (urllib3 writes
them apart), and a request without a body still sends its head. On a loopback socket."""

from __future__ import annotations

import socket
import threading
from typing import Any

from hookline.delivery.http import TrackedHTTPConnection


class Recording:
    """The connection's socket, keeping what each sendall wrote."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.writes = sock, []

    def sendall(self, data: Any) -> None:
        self.writes.append(bytes(data))
        self.sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def served(reply: bytes) -> tuple[int, list[bytes]]:
    """A one-connection server answering each request with ``reply``; what it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(5)
            for _ in range(2):
                data = connection.recv(65536)
                received.append(data)
                connection.sendall(reply)
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1], received


def test_the_head_and_the_body_go_out_in_one_write():
    port, _ = served(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
    connection = TrackedHTTPConnection("127.0.0.1", port)
    connection.connect()
    recording = Recording(connection.sock)
    connection.sock = recording  # type: ignore[assignment]
    body = b'{"type":"order.paid"}'
    connection.request("POST", "/hook", body=body,
                       headers={"Content-Type": "application/json"})
    assert connection.getresponse().status == 204
    assert len(recording.writes) == 1
    assert recording.writes[0].startswith(b"POST /hook HTTP/1.1\r\n")
    assert recording.writes[0].endswith(b"\r\n\r\n" + body)
    # A request without a body: its head alone, still written.
    connection.request("GET", "/again")
    assert connection.getresponse().status == 204
    assert len(recording.writes) == 2 and recording.writes[1].startswith(b"GET /again ")
    connection.close()
