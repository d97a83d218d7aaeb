"""The browser tier: the console served by ``hookline console`` in a subprocess, on a free port
and a private Redis, driven by a real headless Chromium (Debian's ``chromium`` through
``/usr/bin/chromedriver``, with selenium).

Everything here starts once per session (a Redis, the console, a worker when a test asks for
one, one Chromium) and is stopped at the end. Each test writes its own endpoints and events
under ids of its own, so tests never see each other's data and nothing is flushed under the
running worker. Where Chromium, its driver, selenium or the console's dependencies cannot be
had, every test here skips, saying which (``make test`` runs ``scripts/ensure-chromium.sh``
first, which installs them on Debian).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.conftest import ROOT
from tests.support.browser import (
    ADMIN,
    PORTAL_KEY,
    PORTAL_PATH,
    START_TIMEOUT,
    Browser,
    ConsoleRedis,
    ConsoleServer,
    ConsoleWorker,
    browser_unavailable,
)


@pytest.fixture(scope="session", autouse=True)
def browser_available() -> None:
    reason = browser_unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def console_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleRedis]:
    server = ConsoleRedis(tmp_path_factory.mktemp("console-redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def console_server(console_redis: ConsoleRedis) -> Iterator[ConsoleServer]:
    # With a secret key, the same process serves the tenant portal under /portal.
    server = ConsoleServer(console_redis.url, ROOT / ".pytest-browser-console.log",
                           HOOKLINE_CONSOLE_SECRET_KEY=PORTAL_KEY)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def console_worker(console_redis: ConsoleRedis) -> Iterator[ConsoleWorker]:
    worker = ConsoleWorker(console_redis.url, ROOT / ".pytest-browser-worker.log")
    yield worker
    worker.stop()


@pytest.fixture
def console_state(console_redis: ConsoleRedis) -> Iterator[redis.Redis]:
    """This test process's Hookline pointed, for one test, at the console's Redis (its store
    classes, ``send_webhook`` and the publishing app follow ``configure``); yields a client on
    it (str replies)."""
    from hookline.core import config

    config.configure({"REDIS_URL": console_redis.url, "HOOKLINE_BROKER_URL": console_redis.url})
    try:
        yield console_redis.client
    finally:
        config.configure()


@pytest.fixture(scope="session")
def chromium(console_server: ConsoleServer) -> Iterator[Browser]:
    profile = tempfile.mkdtemp(prefix="hookline-chromium-")
    started = time.monotonic()
    browser = Browser(console_server.url, profile)
    assert time.monotonic() - started < START_TIMEOUT
    yield browser
    browser.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(chromium: Browser) -> Iterator[Browser]:
    """The session's Chromium, signed in as the admin, its cookies cleared after the test."""
    chromium.sign_in(ADMIN)
    yield chromium
    chromium.driver.delete_all_cookies()
    chromium.sign_in(ADMIN)


@pytest.fixture
def portal_link(console_server: ConsoleServer,
                monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Makes a link to an application's portal on the served console, signed with the
    server's key: ``portal_link("app-a", read_only=True)``."""
    from hookline.service import portal

    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", PORTAL_KEY)

    def make(app_id: str, *, read_only: bool = False) -> str:
        return portal.portal_link(app_id, read_only=read_only,
                                  base_url=console_server.url + PORTAL_PATH)

    return make


@pytest.fixture
def tenant(chromium: Browser) -> Iterator[Browser]:
    """The session's Chromium with no console credentials (a tenant has only its link), its
    cookies cleared after the test."""
    chromium.driver.delete_all_cookies()
    chromium.sign_in(None)
    yield chromium
    chromium.driver.delete_all_cookies()
    chromium.sign_in(ADMIN)
