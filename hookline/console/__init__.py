"""The web console: one WSGI application over the service layer (:mod:`hookline.service`),
served on its own by ``hookline console`` or mounted in a Django or Flask host.

:func:`~hookline.console.wsgi.make_app` builds it from an authorizer (who makes a request) and a
CSRF protection; :func:`~hookline.console.standalone.standalone_app` is the standalone one,
with basic auth from the environment. It needs the ``console`` extra (Jinja2 and Werkzeug).
"""

from hookline.console.wsgi import Console, make_app

__all__ = ["Console", "make_app"]
