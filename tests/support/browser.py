"""What the browser tests (tests/browser/) start and drive: a private Redis, ``hookline
console`` and a worker in subprocesses, and a headless Chromium (Debian's ``chromium`` through
``/usr/bin/chromedriver``, with selenium) signed in through a DevTools header.

Kept here, not in tests/browser/conftest.py, so that the tests and the fixtures share one copy
of the module (one set of credentials): pytest loads a conftest under a name of its own.
"""

from __future__ import annotations

import base64
import functools
import os
import secrets
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlencode
from urllib.request import urlopen

import pytest
import redis

from tests.conftest import ROOT, TEST_ENV, wait_until
from tests.support.servers import free_port, stop_process

#: The Chromium and the driver the tests use: Debian's, unless told otherwise.
CHROMIUM = os.environ.get("HOOKLINE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HOOKLINE_CHROMEDRIVER", "/usr/bin/chromedriver")
#: Chromium's flags as root in a container with no network beyond loopback: no sandbox (root),
#: no GPU, and none of its own calls home (refused here, and slow to fail).
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions",
                  "--window-size=1280,900")
#: Seconds the console and the worker get to answer after they start.
START_TIMEOUT = 30.0




def browser_unavailable() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    for path, what in ((CHROMIUM, "Chromium"), (CHROMEDRIVER, "ChromeDriver")):
        if not os.access(path, os.X_OK):
            return (f"{what} is not installed at {path} (scripts/ensure-chromium.sh installs "
                    "Debian's chromium and chromium-driver; `make test` runs it)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    try:
        import hookline.console  # noqa: F401
    except ImportError as exc:
        return f"the console cannot be imported ({exc}): pip install -e '.[console]'"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (the browser tests start a private one)"
    return None


# -- the servers: a private Redis, the console, a worker ------------------------------------


class ConsoleRedis:
    """``redis-server`` on a free loopback port, keeping nothing on disk."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(directory)],
            stdout=subprocess.DEVNULL, start_new_session=True)
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        wait_until(self._answers, timeout=10, what=lambda: f"redis-server on {self.port}")

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"redis-server on port {self.port} exited ({self.process.returncode})")
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        self.client.close()
        stop_process(self.process, timeout=10)


#: Who signs in: a user with full rights and a read-only viewer (passwords random per run).
ADMIN = ("admin", secrets.token_urlsafe(12))
VIEWER = ("viewer", secrets.token_urlsafe(12))
#: The key the console signs portal links with (random per run): with it, ``hookline console``
#: serves the tenant portal under :data:`PORTAL_PATH` too.
PORTAL_KEY = secrets.token_urlsafe(32)
PORTAL_PATH = "/portal"


def server_environment(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of the processes the tier starts: the suite's settings (short backoffs,
    loopback allowed), the private Redis, and ``extra``."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("HOOKLINE_", "CELERY_"))}
    env.update(TEST_ENV, REDIS_URL=redis_url, PYTHONUNBUFFERED="1",
               HOOKLINE_DLQ_SPOOL=str(ROOT / ".pytest-browser-spool.jsonl"), **extra)
    return env


class ConsoleServer:
    """``hookline console`` in a subprocess, its log in ``log_path``; :attr:`url` is its base
    URL (no credentials)."""

    def __init__(self, redis_url: str, log_path: Path, **extra_env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = server_environment(
            redis_url,
            HOOKLINE_CONSOLE_BASIC_AUTH=":".join(ADMIN),
            HOOKLINE_CONSOLE_VIEWERS=":".join(VIEWER), **extra_env)
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", "from hookline.cli import main; main()", "console",
                 "--address", "127.0.0.1", "--port", str(self.port)],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        wait_until(self._answers, timeout=START_TIMEOUT, what=self.output)

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"hookline console exited ({self.process.returncode}):\n{self.output()}")
        try:
            with urlopen(self.url + "/", timeout=2):
                return True
        except HTTPError:  # 401 without credentials: it answers
            return True
        except (URLError, OSError):
            return False

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        stop_process(self.process, timeout=10)


class ConsoleWorker:
    """``celery -A app worker`` on the private Redis (threads pool), for the tests that need
    deliveries to happen: a receiver's answer recorded, a replay delivered."""

    def __init__(self, redis_url: str, log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "app", "worker", "-l", "info", "-P",
                 "threads", "-c", "8", "-n", f"browser-{os.getpid()}@%h", "--without-gossip",
                 "--without-mingle", "--without-heartbeat"],
                cwd=ROOT, env=server_environment(redis_url), stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._ready, timeout=START_TIMEOUT, what=self.output)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            pytest.fail(f"the worker exited ({self.process.returncode}):\n{self.output()}")
        return " ready." in self.log_path.read_text(errors="replace")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        stop_process(self.process, timeout=20)


def unique(prefix: str) -> str:
    """An id no other test (nor an earlier run on the same Redis) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# -- Chromium --------------------------------------------------------------------------------


def basic_auth(user: tuple[str, str]) -> str:
    return "Basic " + base64.b64encode(":".join(user).encode()).decode()


class Browser:
    """One headless Chromium, signed in as whoever :meth:`sign_in` says: every request it makes
    (pages, scripts, fragments a page fetches) carries that user's ``Authorization`` header,
    set through the DevTools protocol."""

    def __init__(self, base_url: str, profile: str) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        # Console messages (a CSP report, a script error) readable by the tests.
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        self.driver.set_page_load_timeout(20)
        self.base_url = base_url
        self.driver.execute_cdp_cmd("Network.enable", {})

    def sign_in(self, user: tuple[str, str] | None) -> Browser:
        """Send ``user``'s credentials with every later request (``None``: none)."""
        headers = {"Authorization": basic_auth(user)} if user else {}
        self.driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})
        return self

    def open(self, path: str) -> Browser:
        """Load ``path`` (``/endpoints/x``) of the console, from a blank page (so that no
        marker a previous page set survives)."""
        self.driver.get("about:blank")
        self.driver.get(self.base_url + path)
        return self

    @property
    def text(self) -> str:
        """The page's visible text."""
        return str(self.driver.find_element("tag name", "body").text)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def status(self) -> int | None:
        """The HTTP status of the page now shown, from the Navigation Timing entry."""
        code = self.js("const entry = performance.getEntriesByType('navigation')[0];"
                       "return entry ? entry.responseStatus : null;")
        return int(code) if code is not None else None

    def csrf(self) -> dict[str, str]:
        """The form field and CSRF token the page now shown gives its own forms."""
        body = self.driver.find_element("tag name", "body")
        return {str(body.get_attribute("data-csrf-field")):
                str(body.get_attribute("data-csrf-token") or "")}

    def by_id(self, element_id: str) -> Any:
        return self.driver.find_element("id", element_id)

    def css(self, selector: str) -> list[Any]:
        return list(self.driver.find_elements("css selector", selector))

    def wait(self, condition: Any, timeout: float = 10.0, what: Any = None) -> Any:
        """Poll ``condition(self)`` until it holds. A part of the page that refreshes itself
        (``data-refresh``) is replaced while it is read: an element found just before is then
        stale, which means "look again", not a failure. So is an element of a page being
        replaced by the next one (a form's answer): ChromeDriver may then say only that the
        node "does not belong to the document"."""
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
            WebDriverException,
        )

        def holds() -> Any:
            try:
                return condition(self)
            except (StaleElementReferenceException, NoSuchElementException):
                return False
            except WebDriverException as exc:
                if "does not belong to the document" in str(exc):
                    return False
                raise

        return wait_until(holds, timeout=timeout, interval=0.1,
                          what=what or (lambda: f"page {self.driver.current_url}:\n"
                                                f"{self.text[:2000]}"))

    def click(self, selector: str, timeout: float = 10.0) -> None:
        """Click the first element matching ``selector``, finding it again if the page
        replaced it meanwhile (see :meth:`wait`)."""

        def clicked(page: Browser) -> bool:
            found = page.css(selector)
            if not found:
                return False
            found[0].click()
            return True

        self.wait(clicked, timeout=timeout)

    def xss_marker(self) -> Any:
        """``window.__xss``: set only if a stored payload ran."""
        return self.js("return window.__xss === undefined ? null : window.__xss;")

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser")
                if entry.get("level") == "SEVERE"]

    def quit(self) -> None:
        self.driver.quit()


def forge_post(browser: Browser, action: str, fields: dict[str, str]) -> None:
    """Submit, from the page now shown, a form the page does not have: ``fields`` posted to
    ``action``, as a forged page (or a hand-edited one) would; waits for the answer."""
    browser.js("""
        const form = document.createElement('form');
        form.method = 'post'; form.action = arguments[0];
        for (const [name, value] of Object.entries(arguments[1])) {
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = name; input.value = value;
            form.appendChild(input);
        }
        document.body.appendChild(form);
        window.__before_post = 1;
        form.submit();
    """, action, fields)
    browser.wait(lambda page: page.js("return window.__before_post === undefined"
                                      " && document.readyState === 'complete';"))


@functools.cache
def console_routes() -> Any:
    """The console's URL map, bound to no particular server."""
    from hookline.console.security import SignedTokens
    from hookline.console.wsgi import make_app

    return make_app(lambda request: None, csrf=SignedTokens()).url_map.bind("127.0.0.1")


def console_path(page: str, query: dict[str, Any] | None = None, **values: Any) -> str:
    """The path of console page ``page`` (``"events.event_search"``), built from the console's
    own routes, so a test follows a renamed path."""
    path = str(console_routes().build(page, values))
    return f"{path}?{urlencode(query)}" if query else path
