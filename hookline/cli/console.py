"""``hookline console``: the web console, served on its own with HTTP basic auth.

The settings are checked first (a bad one is one line naming it), then the console's
credentials (none: it refuses to start, saying which variable to set; there is no default
password), then Redis (it must answer). Without Jinja2 and Werkzeug it says which extra to
install.

With ``HOOKLINE_CONSOLE_SECRET_KEY`` set, the same server also serves the tenant portal under
``/portal`` (``HOOKLINE_PORTAL_URL`` should then name that path): no basic auth there, a
portal link's token is the credential, and the access log hides it.
"""

from __future__ import annotations

import os
from typing import Any

import click

from hookline.core.config import settings
from hookline.store import connection as store

#: The modules the ``console`` extra brings (``pip install 'hookline[console]'``).
CONSOLE_MODULES = frozenset({"jinja2", "werkzeug", "markupsafe"})
#: Where ``hookline console`` serves the portal when it can sign links.
PORTAL_PATH = "/portal"


@click.command("console")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="IP address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8090, show_default=True,
              help="Port to listen on (0: any free one; the URL printed names it).")
def console_command(address: str, port: int) -> None:
    """Serve the operator console (HOOKLINE_CONSOLE_BASIC_AUTH, HOOKLINE_CONSOLE_VIEWERS)."""
    settings()
    try:
        from werkzeug.middleware.dispatcher import DispatcherMiddleware
        from werkzeug.serving import make_server

        from hookline.console.portal import PortalRequestHandler, portal_app
        from hookline.console.standalone import standalone_app
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in CONSOLE_MODULES:
            raise
        raise click.ClickException("the console needs Jinja2 and Werkzeug: "
                                   "pip install 'hookline[console]'") from None
    wsgi_app: Any = standalone_app(os.environ)
    portal = bool(os.environ.get("HOOKLINE_CONSOLE_SECRET_KEY"))
    if portal:
        wsgi_app = DispatcherMiddleware(wsgi_app, {PORTAL_PATH: portal_app(os.environ)})
    store.client().ping()
    try:
        server = make_server(address, port, wsgi_app, threaded=True,
                             request_handler=PortalRequestHandler)
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot listen on {address} port {port}: "
                                   f"{getattr(exc, 'strerror', None) or exc}") from None
    host = f"[{address}]" if ":" in address else address
    click.echo(f"Hookline console on http://{host}:{server.port}/ (Ctrl+C stops it)")
    if portal:
        click.echo(f"Tenant portal on http://{host}:{server.port}{PORTAL_PATH}/")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
