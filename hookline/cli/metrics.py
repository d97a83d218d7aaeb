"""``hookline metrics``: serve the gauges Hookline's Redis holds, for Prometheus
(``hookline.core.metrics``).

Workers serve the same gauges and their own counters on ``HOOKLINE_METRICS_PORT``; this command
serves the gauges alone, from one place, whether or not a worker runs.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from hookline.core.config import settings
from hookline.gauges import start_server
from hookline.store import connection as store


@click.command("metrics")
@click.option("--port", type=click.IntRange(1, 65535),
              help="Port to serve /metrics on (default HOOKLINE_METRICS_PORT, 9808).")
def metrics_command(port: int | None) -> None:
    """Serve queue depths, scheduled retries, dead letters and breaker states on /metrics
    until SIGINT (Ctrl-C) or SIGTERM."""
    port = port or settings().metrics_port
    if not port:
        raise click.UsageError("HOOKLINE_METRICS_PORT is 0: give --port")
    store.client().ping()  # an unreachable Redis fails here, in one line
    try:
        server = start_server(port, engine=False)
    except OSError as exc:
        raise click.ClickException(f"cannot serve on port {port}: "
                                   f"{exc.strerror or exc}") from None
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    previous = {number: signal.signal(number, on_signal)
                for number in (signal.SIGINT, signal.SIGTERM)}
    click.echo(f"serving Hookline's gauges on http://0.0.0.0:{port}/metrics; "
               "stop with Ctrl-C or SIGTERM")
    try:
        while not stopped.wait(0.5):
            pass
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        server.shutdown()
        server.server_close()
    click.echo("metrics server stopped")
