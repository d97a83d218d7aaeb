"""Hookline installed from its wheel as a guest in host projects that own the names a checkout
uses (``app``, ``tasks``, ``celeryconfig``) and have a Celery app of their own.

The wheel is built from the working tree and installed with its ``django`` and ``flask`` extras
into a fresh virtualenv (shared by both tests). Each host project is generated in a temporary
directory and every process (the web process, the host's worker, Hookline's worker, the CLI)
runs from that directory with the fresh virtualenv's interpreter, so the host's modules shadow
any of the same name. Each test checks that:

* the host's Celery app stays the process's ``current_app`` and its shared task goes to the
  host's own broker (Redis database 10, its own queue names) and runs on the host's worker;
* ``hookline.send_webhook`` and ``hookline.deliver.delay`` (and the framework integration)
  enqueue on Hookline's Redis (database 11) only;
* a Hookline worker started as the README says (``celery -A hookline.worker worker``) delivers
  them to a loopback receiver with the event id as ``webhook-id``, and retries with the policy
  given in the environment: an endpoint that always answers 500 gets exactly
  ``HOOKLINE_MAX_ATTEMPTS=2`` attempts and ends in the dead-letter queue, reason ``exhausted``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from examples.receiver import Receiver, Reply, always
from tests.conftest import flushed, isolated_url, stop_process, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOOKLINE_DB = 11  # Hookline's Redis (state and broker) in the host projects
# The host's own Celery broker and result backend (not 12: tests/store/test_schedule.py uses
# that one as a separate broker).
HOST_DB = 10

#: Hookline's settings, from the environment as the README says; the retry policy is short so
#: the failing endpoint is exhausted within the test.
HOOKLINE_ENV = {
    "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
    "HOOKLINE_MAX_ATTEMPTS": "2",
    "HOOKLINE_INITIAL_BACKOFF": "0.2",
    "HOOKLINE_MAX_BACKOFF": "0.5",
    "HOOKLINE_JITTER": "0",
    "HOOKLINE_METRICS_PORT": "0",
    "HOOKLINE_CONNECT_TIMEOUT": "1",
    "HOOKLINE_READ_TIMEOUT": "2",
}
WORKER_OPTIONS = ["-P", "threads", "-c", "8", "--without-gossip", "--without-mingle",
                  "--without-heartbeat", "-l", "info"]


# --- the wheel and the fresh virtualenv -------------------------------------------------------


def _run(command: list[str], *, timeout: float = 300, **options: Any) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **options)
    assert result.returncode == 0, (
        f"{' '.join(map(str, command))} exited {result.returncode}\n"
        f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")
    return result.stdout


def _source_copy(target: Path) -> Path:
    """The working tree's files (tracked and new, not ignored, no dot-directories), so the
    build sees what the checkout has and leaves no ``build/`` behind in it."""
    listed = _run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        if name.startswith("."):
            continue
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def _check_wheel(wheel: Path, source: Path) -> None:
    """Only the package ``hookline``, with its data files (every Lua script of the source)."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        record = archive.read(f"{dist_info}/RECORD").decode()
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    recorded = [row[0] for row in csv.reader(io.StringIO(record)) if row]
    for listing in (names, recorded):
        top_level = {name.split("/")[0] for name in listing} - {dist_info}
        assert top_level == {"hookline"}, f"the wheel ships {sorted(top_level)}"
    lua = {name for name in names if name.startswith("hookline/store/lua/")
           and name.endswith(".lua")}
    expected_lua = {f"hookline/store/lua/{path.name}"
                    for path in (source / "hookline/store/lua").glob("*.lua")}
    assert expected_lua and lua == expected_lua, f"Lua scripts missing: {expected_lua - lua}"
    assert "hookline/py.typed" in names
    for module in ("hookline/__init__.py", "hookline/worker/celery.py",
                   "hookline/celeryconfig.py", "hookline/contrib/django/apps.py",
                   "hookline/contrib/flask.py", "hookline/cli/__init__.py"):
        assert module in names, f"{module} is not in the wheel"
    assert "hookline = hookline.cli:main" in entry_points


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the working tree, installed with ``[django,flask]`` into a new
    virtualenv; returns the virtualenv's directory."""
    base = tmp_path_factory.mktemp("hookline-wheel")
    source = _source_copy(base / "src")
    dist = base / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)])
    (wheel,) = dist.glob("hookline-*.whl")
    _check_wheel(wheel, source)
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
          f"{wheel}[django,flask]"])
    return venv


# --- processes in a host project --------------------------------------------------------------


def _base_env(venv: Path, host: Path, **extra: str) -> dict[str, str]:
    """A clean environment: nothing of the test process's (its REDIS_URL, PYTHONPATH with the
    checkout), only the fresh virtualenv and Hookline's settings."""
    return {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(host)),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "VIRTUAL_ENV": str(venv),
        "REDIS_URL": isolated_url(HOOKLINE_DB),
        "HOOKLINE_DLQ_SPOOL": str(host / "hookline-dlq-spool.jsonl"),
        **HOOKLINE_ENV,
        **extra,
    }


class Process:
    """A long-running process of the host project (a worker), output to a log file."""

    def __init__(self, name: str, command: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = cwd / f"{name}.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, cwd=cwd, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self, timeout: float = 60.0) -> Process:
        def ready() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"{self.name} exited {self.process.returncode}:\n{self.output()}")
            return " ready." in self.output()

        try:
            wait_until(ready, timeout=timeout, interval=0.1)
        except BaseException:
            print(f"--- {self.name} log ---\n{self.output()}")
            raise
        return self

    def stop(self, timeout: float = 20.0) -> None:
        stop_process(self.process, timeout=timeout)
        self.log.close()


class Host:
    """A generated host project: its directory, the fresh virtualenv, its environment."""

    def __init__(self, directory: Path, venv: Path, env: dict[str, str]) -> None:
        self.dir = directory
        self.venv = venv
        self.env = env
        self.processes: list[Process] = []

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, *command: str) -> str:
        return _run(list(command), timeout=120, cwd=self.dir, env=self.env)

    def python(self, script: str) -> dict[str, Any]:
        """Run ``script`` with the fresh virtualenv's Python from the host's directory; its last
        line of output is a JSON report."""
        output = self.run(self.bin("python"), "-c", textwrap.dedent(script))
        return json.loads(output.strip().splitlines()[-1])

    def hookline(self, *arguments: str) -> str:
        return self.run(self.bin("hookline"), *arguments)

    def start(self, name: str, *celery_arguments: str) -> Process:
        process = Process(name, [self.bin("celery"), *celery_arguments], cwd=self.dir,
                          env=self.env)
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.processes:
            process.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.output()[-6000:]}" for p in self.processes)


def _write(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def _host_celeryconfig(host_queue: str) -> str:
    """The host's own ``celeryconfig.py``: its broker (``HOST_DB``), its queues, its tasks."""
    host_url = isolated_url(HOST_DB)
    return f"""
        # The host project's Celery settings (not Hookline's).
        broker_url = {host_url!r}
        result_backend = {host_url!r}
        task_serializer = "json"
        accept_content = ["json"]
        task_default_queue = "host-default"
        task_routes = {{"tasks.*": {{"queue": {host_queue!r}}}}}
        imports = ("tasks",)
        """


@pytest.fixture
def hookline_redis() -> Iterator[redis.Redis]:
    yield from flushed(isolated_url(HOOKLINE_DB))


@pytest.fixture
def host_redis() -> Iterator[redis.Redis]:
    yield from flushed(isolated_url(HOST_DB))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        running.route("/ok", always(Reply(204)))
        running.route("/down", always(Reply(500, body=b"down for good")))
        yield running


# --- what both tests check --------------------------------------------------------------------


def _messages(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [json.loads(item) for item in client.lrange(queue, 0, -1)]


def _check_queues(hookline_redis: redis.Redis, host_redis: redis.Redis, host_queue: str,
                  host_task: str, host_task_id: str, deliveries: set[str]) -> None:
    """Before any worker runs: the host's task is on the host's broker only, and Hookline's
    deliveries on Hookline's Redis only."""
    on_host = _messages(host_redis, host_queue)
    assert [(m["headers"]["task"], m["headers"]["id"]) for m in on_host] == [
        (host_task, host_task_id)]
    queued = _messages(hookline_redis, "hookline")
    assert {m["headers"]["task"] for m in queued} == {"hookline.deliver"}
    assert {m["headers"]["hookline_event"] for m in queued} == deliveries
    assert not host_redis.exists("hookline", "hookline.retry"), "deliveries on the host broker"
    assert not hookline_redis.exists(host_queue, "host-default"), "host task on Hookline's Redis"


def _check_deliveries(host: Host, receiver: Receiver, delivered: set[str], failing: str) -> None:
    """The Hookline worker delivers every event to /ok once, with the event id as webhook-id;
    the event to /down is tried HOOKLINE_MAX_ATTEMPTS (2) times and dead-lettered."""
    try:
        assert receiver.wait_for(
            lambda got: {r.webhook_id for r in got if r.path == "/ok"} >= delivered
            and sum(r.path == "/down" for r in got) >= 2, timeout=30)

        def dead_letters() -> list[dict[str, Any]] | None:
            entries = json.loads(host.hookline("dlq", "list", "--json"))
            return entries if any(e["event_id"] == failing for e in entries) else None

        entries = wait_until(dead_letters, timeout=30, interval=0.3)
    except BaseException:
        print(host.logs())
        raise
    ok = receiver.requests_to("/ok")
    assert sorted(r.webhook_id for r in ok) == sorted(delivered), "one request per event"
    assert all(r.headers.get("webhook-signature", "").startswith("v1,") for r in ok)
    assert len(entries) == 1, entries
    (entry,) = entries
    assert (entry["endpoint_id"], entry["reason"], entry["attempts"]) == (
        "shop-down", "exhausted", 2)
    assert entry["last_status"] == 500
    down = receiver.requests_to("/down")
    assert [(r.webhook_id, r.attempt) for r in down] == [(failing, 1), (failing, 2)], (
        "HOOKLINE_MAX_ATTEMPTS=2 from the environment did not reach the worker")


def _check_host_result(host_redis: redis.Redis, host: Host, task_id: str) -> dict[str, Any]:
    """The host's task ran on the host's worker; its result is in the host's backend."""
    def finished() -> dict[str, Any] | None:
        meta = host_redis.get(f"celery-task-meta-{task_id}")
        return json.loads(meta) if meta else None

    try:
        meta = wait_until(finished, timeout=30, interval=0.1)
    except BaseException:
        print(host.logs())
        raise
    assert meta["status"] == "SUCCESS", meta
    return meta["result"]


def _check_worker_logs(hookline_worker: Process, host_worker: Process, host_task: str) -> None:
    hookline_log, host_log = hookline_worker.output(), host_worker.output()
    assert "hookline.deliver" in hookline_log and host_task not in hookline_log
    assert host_task in host_log and "hookline.deliver" not in host_log
    for log in (hookline_log, host_log):
        assert "Traceback" not in log, log


def _register_endpoints(host: Host, receiver: Receiver) -> None:
    host.hookline("endpoint", "add", "shop-ok", "--url", receiver.url("/ok"))
    host.hookline("endpoint", "add", "shop-down", "--url", receiver.url("/down"))


# --- Django -----------------------------------------------------------------------------------


DJANGO_FILES = {
    "manage.py": """
        import os
        import sys

        if __name__ == "__main__":
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
            from django.core.management import execute_from_command_line

            execute_from_command_line(sys.argv)
        """,
    "proj/__init__.py": """
        # The Celery docs' layout: the host's app is loaded when Django starts.
        from .celery import app as celery_app

        __all__ = ("celery_app",)
        """,
    "proj/celery.py": """
        import os

        from celery import Celery

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")

        app = Celery("hostproj")
        app.config_from_object("celeryconfig")
        app.set_current()
        app.set_default()
        app.autodiscover_tasks()
        """,
    "proj/settings.py": """
        from pathlib import Path

        BASE_DIR = Path(__file__).resolve().parent.parent
        SECRET_KEY = "host-project-not-secret"
        DEBUG = False
        ALLOWED_HOSTS = ["*"]
        USE_TZ = True
        INSTALLED_APPS = [
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "app",
            "hookline.contrib.django",
        ]
        DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                                 "NAME": BASE_DIR / "db.sqlite3"}}
        DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
        ROOT_URLCONF = "proj.urls"
        """,
    "proj/urls.py": """
        urlpatterns = []
        """,
    # The host's own Django app named `app`.
    "app/__init__.py": "",
    "app/apps.py": """
        from django.apps import AppConfig


        class HostAppConfig(AppConfig):
            name = "app"
            label = "app"
            verbose_name = "The host's own app"
        """,
    "app/models.py": """
        from django.db import models


        class Invoice(models.Model):
            number = models.IntegerField()
        """,
    "tasks.py": """
        # The host's own tasks, on the host's own Celery app.
        from celery import current_app, shared_task


        @shared_task
        def send_invoice(number):
            return {"invoice": number, "app": current_app.main}
        """,
}

DJANGO_CHECK = """
    import json
    import sys
    import uuid

    import django

    django.setup()

    from celery import current_app
    from django.db import transaction

    import hookline
    from hookline.contrib.django import send_webhook_on_commit
    import tasks

    report = {"current_app": current_app.main,
              "shared_task_app": tasks.send_invoice.app.main}
    invoice = tasks.send_invoice.delay(7)
    report["invoice_task"] = invoice.id
    report["sent"] = hookline.send_webhook("shop-ok", "order.created", {"order": 1})
    report["delayed_event"] = str(uuid.uuid4())
    handle = hookline.deliver.delay("shop-ok", "order.paid", {"order": 1},
                                    event_id=report["delayed_event"])
    report["delayed_type"] = type(handle).__name__
    with transaction.atomic():
        report["on_commit"] = send_webhook_on_commit("shop-ok", "order.shipped", {"order": 1})
    report["failing"] = hookline.send_webhook("shop-down", "order.created", {"order": 2})
    report["current_app_after"] = current_app.main
    report["host_tasks"] = sorted(name for name in current_app.tasks
                                  if not name.startswith("celery."))
    report["files"] = {name: sys.modules[name].__file__
                       for name in ("app", "tasks", "celeryconfig", "proj", "hookline")}
    report["worker_imported"] = sorted(m for m in sys.modules if m.startswith("hookline.worker"))
    print(json.dumps(report))
    """


def _check_report(report: dict[str, Any], host: Host, main: str, host_tasks: list[str]) -> None:
    assert report["current_app"] == main, "the host's Celery app is not the current app"
    assert report["current_app_after"] == main, "enqueueing switched the current app"
    assert report["shared_task_app"] == main
    assert report["host_tasks"] == host_tasks
    assert report["delayed_type"] == "AsyncResult"
    site_packages = str(host.venv / "lib")
    for name, path in report["files"].items():
        expected = site_packages if name == "hookline" else str(host.dir)
        assert path.startswith(expected), f"{name} imported from {path}"
    assert report["worker_imported"] == [], "the web process imported Hookline's worker"


def _run_both_workers(host: Host, receiver: Receiver, host_redis: redis.Redis,
                      report: dict[str, Any], events: set[str], *, host_app: str,
                      host_queue: str, host_task: str) -> Any:
    """Start Hookline's worker as the README says and the host's own worker; check that
    Hookline delivered and retried its events and the host's worker ran only the host's task.
    Returns the host task's result."""
    hookline_worker = host.start("hookline-worker", "-A", "hookline.worker", "worker",
                                 *WORKER_OPTIONS, "-n", "hookline@%h")
    host_worker = host.start("host-worker", "-A", host_app, "worker", "-Q",
                             f"{host_queue},host-default", *WORKER_OPTIONS, "-n", "host@%h")
    hookline_worker.wait_ready()
    host_worker.wait_ready()
    _check_deliveries(host, receiver, events, report["failing"])
    result = _check_host_result(host_redis, host, report["invoice_task"])
    _check_worker_logs(hookline_worker, host_worker, host_task)
    return result


def test_django_host_project(fresh_venv: Path, tmp_path: Path, hookline_redis: redis.Redis,
                             host_redis: redis.Redis, receiver: Receiver) -> None:
    host_dir = tmp_path / "django_host"
    _write(host_dir, {**DJANGO_FILES, "celeryconfig.py": _host_celeryconfig("invoices")})
    host = Host(host_dir, fresh_venv,
                _base_env(fresh_venv, host_dir, DJANGO_SETTINGS_MODULE="proj.settings"))
    try:
        host.run(host.bin("python"), "manage.py", "check")
        _register_endpoints(host, receiver)

        report = host.python(DJANGO_CHECK)
        _check_report(report, host, "hostproj", ["tasks.send_invoice"])
        events = {report["sent"], report["delayed_event"], report["on_commit"]}
        _check_queues(hookline_redis, host_redis, "invoices", "tasks.send_invoice",
                      report["invoice_task"], events | {report["failing"]})

        # Started as the README says; DJANGO_SETTINGS_MODULE is in its environment too.
        result = _run_both_workers(host, receiver, host_redis, report, events,
                                   host_app="proj", host_queue="invoices",
                                   host_task="tasks.send_invoice")
        assert result == {"invoice": 7, "app": "hostproj"}
    finally:
        host.stop_all()


# --- Flask ------------------------------------------------------------------------------------


FLASK_FILES = {
    # The Flask quickstart's module, with the host's Celery app beside it (Flask's docs).
    "app.py": """
        from celery import Celery
        from flask import Flask, jsonify, request

        import hookline
        from hookline.contrib.flask import Hookline

        app = Flask(__name__)
        celery_app = Celery("hostflask")
        celery_app.config_from_object("celeryconfig")
        celery_app.set_default()
        app.extensions["celery"] = celery_app

        webhooks = Hookline()
        webhooks.init_app(app)

        import tasks  # noqa: E402  (the host's tasks, registered on its app)


        @app.post("/orders")
        def create_order():
            order = request.get_json()
            event_id = webhooks.send_webhook(order["endpoint"], "order.created", order)
            receipt = tasks.send_receipt.delay(order["number"])
            return jsonify(event_id=event_id, receipt_task=receipt.id)


        @app.post("/orders/paid")
        def order_paid():
            order = request.get_json()
            handle = hookline.deliver.delay(order["endpoint"], "order.paid", order,
                                            event_id=order["event_id"])
            return jsonify(task_id=handle.id, kind=type(handle).__name__)
        """,
    "tasks.py": """
        from celery import current_app, shared_task


        @shared_task
        def send_receipt(number):
            return {"receipt": number, "app": current_app.main}
        """,
}

FLASK_CHECK = """
    import json
    import sys
    import uuid

    import app as host
    from celery import current_app

    report = {"current_app": current_app.main,
              "shared_task_app": __import__("tasks").send_receipt.app.main}
    client = host.app.test_client()
    created = client.post("/orders", json={"endpoint": "shop-ok", "number": 9})
    assert created.status_code == 200, created.get_data(as_text=True)
    report["sent"] = created.json["event_id"]
    report["invoice_task"] = created.json["receipt_task"]
    report["delayed_event"] = str(uuid.uuid4())
    paid = client.post("/orders/paid", json={"endpoint": "shop-ok", "number": 9,
                                             "event_id": report["delayed_event"]})
    assert paid.status_code == 200, paid.get_data(as_text=True)
    report["delayed_type"] = paid.json["kind"]
    report["failing"] = host.webhooks.send_webhook("shop-down", "order.created", {"n": 2})
    report["current_app_after"] = current_app.main
    report["host_tasks"] = sorted(name for name in current_app.tasks
                                  if not name.startswith("celery."))
    report["files"] = {name: sys.modules[name].__file__
                       for name in ("app", "tasks", "celeryconfig", "hookline")}
    report["worker_imported"] = sorted(m for m in sys.modules if m.startswith("hookline.worker"))
    print(json.dumps(report))
    """


def test_flask_host_project(fresh_venv: Path, tmp_path: Path, hookline_redis: redis.Redis,
                            host_redis: redis.Redis, receiver: Receiver) -> None:
    host_dir = tmp_path / "flask_host"
    _write(host_dir, {**FLASK_FILES, "celeryconfig.py": _host_celeryconfig("receipts")})
    host = Host(host_dir, fresh_venv, _base_env(fresh_venv, host_dir))
    try:
        _register_endpoints(host, receiver)

        report = host.python(FLASK_CHECK)
        _check_report(report, host, "hostflask", ["tasks.send_receipt"])
        events = {report["sent"], report["delayed_event"]}
        _check_queues(hookline_redis, host_redis, "receipts", "tasks.send_receipt",
                      report["invoice_task"], events | {report["failing"]})

        result = _run_both_workers(host, receiver, host_redis, report, events,
                                   host_app="app:celery_app", host_queue="receipts",
                                   host_task="tasks.send_receipt")
        assert result == {"receipt": 9, "app": "hostflask"}
    finally:
        host.stop_all()
