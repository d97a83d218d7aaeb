"""The console mounted in a Django project, under the project's own sign-in and permissions.

    # urls.py
    from django.urls import include, path

    urlpatterns = [..., path("hookline/", include("hookline.contrib.django.console"))]

Needs ``django.contrib.auth``, ``django.contrib.sessions`` and ``hookline.contrib.django`` in
``INSTALLED_APPS`` (``manage.py migrate`` creates the two permissions). Someone not signed in
is sent to ``settings.LOGIN_URL``; a user without ``hookline.view_console`` gets 403; a user
with it but without ``hookline.act_console`` sees every page and may change nothing (the
service refuses, whatever is posted). A superuser has both.

Every POST passes Django's own CSRF check (``csrf_protect`` on the view, whether or not the
project has ``CsrfViewMiddleware``), and the console's forms carry Django's
``csrfmiddlewaretoken``. The pages are the one console application
(:func:`hookline.console.make_app`); its links carry the prefix the project includes it under.
Pages named in ``HOOKLINE_CONSOLE_FRAME_ANCESTORS`` may frame it, as they may the standalone
console (none by default).

The console needs its extra (``pip install 'hookline[console]'``: Jinja2 and Werkzeug). Without
it this module still imports, so the project's other URLs work, and the missing extra is one
line: the system check ``hookline.E002`` (``manage.py check``, ``runserver`` and ``migrate``
refuse to go on, without a traceback) and, under a WSGI server, which runs no checks, an
``ImproperlyConfigured`` with the same message from every console URL.
"""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.http import HttpRequest, HttpResponse, RawPostDataException
from django.middleware.csrf import get_token
from django.urls import re_path
from django.views.decorators.csrf import csrf_protect

#: The modules the ``console`` extra brings (``pip install 'hookline[console]'``).
CONSOLE_MODULES = frozenset({"jinja2", "werkzeug", "markupsafe"})
#: Without the console's extra: the one-line error every console URL raises (and the system
#: check ``hookline.E002`` reports); None when the extra is installed.
MISSING_EXTRA: str | None = None
try:
    from werkzeug.wrappers import Request

    from hookline.console.mount import (
        Mounted,
        call_console,
        frame_ancestors,
        host_actor,
        host_authorizer,
        host_request,
        prefix_of,
        session_digest,
    )
    from hookline.console.security import HostCsrf
    from hookline.console.wsgi import Console, make_app
except ModuleNotFoundError as exc:
    _missing = (exc.name or "").partition(".")[0]
    if _missing not in CONSOLE_MODULES:
        raise
    MISSING_EXTRA = ("the Hookline console is mounted but its extra is not installed (no "
                     f"module named {_missing!r}): "
                     "pip install 'hookline[console]'")

#: The permission to see the console's pages.
VIEW_PERMISSION = "hookline.view_console"
#: The permission to act (pause, replay, rotate a secret...); useless without the first.
ACT_PERMISSION = "hookline.act_console"
#: The field Django's CSRF middleware reads a form's token from.
CSRF_FIELD = "csrfmiddlewaretoken"

app_name = "hookline_console"


def _django_token(request: Request) -> str:
    """Django's CSRF token for the host request behind ``request`` (it also makes Django set
    the CSRF cookie on the response)."""
    return str(get_token(host_request(request)))


@cache
def console() -> Console:
    """The one console application of this process, built on first use (framed as
    ``HOOKLINE_CONSOLE_FRAME_ANCESTORS`` says then)."""
    return make_app(host_authorizer, csrf=HostCsrf(CSRF_FIELD, _django_token),
                    frame_ancestors=frame_ancestors())


def _actor_for(request: HttpRequest) -> Any:
    user = request.user
    session = getattr(request, "session", None)
    digest = session_digest(settings.SECRET_KEY.encode(),
                            session.session_key if session is not None else None)
    return host_actor("django", user.get_username(), session=digest,
                      can_act=user.has_perm(ACT_PERMISSION))


def _body(request: HttpRequest, environ: dict[str, Any]) -> bytes:
    """The request body, readable again for the console: Django's CSRF check has read it."""
    try:
        return bytes(request.body)
    except RawPostDataException:  # a multipart body streamed into request.POST
        environ["CONTENT_TYPE"] = "application/x-www-form-urlencoded"
        return urlencode(list(request.POST.lists()), doseq=True).encode()


def _response(status: int, headers: list[tuple[str, str]], body: bytes) -> HttpResponse:
    response = HttpResponse(body, status=status)
    for name, value in headers:
        response[name] = value
    return response


@csrf_protect
def console_view(request: HttpRequest, path: str = "") -> HttpResponse:
    """Every console URL: the project's sign-in and permissions first, then the console."""
    if MISSING_EXTRA is not None:
        raise ImproperlyConfigured(MISSING_EXTRA)
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not request.user.has_perm(VIEW_PERMISSION):
        raise PermissionDenied("the Hookline console needs the permission "
                               f"{VIEW_PERMISSION}")
    environ = dict(request.META)
    body = _body(request, environ) if request.method not in ("GET", "HEAD") else b""
    mounted = Mounted(environ, prefix_of(request.path_info, path), path, request,
                      _actor_for(request), body)
    answer = call_console(console(), mounted)
    return _response(answer.status, answer.headers, answer.body)


urlpatterns = [re_path(r"^(?P<path>.*)$", console_view, name="console")]
