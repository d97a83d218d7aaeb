"""Who acts: the operator or tenant behind a call to the service, and the errors that refuse one.

Public API::

    @dataclass(frozen=True)
    class Actor:
        name: str                      # "alice", "django:bob", "portal:<app>", "cli:<user>"
        session: str                   # opaque session id for the audit log, never a secret
        can_act: bool = True           # False: read-only
        app_scope: str | None = None   # only this application's endpoints, events, letters
        def require_act(self, action: str) -> None        # raises ReadOnly
        def sees_app(self, app: str | None) -> bool       # in scope?
        def require_app(self, app: str | None, what: str, ident: str) -> None  # NotFound
    class ReadOnly(HooklineError)      # "read-only: <name> cannot <action>"
    class NotFound(HooklineError)      # "no endpoint 'x'": unknown OR out of scope, alike
    def cli_actor() -> Actor           # "cli:<getpass user>", session "cli:<pid>@<host>"
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass

from hookline.core.errors import HooklineError


class ReadOnly(HooklineError, PermissionError):
    """A read-only actor asked for a change; the service refuses it, whatever the face shows."""

    def __init__(self, name: str, action: str) -> None:
        super().__init__(f"read-only: {name} cannot {action}")
        self.name = name
        self.action = action


class NotFound(HooklineError, LookupError):
    """Unknown, or outside the actor's application: the same error and message for both, so
    that a scoped actor cannot tell whether something of another application exists."""

    def __init__(self, what: str, ident: str, hint: str = "") -> None:
        # The hint (how to add one) only for an unscoped actor: a scoped actor's message is
        # the same whether it does not exist or is another application's.
        super().__init__(f"no {what} {ident!r}" + (f": {hint}" if hint else ""))
        self.what = what
        self.ident = ident


@dataclass(frozen=True)
class Actor:
    """Who acts (``name``), from which session (``session``, an opaque id the audit log keeps;
    never a token or a password), whether they may change anything (``can_act``) and, for a
    tenant, the one application they may see (``app_scope``; ``None``: every application)."""

    name: str
    session: str
    can_act: bool = True
    app_scope: str | None = None

    def require_act(self, action: str) -> None:
        """Refuse ``action`` (a phrase: "pause endpoint orders") for a read-only actor."""
        if not self.can_act:
            raise ReadOnly(self.name, action)

    def sees_app(self, app: str | None) -> bool:
        """Whether an object of application ``app`` (``None``: of no application) is in scope."""
        return self.app_scope is None or app == self.app_scope

    def require_app(self, app: str | None, what: str, ident: str) -> None:
        """Raise :class:`NotFound` for ``what`` ``ident`` when its application is out of scope."""
        if not self.sees_app(app):
            raise NotFound(what, ident)


def cli_actor() -> Actor:
    """The CLI's actor: the operating-system user, and a session naming this process and host
    (the audit log says who acted and from where)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return Actor(name=f"cli:{user}", session=f"cli:{os.getpid()}@{socket.gethostname()}")
