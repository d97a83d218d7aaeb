"""The versions of Celery, kombu and billiard Hookline's worker is written and tested for.

Hookline's transport (``hookline/transport/``) and consumer (``hookline/worker/consumer.py``)
subclass kombu's Redis transport and Celery's consumer and override some of their methods; a
release that renames one would leave a worker that takes messages and never delivers them. So
the worker checks at start-up that the installed versions are inside the tested range and that
every name it overrides or calls is there, and refuses to start otherwise, saying what to do.
A publishing process (a web request) outside the range falls back to kombu's stock transport
with a warning: its messages are still delivered, only without the doorbell (a consumer then
takes them within its 1 s blocking timeout).
``make test-compat`` runs the broker, crash and held-endpoint tests at both ends of the range.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from hookline.core.errors import HooklineError

#: Tested range per distribution: (lowest, first version not supported). Keep in step with
#: pyproject.toml's dependencies and ``make test-compat``.
SUPPORTED = {
    "celery": ((5, 6, 0), (5, 8)),
    "kombu": ((5, 6, 0), (5, 8)),
    "billiard": ((4, 2, 1), (5,)),
}

#: Names of kombu's Redis transport and Celery's consumer that Hookline overrides or calls
#: (or reads), as found on the class in every version of the range. Instance attributes
#: (``_queue_cycle``, ``connection_errors``, ``hub``...) cannot be checked on the class, and
#: names only some versions have (kombu 5.7's ``_expires``, ``_flush_brpop_reauth``,
#: ``_brpop_sent_at``) are used only if present, so neither is listed.
REQUIRED_NAMES = {
    "kombu.transport.redis:Channel": (
        "_brpop_start", "_brpop_read", "_put", "_do_restore_message", "_restore", "_create_client",
        "_q_for_pri", "_get_message_priority", "_lookup", "conn_or_acquire", "client", "pool",
        "qos",
        "QoS", "_in_poll", "active_queues",
        "priority_steps", "unacked_key", "unacked_index_key", "global_keyprefix", "sep",
    ),
    "kombu.transport.redis:QoS": (
        "append", "restore_unacked", "restore_visible", "_remove_from_indices",
        "restore_by_tag", "unacked_key", "unacked_index_key", "unacked_mutex_key",
        "unacked_mutex_expire", "visibility_timeout",
    ),
    "kombu.transport.virtual:QoS": ("append",),
    "kombu.transport.redis:Transport": ("Channel", "_deliver"),
    # hookline.transport.sentinel.SentinelChannel: kombu's Sentinel channel, its pool built
    # there.
    "kombu.transport.redis:SentinelChannel": (
        "_get_pool", "_sentinel_managed_pool", "_connparams", "from_transport_options",
        "connection_class", "pool", "async_pool", "client",
    ),
    "celery.worker.consumer:Consumer": (
        "on_send_event_buffered", "_flush_events", "on_decode_error", "on_unknown_message",
        "on_unknown_task", "on_invalid_task", "shutdown", "connect",
    ),
    # What Flower is told (hookline/worker/request.py, hookline/transport/amqp.py).
    "celery.worker.request:Request": (
        "send_event", "argsrepr", "kwargsrepr", "_request_dict", "_args", "_kwargs",
    ),
    "celery.app.amqp:AMQP": ("as_task_v2", "Connection"),
    # The worker's task-event dispatcher (hookline/worker/task_events.py).
    "celery.app.events:Events": ("dispatcher_cls",),
    "celery.events.dispatcher:EventDispatcher": ("flush", "_publish", "send", "extend_buffer"),
    "kombu.connection:Connection": ("resolve_aliases",),
    # The publishing app's backend, found without reading entry points (transport/celery_app.py).
    "celery.app.base:Celery": ("_get_backend", "backend_cls"),
}


class UnsupportedVersion(HooklineError, RuntimeError):
    """The installed Celery, kombu or billiard is outside the range Hookline is tested on."""


def version_tuple(text: str) -> tuple[int, ...]:
    """``"5.7.0rc1"`` -> ``(5, 7, 0)``: the leading numeric parts of a version."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def _spelt(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def problems(installed: dict[str, str] | None = None, *, versions_only: bool = False
             ) -> list[str]:
    """What is wrong with the installed versions (and, unless ``versions_only`` or given
    ``installed`` versions, the overridden names); empty: all is well."""
    found = []
    for name, (lowest, beyond) in SUPPORTED.items():
        text = installed.get(name) if installed is not None else _installed(name)
        if text is None:
            found.append(f"{name} is not installed")
            continue
        version = version_tuple(text)
        if not lowest <= version < beyond:
            found.append(f"{name} {text} is outside the tested range "
                          f">={_spelt(lowest)},<{_spelt(beyond)}")
    if installed is None and not versions_only:
        found += _missing_names()
    return found


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def imported_versions() -> dict[str, str]:
    """The versions of celery, kombu and billiard as the imported modules give them
    (``__version__``), for :func:`problems` in a publishing process, which has imported
    all three: reading them from the installed distributions' metadata instead parses three
    METADATA files, a few percent of a web process's first send. A worker's check
    (:func:`require_supported`) reads the installed distributions."""
    import billiard
    import celery
    import kombu

    return {"celery": str(celery.__version__), "kombu": str(kombu.__version__),
            "billiard": str(billiard.__version__)}


def _missing_names() -> list[str]:
    from importlib import import_module

    missing = []
    for where, names in REQUIRED_NAMES.items():
        module_name, _, class_name = where.partition(":")
        owner: Any = getattr(import_module(module_name), class_name)
        missing += [f"{module_name}.{class_name}.{name}" for name in names
                    if not hasattr(owner, name)]
    if missing:
        return [f"names Hookline's broker or consumer relies on are gone: {', '.join(missing)}"]
    return []


def require_supported() -> None:
    """Raise :class:`UnsupportedVersion` saying what is wrong and what to do."""
    found = problems()
    if found:
        raise UnsupportedVersion(
            "Hookline's worker will not start: " + "; ".join(found) + ". Install the "
            "versions pyproject.toml allows (pip install 'hookline[...]' resolves them), or "
            "pin them in your own requirements to that range."
        )
