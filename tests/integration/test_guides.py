"""The Django and Flask guides, followed literally in a new project: a signed webhook arrives
and verifies, and an operational signal's receiver runs in the worker.

Each test walks its guide (docs/guides/django.md, docs/guides/flask.md) from top to bottom, as
a reader would, in a temporary directory:

* a Python block whose first line names a file (``# mysite/settings.py, at the end``) is
  written to that file, or appended to it when the line says "at the end"; other Python blocks
  are illustrations and are skipped;
* every line of a shell block marked ``<!-- run by: tests/integration/test_guides.py -->`` is
  run as written, with the virtualenv running the tests first on the ``PATH`` (``python``,
  ``django-admin``, ``hookline``, ``flask``; a checkout's ``.venv/bin/...`` is that
  virtualenv too, run from the checkout's root); a block marked ``not run`` is skipped.

What a test changes in a command, and why: ``REDIS_URL``'s value is a Redis server of the
test's own (started from ``redis-server``, so nothing another test or a benchmark does on the
shared Redis can reach it); the receiver (``examples.receiver.Receiver`` with the demo routes,
in this process) listens on a free port, not the guide's 8099, and so do the web servers
(``runserver`` gets ``--noreload 127.0.0.1:PORT``, ``flask run`` ``--port PORT``, and the curl
URL that port); ``HOOKLINE_METRICS_PORT=0`` keeps the workers off the default metrics port. A
command that runs until stopped (``hookline worker``, ``runserver``, ``flask run``) is started
in the background and waited for (a worker's " ready.", a server's answer); a new worker
replaces the one before.

Checked: every event a command sends (the id it prints) reaches the receiver, and a delivered
one carries a Standard Webhooks signature the ``standardwebhooks`` package verifies with the
secret ``hookline endpoint add`` printed; an event sent to the refusing endpoint is
dead-lettered by a worker started with ``HOOKLINE_WORKER_IMPORTS``, whose log shows the guide's
receiver line. Django: ``manage.py check`` passes, and the console redirects to the admin's
sign-in page (``LOGIN_URL``), which answers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from examples.receiver import DEMO_ROUTES, Received, Receiver
from tests.conftest import ROOT, PrivateRedis, stop_process, wait_until
from tests.support.doc_blocks import Block, code_blocks, words
from tests.support.servers import free_port

pytestmark = pytest.mark.integration

#: The virtualenv running the tests (the checkout's .venv; make test-compat's own at each end).
BIN = Path(sys.executable).parent
THIS_TEST = "tests/integration/test_guides.py"
#: The guide's Redis, replaced by the test's own.
GUIDE_REDIS = "redis://127.0.0.1:6379/0"
#: The guide's receiver and web servers.
GUIDE_RECEIVER = "http://127.0.0.1:8099"
GUIDE_FLASK = "http://127.0.0.1:5000"
#: A Python block's first line naming its file: ``# shop/apps.py``, ``# mysite/urls.py, at
#: the end``, ``# shop_signals.py: the worker imports it``.
FILE_COMMENT = re.compile(r"^# (?P<path>[\w./-]+\.py)(?P<append>, at the end)?\b")
SECRET = re.compile(r"signing secret: (whsec_\S+)")


class Walk:
    """A reader following a guide in ``directory``: the environment the guide's commands
    build up, the processes they left running, what they printed."""

    def __init__(self, directory: Path, redis_url: str, receiver: Receiver) -> None:
        self.cwd = directory
        self.redis_url = redis_url
        self.receiver = receiver
        self.env = {
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", str(directory)),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOOKLINE_METRICS_PORT": "0",
            "HOOKLINE_DLQ_SPOOL": str(directory / "dlq-spool.jsonl"),
            # The example project's orders (run from the checkout), in this test's directory.
            "ORDERS_DB_PATH": str(directory / "example-orders.sqlite3"),
        }
        self.worker: subprocess.Popen[bytes] | None = None
        self.worker_log: Path | None = None
        self.worker_imports = ""
        self.servers: list[subprocess.Popen[bytes]] = []
        self.web_port: int | None = None
        #: Endpoint id -> (route on the receiver, signing secret).
        self.endpoints: dict[str, tuple[str, str]] = {}
        #: Event ids printed by the commands that sent them, in order.
        self.sent: list[str] = []
        self.logs: list[Path] = []

    # -- the page ---------------------------------------------------------------------------

    def follow(self, page: Path) -> None:
        for block in code_blocks(page):
            if block.lang in ("python", "py"):
                self._write(block)
            elif block.is_shell and block.marker == ("run by", THIS_TEST):
                for command in block.commands():
                    self.run(command)

    def _write(self, block: Block) -> None:
        named = FILE_COMMENT.match(block.first_line)
        if not named:
            return
        path = self.cwd / named["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        if named["append"]:
            with path.open("a") as file:
                file.write("\n" + block.text + "\n")
        else:
            path.write_text(block.text + "\n")

    # -- one command ------------------------------------------------------------------------

    def run(self, command: str) -> None:
        tokens = words(command)
        if not tokens:
            return
        if tokens[0] == "cd":
            self.cwd = self.cwd / tokens[1]
            return
        if tokens[0] == "export":
            for assignment in tokens[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = self._substitute(value)
            return
        extra = {}
        while re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", tokens[0]):
            name, _, value = tokens.pop(0).partition("=")
            extra[name] = self._substitute(value)
        env = {**self.env, **extra}
        tokens = [self._substitute(token) for token in tokens]
        if tokens[0].startswith(".venv/bin/"):  # the checkout's: from its root, this venv's
            tokens[0], cwd = str(BIN / tokens[0].removeprefix(".venv/bin/")), ROOT
        else:
            cwd = self.cwd
        if tokens[0] == "hookline" and tokens[1] == "worker":
            self._start_worker(tokens, env)
        elif "runserver" in tokens:
            self._serve([*tokens, "--noreload", f"127.0.0.1:{self._new_port()}"], env, cwd)
        elif tokens[:1] == ["flask"] and "run" in tokens:
            self._serve([*tokens, "--port", str(self._new_port())], env, cwd)
        else:
            output = self._call(tokens, env, cwd)
            self._read(tokens, output)

    def _substitute(self, text: str) -> str:
        text = text.replace(GUIDE_REDIS, self.redis_url)
        text = text.replace(GUIDE_RECEIVER, self.receiver.url("").rstrip("/"))
        if self.web_port is not None:
            text = text.replace(GUIDE_FLASK, f"http://127.0.0.1:{self.web_port}")
        return text

    def _call(self, tokens: list[str], env: dict[str, str], cwd: Path) -> str:
        result = subprocess.run(tokens, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, (
            f"{shlex.join(tokens)} exited {result.returncode}\nstdout:\n{result.stdout}\n"
            f"stderr:\n{result.stderr}")
        return result.stdout

    def _read(self, tokens: list[str], output: str) -> None:
        """What a command printed: an endpoint's secret, or the id of an event it sent."""
        if tokens[:3] == ["hookline", "endpoint", "add"]:
            route = tokens[tokens.index("--url") + 1].removeprefix(self.receiver.url(""))
            (secret,) = SECRET.findall(output)
            self.endpoints[tokens[3]] = ("/" + route.lstrip("/"), secret)
        elif tokens[:2] == ["hookline", "send"] or "shell" in tokens:
            self.sent.append(output.strip().splitlines()[-1])
        elif tokens[0] == "curl":
            self.sent.append(json.loads(output)["event_id"])

    # -- what runs until stopped --------------------------------------------------------------

    def _new_port(self) -> int:
        self.web_port = free_port()
        return self.web_port

    def _start_worker(self, tokens: list[str], env: dict[str, str]) -> None:
        self.stop_worker()
        self.worker_log = self.cwd / f"worker-{len(self.logs)}.log"
        self.logs.append(self.worker_log)
        self.worker_imports = env.get("HOOKLINE_WORKER_IMPORTS", "")
        with self.worker_log.open("w") as log:
            self.worker = subprocess.Popen(tokens, cwd=self.cwd, env=env, stdout=log,
                                           stderr=subprocess.STDOUT)
        worker, log_path = self.worker, self.worker_log

        def ready() -> bool:
            assert worker.poll() is None, f"the worker exited:\n{log_path.read_text()}"
            return " ready." in log_path.read_text()

        wait_until(ready, timeout=60, interval=0.1, what=log_path.read_text)

    def _serve(self, tokens: list[str], env: dict[str, str], cwd: Path) -> None:
        log_path = self.cwd / f"server-{len(self.servers)}.log"
        with log_path.open("w") as log:
            server = subprocess.Popen(tokens, cwd=cwd, env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
        self.servers.append(server)
        port = self.web_port
        assert port is not None

        def answers() -> bool:
            assert server.poll() is None, f"{tokens} exited:\n{log_path.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(answers, timeout=60, interval=0.1, what=log_path.read_text)

    def stop_worker(self) -> None:
        if self.worker is not None:
            stop_process(self.worker, timeout=30)
            self.worker = None

    def stop(self) -> None:
        self.stop_worker()
        for server in self.servers:
            stop_process(server, timeout=10)

    # -- what arrived -----------------------------------------------------------------------

    def arrived(self, event_id: str) -> Received:
        """The request that carried ``event_id``, once the receiver has it."""
        def carried() -> list[Received]:
            return [r for r in self.receiver.received if r.webhook_id == event_id]

        assert self.receiver.wait_for(lambda _: bool(carried()), timeout=60), (
            f"event {event_id} never arrived; worker log:\n"
            + "\n".join(path.read_text()[-3000:] for path in self.logs))
        return carried()[0]

    def verify(self, request: Received) -> dict[str, object]:
        """The request's payload, its signature verified with its endpoint's secret."""
        (secret,) = [secret for route, secret in self.endpoints.values()
                     if route == request.path]
        verified = Webhook(secret).verify(request.body, request.headers)
        assert isinstance(verified, dict)
        return verified

    def receiver_line(self, event_id: str, endpoint_id: str) -> str:
        """Wait for the guide's receiver line about ``event_id`` in the current worker's log."""
        line = f"event {event_id} to {endpoint_id} dead-lettered: rejected"
        assert self.worker_log is not None
        log = self.worker_log
        wait_until(lambda: line in log.read_text(), timeout=30, what=lambda: log.read_text())
        return line


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    redis_server = PrivateRedis(tmp_path)
    redis_server.start()
    receiver = Receiver()
    for path, behaviour in DEMO_ROUTES.items():
        receiver.route(path, behaviour)
    project = tmp_path / "project"
    project.mkdir()
    with receiver:
        walker = Walk(project, redis_server.url, receiver)
        try:
            yield walker
        finally:
            walker.stop()
            redis_server.stop()


def _check_deliveries(walk: Walk) -> None:
    """The first event went to shop-42 and verifies; the last, to ``broken``, was
    dead-lettered by the worker that loads the receivers, which logged the guide's line."""
    assert len(walk.sent) == 2, walk.sent
    delivered, refused = walk.sent
    request = walk.arrived(delivered)
    assert request.path == "/ok" and request.status == 204
    payload = walk.verify(request)
    assert payload["type"] == "order.created"
    assert walk.arrived(refused).status == 400
    assert walk.worker_imports, "the guide's last worker does not import the receivers"
    walk.receiver_line(refused, "broken")


def test_the_django_guide_followed_literally_delivers_a_verified_webhook(walk: Walk) -> None:
    page = ROOT / "docs" / "guides" / "django.md"
    text = page.read_text()
    assert GUIDE_REDIS in text and f"{GUIDE_RECEIVER}/ok" in text
    walk.follow(page)
    _check_deliveries(walk)
    # The console, mounted as the guide's last step says: manage.py check passes (the extra is
    # installed in the checkout's virtualenv), and someone not signed in is sent to LOGIN_URL,
    # the admin's sign-in page, which answers.
    walk.run("python manage.py check")
    answer = subprocess.run(
        [str(BIN / "python"), "manage.py", "shell", "-c",
         "from django.test import Client; c = Client(HTTP_HOST='localhost'); "
         "r = c.get('/hookline/'); "
         "print(r.status_code, r['Location'], c.get(r['Location']).status_code)"],
        cwd=walk.cwd, env=walk.env, capture_output=True, text=True, timeout=120)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip().splitlines()[-1] == "302 /admin/login/?next=/hookline/ 200"


def test_the_flask_guide_followed_literally_delivers_a_verified_webhook(walk: Walk) -> None:
    page = ROOT / "docs" / "guides" / "flask.md"
    text = page.read_text()
    assert GUIDE_REDIS in text and f"{GUIDE_RECEIVER}/ok" in text and GUIDE_FLASK in text
    walk.follow(page)
    _check_deliveries(walk)
