"""docs/quickstart.md, run as a reader runs it: the shell commands of its code blocks, each
exactly as written, one after the other in one bash session (the page says one terminal: its
second command exports what the others use), from the checkout's top folder with the
virtualenv's ``bin`` first on the PATH (an activated virtualenv). The signed request then
arrives at the page's receiver, which verifies it, and the test verifies it again with the
``standardwebhooks`` package and the secret Hookline signs with.

The session gets the test's own environment less every Hookline and Celery variable (the page
must set what it needs), with ``REDIS_URL`` on a free port where nothing answers: the page's
first command starts a Redis there (``scripts/ensure-redis.sh``), which the test stops after.
Between two commands the test writes ``echo "@@quickstart N exit=$?"`` to the session and
waits for that line, so each command's exit status is checked; it writes nothing after the
last command (the worker, which runs until stopped). The receiver and the worker, started by
the page, are stopped with the session's process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from standardwebhooks import Webhook

from hookline.store.endpoints import EndpointRegistry
from tests.support.servers import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "quickstart.md"
#: Fences whose lines are shell commands.
SHELL_FENCE = re.compile(r"```(?:sh|bash|shell)\s*")
#: The page's receiver port and endpoint, as its commands give them.
RECEIVER_PORT = 8099
ENDPOINT = "quickstart"
MARK = "@@quickstart"
VERIFIED = "signature verified with standardwebhooks"
REFUSED = "signature NOT verified"


def page_commands(text: str) -> list[str]:
    """The shell commands of the page's ``sh`` blocks, in order: each line that is not blank
    or a comment, with its ``\\`` continuation lines (kept as written)."""
    commands: list[str] = []
    in_fence = in_shell = continued = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            in_shell = in_fence and bool(SHELL_FENCE.fullmatch(line.strip()))
            continue
        if not in_shell:
            continue
        if continued:
            commands[-1] += "\n" + line
        elif line.strip() and not line.lstrip().startswith("#"):
            commands.append(line)
        continued = line.rstrip().endswith("\\")
    return commands


class Output:
    """The session's standard output and error, line by line, read by a thread."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def text(self, last: int = 80) -> str:
        with self._changed:
            return "\n".join(self.lines[-last:])

    def wait_for(self, found: Callable[[str], bool], timeout: float, what: str) -> str:
        """The first line for which ``found`` holds, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                match = next((line for line in self.lines if found(line)), None)
                if match is not None:
                    return match
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    pytest.fail(f"{what}: not seen within {timeout:g} s; the session's output:\n"
                                + self.text())
                self._changed.wait(min(left, 1.0))


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, waiting for their reaper,
    do not count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _stop_group(shell: subprocess.Popen[str], grace: float = 30.0) -> None:
    """SIGTERM to the session's process group (the shell, the receiver, the worker: a warm
    shutdown), SIGKILL to what outlives ``grace``."""
    pgid = shell.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        shell.wait(grace)
    deadline = time.monotonic() + grace
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGKILL)
    shell.wait(10)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _port_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (connections of a previous run in TIME_WAIT do not
    count: the receiver's server binds with SO_REUSEADDR, and so does this check)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _request_block(lines: list[str], verdict: str) -> tuple[dict[str, str], bytes]:
    """The webhook-* headers and the body the receiver printed for the request whose verdict
    is ``verdict`` (the lines between its ``POST`` line and the verdict)."""
    end = lines.index(verdict)
    start = max(i for i in range(end) if lines[i].startswith("POST "))
    headers: dict[str, str] = {}
    body = b""
    for line in lines[start + 1:end]:
        name, _, value = line.strip().partition(": ")
        if name == "body":
            body = value.encode()
        else:
            headers[name] = value
    return headers, body


@pytest.fixture
def private_redis_url(tmp_path: Path) -> Iterator[str]:
    """A URL where no Redis answers yet, on loopback; whatever Redis the page starts there
    (daemonized, its files under ``tmp_path``: the session's TMPDIR) is shut down after."""
    port = free_port()
    yield f"redis://127.0.0.1:{port}/0"
    pidfile = tmp_path / f"hookline-redis-{port}" / "redis.pid"
    if pidfile.exists():
        pid = int(pidfile.read_text())
        with contextlib.suppress(redis.ConnectionError):  # the shutdown closes the connection
            redis.Redis(port=port, socket_timeout=5).shutdown(nosave=True)
        deadline = time.monotonic() + 10
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_page_has_at_most_five_commands() -> None:
    commands = page_commands(PAGE.read_text())
    assert 1 <= len(commands) <= 5, commands
    assert any("examples.receiver" in command for command in commands)
    assert any(f"endpoint add {ENDPOINT} " in command for command in commands)


def test_the_quickstart_runs_as_written(tmp_path: Path, private_redis_url: str) -> None:
    commands = page_commands(PAGE.read_text())
    if not _port_free(RECEIVER_PORT):
        pytest.skip(f"port {RECEIVER_PORT} is taken: the quickstart's receiver listens there")
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("HOOKLINE_", "CELERY_"))
           and name not in ("REDIS_URL", "WEBHOOK_SECRET")}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               REDIS_URL=private_redis_url, TMPDIR=str(tmp_path))
    shell = subprocess.Popen(["bash"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             bufsize=1, start_new_session=True)
    assert shell.stdin is not None and shell.stdout is not None
    output = Output(shell.stdout)
    try:
        for n, command in enumerate(commands, 1):
            shell.stdin.write(command + "\n")
            if n < len(commands):
                shell.stdin.write(f'echo "{MARK} {n} exit=$?"\n')
            shell.stdin.flush()
            if n < len(commands):
                done = output.wait_for(lambda line, n=n: line.startswith(f"{MARK} {n} "),
                                       timeout=60, what=f"the end of command {n}: {command}")
                assert done.endswith(" exit=0"), f"{command!r} failed:\n{output.text()}"
            if "examples.receiver" in command:
                output.wait_for(lambda line: line.startswith(
                    f"demo receiver on http://127.0.0.1:{RECEIVER_PORT}"), timeout=30,
                    what="the receiver listening")
        assert any("starting redis-server" in line for line in output.lines), (
            "the page's first command was to start a Redis where none answered:\n"
            + output.text())

        verdict = output.wait_for(lambda line: VERIFIED in line or REFUSED in line,
                                  timeout=90, what="the signed request at the receiver")
        assert VERIFIED in verdict, output.text()

        # Verified again here: the printed request, with the secret Hookline signs with.
        headers, body = _request_block(list(output.lines), verdict)
        endpoint = EndpointRegistry(redis.Redis.from_url(private_redis_url,
                                                         decode_responses=True)).get(ENDPOINT)
        assert endpoint is not None and endpoint.url == (
            f"http://127.0.0.1:{RECEIVER_PORT}/webhooks")
        event = Webhook(endpoint.secrets[0]).verify(body, headers)
        assert event["type"] == "order.created" and event["data"] == {"order": 1234}
        # The id `hookline send` printed is the webhook-id that arrived.
        assert headers["webhook-id"] in output.lines
        output.wait_for(lambda line: "delivery.succeeded" in line and ENDPOINT in line,
                        timeout=30, what="the worker's delivery.succeeded line")
    finally:
        _stop_group(shell)
