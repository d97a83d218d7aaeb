"""The standalone console in-process, behind werkzeug's test client: an operator and a
read-only viewer with known passwords, and helpers that sign in, read a page's CSRF token and
post a form as a browser would."""

from __future__ import annotations

import base64
import re
from typing import Any

from werkzeug.test import Client, TestResponse

from hookline.console.standalone import standalone_app

OPERATOR = ("alice", "alice-password")
VIEWER = ("victor", "victor-password")
ENV = {"HOOKLINE_CONSOLE_BASIC_AUTH": f"{OPERATOR[0]}:{OPERATOR[1]}",
       "HOOKLINE_CONSOLE_VIEWERS": f"{VIEWER[0]}:{VIEWER[1]}"}
#: The token as a page carries it: in its forms, and on its body for scripts.
TOKEN = re.compile(r'(?:name="csrf_token" value|data-csrf-token)="([0-9a-f]{64})"')


def basic(user: str, password: str) -> dict[str, str]:
    """The Authorization header a browser sends after its sign-in prompt."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class Browser:
    """One browser (its own cookie jar, so its own session) signed in as ``who``."""

    def __init__(self, app: Any, who: tuple[str, str] = OPERATOR) -> None:
        self.client = Client(app)
        self.headers = basic(*who)

    def get(self, path: str) -> TestResponse:
        return self.client.get(path, headers=self.headers)

    def token(self, path: str = "/") -> str:
        """The CSRF token the page at ``path`` puts in its forms."""
        found = TOKEN.search(self.get(path).get_data(as_text=True))
        assert found, f"no CSRF token on {path}"
        return found[1]

    def post(self, path: str, data: dict[str, str] | None = None, *,
             token_from: str | None = "/") -> TestResponse:
        """POST ``data`` with the CSRF token of the page ``token_from`` (None: without)."""
        form = dict(data or {})
        if token_from is not None:
            form["csrf_token"] = self.token(token_from)
        return self.client.post(path, data=form, headers=self.headers)


def console(env: dict[str, str] | None = None) -> Any:
    """The standalone console with :data:`ENV`'s users (and ``env`` on top)."""
    return standalone_app({**ENV, **(env or {})})
