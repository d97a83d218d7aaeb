"""``hookline console`` as an operator starts it: a process of its own on a free port, the
console behind basic auth at ``/`` and, with ``HOOKLINE_CONSOLE_SECRET_KEY`` set, the tenant
portal at ``/portal`` (a link's token is the credential there, and the server's access log
hides it)."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from hookline.service import portal
from hookline.store.apps import AppRegistry
from hookline.store.endpoints import EndpointRegistry
from tests.conftest import isolated_url, stop_process, wait_until

BIN = Path(sys.executable).parent
KEY = "k" * 40


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # a 303 is read as it is
        return None


def fetch(url: str, headers: dict[str, str] | None = None):
    opener = urllib.request.build_opener(NoRedirect)
    try:
        return opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10)
    except urllib.error.HTTPError as answer:
        return answer


@pytest.fixture
def served(quiet_redis, monkeypatch) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    url = isolated_url(3)
    env = {**os.environ, "REDIS_URL": url, "HOOKLINE_BROKER_URL": url,
           "HOOKLINE_CONSOLE_BASIC_AUTH": "alice:alice-password",
           "HOOKLINE_CONSOLE_SECRET_KEY": KEY}
    process = subprocess.Popen([str(BIN / "hookline"), "console", "--port", "0"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    assert process.stdout is not None
    while not any("Tenant portal on" in line for line in lines):
        line = process.stdout.readline()
        assert line, f"the console exited: {''.join(lines)}"
        lines.append(line)
    base = re.search(r"(http://\S+?)/ ", "".join(lines))
    assert base, lines
    monkeypatch.setenv("HOOKLINE_CONSOLE_SECRET_KEY", KEY)
    monkeypatch.setenv("HOOKLINE_PORTAL_URL", f"{base[1]}/portal")
    try:
        yield base[1], process
    finally:
        stop_process(process)  # type: ignore[arg-type]


def test_the_console_asks_for_credentials_and_the_portal_opens_with_a_link(served):
    base, process = served
    AppRegistry().add("app-a")
    EndpointRegistry().add("a-1", "http://127.0.0.1:9/a-1", app="app-a")
    assert fetch(f"{base}/").status == 401
    signed = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-password").decode()}
    assert fetch(f"{base}/", signed).status == 200
    link = portal.portal_link("app-a")
    token = link.split("token=", 1)[1]
    assert urlsplit(link).path == "/portal/enter"
    entered = fetch(link)
    assert entered.status == 303
    cookie = entered.headers["Set-Cookie"].split(";", 1)[0]
    home = fetch(f"{base}/portal/", {"Cookie": cookie})
    assert home.status == 200 and 'data-endpoint-id="a-1"' in home.read().decode()
    assert fetch(f"{base}/portal/").status in (401, 403)  # no link, no portal
    stop_process(process)  # type: ignore[arg-type]
    log = process.stdout.read() if process.stdout else ""
    wait_until(lambda: process.poll() is not None, timeout=10)
    assert "/portal/enter" in log and token not in log
