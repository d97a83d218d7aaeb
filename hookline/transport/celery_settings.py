"""Celery settings for Hookline's worker and publishers. Every value can be set from the
environment; each says why.

Public as ``hookline.celeryconfig`` (``app.config_from_object("hookline.celeryconfig")``),
which exposes exactly the settings below (``__all__``), read by that full name so that a host
project's own ``celeryconfig.py`` never takes its place. Hookline's own settings (retry
policy, timeouts, limits) are validated in ``hookline/core/config.py``; the values both need
(broker URL, visibility timeout) come from there through :func:`broker_settings`, so they
always agree.
"""

import os
import warnings
from typing import Any

from kombu import Exchange, Queue

from hookline.core import sentinel
from hookline.core.config import ConfigError, Settings, broker_is_amqp, settings
from hookline.core.messages import DELIVERY_QUEUE, RETRY_QUEUE
from hookline.core.refusal import refused
from hookline.core.variables import celery_worker_settings
from hookline.store.connection import MAX_CONNECTIONS
from hookline.transport import compat
from hookline.transport.amqp import SENTINEL_TRANSPORT, TRANSPORT
from hookline.transport.bounded import publish_retry_policy

#: RabbitMQ's publish retries: for a few seconds when the broker blips.
AMQP_PUBLISH_RETRY_POLICY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.5,
                             "interval_max": 2}


def hookline_queues(config: Settings) -> tuple[Queue, ...]:
    """The delivery and retry queues. On RabbitMQ both are quorum queues (replicated and
    durable: a message survives the loss of a node). Celery then turns global QoS off, which
    quorum queues do not support (``worker_detect_quorum_queues``, on by default): the
    prefetch limit applies per consumer. Publishers and workers must declare them alike, so
    this follows the broker URL in both (``broker_settings``)."""
    arguments = {"x-queue-type": "quorum"} if broker_is_amqp(config.broker_url) else None
    return tuple(Queue(name, Exchange(name), routing_key=name, queue_arguments=arguments)
                 for name in (DELIVERY_QUEUE, RETRY_QUEUE))


def broker_settings(config: Settings, *, confirm_publish: bool = True) -> dict[str, Any]:
    """The Celery settings that follow Hookline's: the broker, its transport and options, and
    whether a publish sends ``task-sent``. ``confirm_publish``: RabbitMQ publisher confirms
    (the publishing app's, see below)."""
    options = {
        "visibility_timeout": config.visibility_timeout,
        # Look for unacknowledged messages of dead workers every tenth of the timeout (kombu's
        # default is every ~100 s), so one comes back within about 1.1 x the timeout.
        "unacked_restore_interval": max(1, round(config.visibility_timeout / 10)),
        "unacked_restore_throttle": 1,
        # The lock a worker holds while it restores such messages: a worker killed while
        # holding it would stop every restore for kombu's default 300 s. A sweep takes ms.
        "unacked_mutex_expire": 10,
        # kombu's pool of the acknowledging and publishing connections (its default is 10):
        # a worker's 512 slots may all acknowledge at once (hookline/store/connection.py).
        "max_connections": MAX_CONNECTIONS,
        # kombu makes its own Redis clients: bounded as Hookline's are (HOOKLINE_REDIS_TIMEOUT),
        # so a publish or an acknowledgement on a stalled Redis fails instead of hanging. The
        # consumer's blocking wait on the doorbell (1 s) is read when it is answered.
        "socket_connect_timeout": config.redis_timeout,
        "socket_timeout": config.redis_timeout,
    }
    values: dict[str, Any] = {
        "broker_url": config.broker_url,
        # Celery lets the CELERY_BROKER_URL environment variable override every app's
        # broker_url: a host's own would send Hookline's deliveries to the host's broker. The
        # read and write URLs, which Celery's connections use, are pinned to Hookline's.
        "broker_read_url": config.broker_url,
        "broker_write_url": config.broker_url,
        "broker_transport_options": options,
        "task_queues": hookline_queues(config),
        "task_default_queue_type": "quorum" if broker_is_amqp(config.broker_url) else "classic",
        "task_send_sent_event": config.task_sent_events,
        # A refused connection is tried again twice within half a second, a timeout never:
        # a publish fails within HOOKLINE_REDIS_TIMEOUT (hookline/transport/bounded.py).
        "task_publish_retry_policy": publish_retry_policy(),
    }
    if broker_is_amqp(config.broker_url):
        # RabbitMQ: publisher confirms, so a publish (send_webhook, a released retry: both
        # through the publishing app, hookline/transport/celery_app.py) returns only once the
        # broker has the message. The Redis options above mean nothing here.
        values["broker_transport_options"] = {"confirm_publish": confirm_publish}
        values["broker_transport"] = None  # kombu's py-amqp transport, from the URL's scheme
        # No AMQP heartbeats: with them Celery registers the task-event connection with the
        # worker's event loop (celery/worker/consumer/events.py), and under the threads pool
        # the loop then reads the reply a pool thread publishing events waits for (its first
        # exchange.declare, every confirm): the thread blocks for good holding the dispatcher's
        # lock, and the worker stops (seen here within seconds of a burst). Dead connections
        # are found by TCP keepalive instead (py-amqp turns it on: ~2.5 min).
        values["broker_heartbeat"] = 0
        values["task_publish_retry_policy"] = AMQP_PUBLISH_RETRY_POLICY
        return values
    if config.broker_url.startswith(("redis://", "rediss://", "unix://")):
        _use_transport(values, TRANSPORT, "Redis", stacklevel=3)
    if sentinel.is_sentinel(config.broker_url):
        values.update(sentinel_broker_settings(config, options))
    return values


def sentinel_broker_settings(config: Settings, options: dict[str, Any]) -> dict[str, Any]:
    """A ``sentinel://`` broker: every Sentinel, the master's name (and the Sentinels'
    password) in the transport options, and Hookline's Sentinel transport (hookline/transport/:
    the consume script, the doorbell, parking, WAIT after a publish)."""
    address = sentinel.parse(config.broker_url)
    url = address.kombu_url()
    options["master_name"] = config.sentinel_master
    options[sentinel.SENTINELS_OPTION] = [list(pair) for pair in address.sentinels]
    # Connections to the Sentinels themselves: bounded, and with their own password if any.
    options["sentinel_kwargs"] = {"socket_connect_timeout": config.redis_timeout,
                                  "socket_timeout": config.redis_timeout}
    if config.sentinel_password:
        options["sentinel_kwargs"]["password"] = config.sentinel_password
    values: dict[str, Any] = {"broker_url": url, "broker_read_url": url,
                              "broker_write_url": url}
    _use_transport(values, SENTINEL_TRANSPORT, "Sentinel", stacklevel=4)
    return values


def _use_transport(values: dict[str, Any], transport: str, kind: str, *,
                   stacklevel: int) -> None:
    """Hookline's ``transport`` (``module:Class``), the one that loses no message when a
    worker dies, unless celery or kombu is outside the tested range: a worker refuses to
    start then (hookline/worker/boot.py), and a publisher goes on with kombu's stock
    ``kind`` transport, which loses only the doorbell's prompt wake-up (warned, pointing at
    ``stacklevel``)."""
    unsupported = compat.problems(compat.imported_versions(), versions_only=True)
    if unsupported:
        warnings.warn("hookline: " + "; ".join(unsupported) + ": publishing with kombu's "
                      f"stock {kind} transport", RuntimeWarning, stacklevel=stacklevel)
    else:
        values["broker_transport"] = transport


# The worker's own app publishes only task events (Flower's): they need no publisher confirm,
# and waiting for one from a pool thread is what the heartbeat note above is about. The
# publishing app (deliveries, released retries: hookline/transport/celery_app.py) has them.
try:
    _broker = broker_settings(settings(), confirm_publish=False)
    #: CELERY_WORKER_* from the environment, each checked (hookline.core.variables).
    _worker = celery_worker_settings(os.environ)
except ConfigError as error:
    # Read while Celery's command line parses its options: one line, not Celery's traceback.
    raise refused(error) from None

# The broker is the same Redis as Hookline's state unless HOOKLINE_BROKER_URL says otherwise.
broker_url = _broker["broker_url"]
broker_read_url = _broker["broker_read_url"]
broker_write_url = _broker["broker_write_url"]
if "broker_heartbeat" in _broker:
    broker_heartbeat = _broker["broker_heartbeat"]
# Results are not stored: the outcome of a delivery lives in Redis (done marker, dead-letter
# queue), and a result backend would only add a write per task.
result_backend = None
task_ignore_result = True

# JSON only: task arguments are an endpoint id, an event type and a JSON payload, and JSON
# can be read by Flower, by other languages and by an operator with redis-cli. Pickle would let
# anyone who can write to the queue run code in the worker.
task_serializer = "json"
accept_content = ["json"]
result_serializer = "json"

# Late acknowledgement: a message is acknowledged only after the attempt has an outcome that is
# durable (delivered and marked done, retry published, or dead-lettered). A worker that dies
# mid-send leaves the message unacknowledged and it is delivered again; the idempotency gate's
# done marker stops a second send of an event whose delivery was already recorded.
task_acks_late = True
# A pool child killed mid-send (OOM, SIGKILL) requeues its message at once instead of losing it;
# the admit script counts unsettled starts so a message that kills workers every time ends in
# the dead-letter queue (reason worker_lost) instead of looping.
task_reject_on_worker_lost = True
# Failures are dead-lettered (the task_failure handler) before the message is acknowledged, so
# acknowledging a failed task loses nothing and a poison message does not loop.
task_acks_on_failure = True
task_acks_on_timeout = True
# If the broker connection drops, running tasks' messages return to the queue; cancelling them
# avoids a second copy running beside the first.
worker_cancel_long_running_tasks_on_connection_loss = True

# Prefetch one message per execution slot: a worker must not hoard events that another, idle
# worker could send now, and a crash returns at most one message per slot to the queue.
worker_prefetch_multiplier = _worker["worker_prefetch_multiplier"]

# How long an unacknowledged message stays invisible before Redis hands it to another worker:
# how late the messages of a worker that died entirely (the whole container, not a pool child)
# come back. It must exceed the longest a live worker holds a message (one attempt, as
# prefetch is one per slot); hookline/core/config.py checks that. Retries never wait in the
# broker (they wait in Hookline's retry schedule), so no countdown has to fit inside it.
broker_transport_options = _broker["broker_transport_options"]
# Retry publishing (a first delivery, a fan-out) when the connection to the broker was refused
# or dropped, briefly: on a Redis broker twice within half a second and never after a timeout
# (HOOKLINE_REDIS_TIMEOUT bounds the whole publish, hookline/transport/bounded.py); on RabbitMQ
# for a few seconds. Past that the caller gets the error (send_webhook: RedisUnavailable) or
# the task that published is retried.
task_publish_retry = True
task_publish_retry_policy = _broker["task_publish_retry_policy"]
broker_connection_retry_on_startup = True

# Webhook sending is I/O-bound: a thread pool keeps one worker process busy with many
# receivers at once. 512 slots: a process holds 512 attempts in flight, so receivers that take
# a second or more to answer still get ~500 deliveries/s from one process (64 slots gave 64/s
# against a receiver answering after 1 s). The CPU-bound part is bounded apart from the slots:
# the consumer takes a new message only while fewer than HOOKLINE_RUNNABLE_ATTEMPTS (64) of
# those it holds are not waiting on a receiver (hookline/transport/unacked.py, can_consume), so
# against fast receivers at most ~64 threads run at once, as before. Python's thread pool
# starts a thread when a task finds none idle and keeps it: a burst (a receiver stalling for
# a moment) can start all 512, which then wait idle, costing their stacks' touched pages and no
# CPU (measured in docs/workers.md: bench.inflight). Celery's time
# limits are not enforced under threads: the HTTP client's connect and read timeouts bound
# every attempt instead.
worker_pool = _worker["worker_pool"]
worker_concurrency = _worker["worker_concurrency"]

# Two queues: first deliveries and retries. `celery -A app worker` with no -Q consumes both.
task_default_queue = DELIVERY_QUEUE
# Each queue has its own exchange and routing key, so a message lands in exactly one of them;
# on RabbitMQ they are quorum queues (hookline_queues).
task_default_queue_type = _broker["task_default_queue_type"]
task_queues = _broker["task_queues"]
task_routes = {"hookline.deliver": {"queue": DELIVERY_QUEUE},
               "hookline.fanout": {"queue": DELIVERY_QUEUE}}

# Task events for Flower: names and arguments (endpoint id, event type, event id: never a URL
# or secret, which stay in the endpoint registry). The worker's are batched (HOOKLINE_EVENTS_
# FLUSH_INTERVAL, hookline/worker/consumer.py); a publisher's task-sent cannot be (see
# Settings.task_sent_events) and costs a Redis PUBLISH per delivery: off unless
# HOOKLINE_TASK_SENT_EVENTS=true. Flower then lists a delivery from the moment a worker takes it.
worker_send_task_events = True
task_send_sent_event = _broker["task_send_sent_event"]

# On SIGTERM the worker stops taking messages and lets running attempts finish (warm shutdown);
# messages it prefetched but did not start go back to the queue. A soft shutdown timeout gives
# running attempts this many seconds after a second signal before the cold shutdown. Container
# stop grace periods must be longer than the longest attempt plus this.
worker_soft_shutdown_timeout = _worker["worker_soft_shutdown_timeout"]
worker_enable_soft_shutdown_on_idle = True

worker_hijack_root_logger = True
worker_redirect_stdouts = False

# A message that is not a valid task (undecodable, unknown task name, malformed) is kept in the
# dead-letter queue (reason malformed) before Celery drops it, instead of vanishing; and an item
# on a queue's list that is not a message at all no longer stops the worker
# (hookline/transport/redis.py).
worker_consumer = "hookline.worker.consumer:HooklineConsumer"
if "broker_transport" in _broker:
    broker_transport = _broker["broker_transport"]

#: The Celery settings above, by their Celery names: what ``hookline.celeryconfig`` exposes.
__all__ = [
    "accept_content",
    "broker_connection_retry_on_startup",
    "broker_read_url",
    "broker_transport_options",
    "broker_url",
    "broker_write_url",
    "result_backend",
    "result_serializer",
    "task_acks_late",
    "task_acks_on_failure",
    "task_acks_on_timeout",
    "task_default_queue",
    "task_default_queue_type",
    "task_ignore_result",
    "task_publish_retry",
    "task_publish_retry_policy",
    "task_queues",
    "task_reject_on_worker_lost",
    "task_routes",
    "task_send_sent_event",
    "task_serializer",
    "worker_cancel_long_running_tasks_on_connection_loss",
    "worker_concurrency",
    "worker_consumer",
    "worker_enable_soft_shutdown_on_idle",
    "worker_hijack_root_logger",
    "worker_pool",
    "worker_prefetch_multiplier",
    "worker_redirect_stdouts",
    "worker_send_task_events",
    "worker_soft_shutdown_timeout",
]
if "broker_heartbeat" in _broker:
    __all__.append("broker_heartbeat")
if "broker_transport" in _broker:
    __all__.append("broker_transport")
