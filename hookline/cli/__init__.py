"""The ``hookline`` command: one module per command group (``endpoint`` and ``send`` in
``main``, ``dlq``, ``breaker``, ``event``, ``schedule``/``releaser``, ``stats``, ``metrics``)."""

from hookline.cli.main import main

__all__ = ["main"]
