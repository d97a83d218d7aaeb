"""``hookline metrics``: the exporter of the gauges Hookline's Redis holds, for Prometheus
(``hookline.transport.gauges``).

Run one (per Redis): workers serve only their own counters on ``HOOKLINE_METRICS_PORT``; this
command serves the state they share (queue depths, scheduled retries, dead letters, breakers),
whether or not a worker runs.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from hookline.core.config import ConfigError, load_settings, settings
from hookline.outbox.status import OutboxCollector
from hookline.store import connection as store
from hookline.transport.gauges import start_server


@click.command("metrics")
@click.option("--port", type=click.IntRange(1, 65535),
              help="Port to serve /metrics on (default HOOKLINE_METRICS_PORT, 9808).")
@click.option("--address", help="IP address to listen on (default HOOKLINE_METRICS_ADDRESS, "
                                "127.0.0.1; 0.0.0.0 for every interface).")
def metrics_command(port: int | None, address: str | None) -> None:
    """Serve queue depths, scheduled retries, dead letters and breaker states on /metrics
    until SIGINT (Ctrl-C) or SIGTERM."""
    port = port or settings().metrics_port
    if not port:
        raise click.UsageError("HOOKLINE_METRICS_PORT is 0: give --port")
    if address is not None:
        try:
            address = load_settings({"HOOKLINE_METRICS_ADDRESS": address}).metrics_address
        except ConfigError as exc:
            raise click.BadParameter(str(exc).partition("=")[2],
                                     param_hint="--address") from None
    address = address or settings().metrics_address
    store.client().ping()  # an unreachable Redis fails here, in one line
    try:
        server = start_server(port, engine=False, gauges=True, addr=address,
                              collectors=[OutboxCollector()] if settings().outbox else [])
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {address} port {port}: "
                                   f"{exc.strerror or exc}") from None
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    previous = {number: signal.signal(number, on_signal)
                for number in (signal.SIGINT, signal.SIGTERM)}
    shown = f"[{address}]" if ":" in address else address
    click.echo(f"serving Hookline's gauges on http://{shown}:{port}/metrics; "
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
