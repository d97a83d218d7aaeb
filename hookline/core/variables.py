"""Every environment variable Hookline reads, declared once: its name, the setting it fills, how
it is read (a reader of ``hookline.core.env``, which knows its default and bounds) and what it
means. :func:`hookline.core.config.load_settings` reads :data:`SETTINGS` and
:data:`POLICY` through these readers; the Celery settings module reads :data:`CELERY` through
:func:`celery_worker_settings`; the documentation's settings reference is generated from all of
them (``docs/hooks/reference.py``), so a variable cannot be read without being documented."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hookline.core.env import (
    Address,
    Choice,
    Described,
    EncryptionKeys,
    EndpointId,
    Flag,
    Integer,
    ModuleNames,
    Networks,
    Number,
    Port,
    Reader,
    Text,
)

DAY = 86400.0
WEEK = 7 * DAY
YEAR = 365 * DAY
#: Longest read timeout an endpoint may have, seconds.
MAX_READ_TIMEOUT = 120.0
#: Longest connect timeout, seconds.
MAX_CONNECT_TIMEOUT = 60.0
#: Longest HOOKLINE_REDIS_TIMEOUT, seconds.
MAX_REDIS_TIMEOUT = 60.0
#: Largest payload or response size limit, bytes (16 MiB).
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Variable:
    """One environment variable. ``field`` names what it sets (a ``Settings`` field, a
    ``RetryPolicy`` field or a Celery setting); "" when its loader reads it by rules of its
    own (``reader`` is then :class:`~hookline.core.env.Described`). ``group`` is its section
    in the reference."""

    name: str
    field: str
    reader: Reader | Described
    meaning: str
    group: str


def _group(group: str, *rows: tuple[str, str, Reader | Described, str]) -> tuple[Variable, ...]:
    return tuple(Variable(name, field, reader, meaning, group)
                 for name, field, reader, meaning in rows)


#: Where Hookline's state and broker live. Read by the loader's own code (a URL's scheme, the
#: Sentinel rules and the cluster rules depend on one another).
CONNECTION = _group(
    "Redis and the broker",
    ("HOOKLINE_REDIS_URL", "", Described("`REDIS_URL`", "a Redis URL (below)"),
     "Hookline's state: endpoints, gates, the retry schedule, dead letters. Set it in a host "
     "project whose `REDIS_URL` names another Redis: a cache that evicts keys must not hold "
     "Hookline's state."),
    ("REDIS_URL", "", Described("`redis://127.0.0.1:6379/0`",
                                "`redis://`, `rediss://`, `unix://`, `sentinel://`, "
                                "`redis+cluster://`, `rediss+cluster://`"),
     "Read when `HOOKLINE_REDIS_URL` is not set (the demo, the tests and compose use it)."),
    ("HOOKLINE_BROKER_URL", "", Described(
        "Hookline's Redis", "`redis://`, `rediss://`, `unix://`, `sentinel://`, `amqp://`, "
        "`pyamqp://`, `amqps://`"),
     "The Celery broker. Celery's own `CELERY_BROKER_URL` is never read: a host's would move "
     "Hookline's deliveries to the host's broker."),
    ("HOOKLINE_SENTINEL_MASTER", "", Described("(none)", "1-200 letters, digits, `_ . : -`"),
     "With a `sentinel://` URL: the name of the master the Sentinels monitor (the `<name>` of "
     "their `sentinel monitor <name> ...` line), the same for both URLs. Required then."),
    ("HOOKLINE_SENTINEL_PASSWORD", "", Described("(none)", "text"),
     "The Sentinels' own password (their `requirepass`), if any; the master's is in the URL."),
    ("HOOKLINE_REDIS_WAIT_REPLICAS", "", Described(
        "`all` with a Sentinel URL, else 0", "an integer 0-100, or `all`"),
     "Replicas a write that hands an event on (a publish, a parked retry, a dead letter) must "
     "reach before Hookline lets go of the event (Redis `WAIT`); `all`: every replica the "
     "Sentinels see up. Refused with a Redis Cluster for state."),
    ("HOOKLINE_STATE_SHARDS", "", Described(
        "1; 16 with a `redis+cluster://` URL", "an integer, 1 to 256"),
     "Hash tags the retry schedule, dead-letter queue and endpoint index are split over. "
     "Above 1 needs `HOOKLINE_BROKER_URL` apart from the state. Set it once: changing it "
     "strands stored retries and dead letters."),
)

#: The retry policy's fields (``RetryPolicy``), validated together after they are read.
POLICY = _group(
    "Retry policy",
    ("HOOKLINE_INITIAL_BACKOFF", "initial_backoff", Number(5.0, minimum=-float("inf")),
     "Delay after the first failed attempt; at most `HOOKLINE_MAX_BACKOFF`."),
    ("HOOKLINE_BACKOFF_MULTIPLIER", "multiplier", Number(2.0, minimum=-float("inf"), unit=""),
     "Growth of the delay per attempt, from 1 to 100."),
    ("HOOKLINE_MAX_BACKOFF", "max_backoff", Number(3600.0, minimum=-float("inf")),
     "Ceiling of any one delay; at most a week."),
    ("HOOKLINE_JITTER", "jitter", Number(0.2, minimum=-float("inf"), unit=""),
     "Fraction, from 0 to 1, by which each delay is shortened at random (0.2: 80-100 % of "
     "nominal), so events that failed together do not come back together."),
    ("HOOKLINE_MAX_ATTEMPTS", "max_attempts", Integer(35, minimum=1),
     "Attempts in all, the first included; at most 1,000."),
    ("HOOKLINE_MAX_AGE", "max_age", Number(172800.0, minimum=-float("inf")),
     "Time after the first attempt past which no retry is scheduled (paused time not "
     "counted); at most 90 days."),
)

#: Every other setting: read by its reader into the ``Settings`` field it names.
SETTINGS = (
    *_group(
        "Redis and the broker",
        ("HOOKLINE_REDIS_TIMEOUT", "redis_timeout",
         Number(5.0, minimum=1.0, maximum=MAX_REDIS_TIMEOUT),
         "Longest any one call to Hookline's Redis or its Redis broker waits to connect and "
         "for the answer, in every process. Past it (or at once when the connection is "
         "refused, after two quick retries) `send_webhook`, `publish`, `deliver.delay`, "
         "`portal_link` and the console's pages raise `hookline.RedisUnavailable`, naming the "
         "server and this timeout, instead of hanging on a stalled Redis; a worker fails that "
         "one step and carries on (its messages wait in Redis)."),
        ("HOOKLINE_REDIS_WAIT_TIMEOUT", "redis_wait_timeout",
         Number(1.0, minimum=0.001, maximum=60.0),
         "Longest wait for the replicas of `HOOKLINE_REDIS_WAIT_REPLICAS`; too few in time "
         "fails the write as an unreachable Redis would. Below `HOOKLINE_REDIS_TIMEOUT` "
         "when replicas are waited for."),
    ),
    *_group(
        "Workers and acknowledgement",
        ("CELERY_VISIBILITY_TIMEOUT", "visibility_timeout",
         Number(300.0, minimum=5.0, maximum=WEEK),
         "Seconds an unacknowledged message stays invisible before the broker hands it to "
         "another worker: the last resort for messages of a worker that never registered its "
         "liveness. Must exceed the longest attempt (connect + 2 x read timeout + 10 s)."),
        ("HOOKLINE_HEARTBEAT_INTERVAL", "heartbeat_interval",
         Number(2.0, minimum=0.05, maximum=60.0),
         "Seconds between a worker process's heartbeats."),
        ("HOOKLINE_RECONCILE_INTERVAL", "reconcile_interval",
         Number(30.0, minimum=1.0, maximum=3600.0),
         "Seconds between sweeps that mend the in-flight counts Redis keeps for the workers "
         "(an attempt whose settle was lost holds no endpoint slot past it); a worker also "
         "sweeps as soon as Redis is back after an outage."),
        ("HOOKLINE_MALLOC_TRIM_INTERVAL", "malloc_trim_interval",
         Number(60.0, minimum=0.0, maximum=86400.0),
         "Seconds between two returns of a worker process's free heap memory to the system "
         "(glibc's malloc_trim; 0: never). Without them a worker keeps the high-water mark of "
         "a burst (a backlog after an outage) in freed pages. Ignored where the C library is "
         "not glibc."),
        ("HOOKLINE_LIVENESS_WINDOW", "liveness_window", Number(6.0, minimum=0.2, maximum=3600.0),
         "A process silent this long is dead, and its messages go back to the others at once; "
         "at least twice the heartbeat interval."),
        ("HOOKLINE_RUNNABLE_ATTEMPTS", "runnable_attempts",
         Integer(64, minimum=1, maximum=100_000),
         "Most attempts a worker process runs at once that are not waiting on a receiver; the "
         "rest of its slots hold attempts waiting for an answer."),
        ("HOOKLINE_MAX_UNSETTLED_STARTS", "max_unsettled_starts",
         Integer(3, minimum=1, maximum=100),
         "Times an attempt may start without an outcome (its worker killed mid-send) before the "
         "event is dead-lettered as `worker_lost`."),
        ("HOOKLINE_WORKER_IMPORTS", "worker_imports", ModuleNames(),
         "Modules the worker imports at start-up: where a host's operational-event callbacks "
         "and signal receivers connect."),
    ),
    *_group(
        "Attempts",
        ("HOOKLINE_CONNECT_TIMEOUT", "connect_timeout",
         Number(5.0, minimum=0.1, maximum=MAX_CONNECT_TIMEOUT),
         "TCP and TLS connect timeout."),
        ("HOOKLINE_READ_TIMEOUT", "read_timeout",
         Number(15.0, minimum=0.1, maximum=MAX_READ_TIMEOUT),
         "Time to wait for the response; an endpoint's `--timeout` overrides it. An attempt ends "
         "after connect + 2 x read timeout in all, however slowly a receiver trickles."),
        ("HOOKLINE_RETRY_AFTER_CAP", "retry_after_cap", Number(3600.0, maximum=WEEK),
         "Longest Retry-After honoured; a receiver asking for more gets this."),
        ("HOOKLINE_MAX_PAYLOAD_BYTES", "max_payload_bytes",
         Integer(256 * 1024, minimum=1, maximum=MAX_BYTES, unit="bytes"),
         "Largest payload accepted (UTF-8 bytes of compact JSON), at every door, the worker's "
         "included."),
        ("HOOKLINE_MAX_RESPONSE_BYTES", "max_response_bytes",
         Integer(64 * 1024, minimum=0, maximum=MAX_BYTES, unit="bytes"),
         "Response body bytes read; the rest is discarded unread."),
    ),
    *_group(
        "Circuit breaker",
        ("HOOKLINE_BREAKER_THRESHOLD", "breaker_threshold", Integer(5, minimum=1),
         "Consecutive retryable failures that open an endpoint's breaker."),
        ("HOOKLINE_BREAKER_COOLDOWN", "breaker_cooldown", Number(30.0, minimum=0.1, maximum=DAY),
         "Time an opened breaker waits before one probe may go through; doubled after each "
         "failed probe."),
        ("HOOKLINE_BREAKER_MAX_COOLDOWN", "breaker_max_cooldown",
         Number(600.0, minimum=0.1, maximum=DAY),
         "Longest cool-down; at least `HOOKLINE_BREAKER_COOLDOWN`."),
    ),
    *_group(
        "Retry schedule",
        ("HOOKLINE_SCHEDULE_MAX", "schedule_max", Integer(1_000_000, minimum=1),
         "Most retries in the schedule in all; past it a retry is dead-lettered "
         "`backlog_full`."),
        ("HOOKLINE_SCHEDULE_MAX_PER_ENDPOINT", "schedule_max_per_endpoint",
         Integer(100_000, minimum=1),
         "Most retries (and paused deliveries) one endpoint may have in the schedule."),
        ("HOOKLINE_RETRY_QUEUE_LIMIT", "retry_queue_limit",
         Integer(1000, minimum=1, maximum=10**7),
         "Most released retries waiting on the `hookline.retry` queue; the rest wait in the "
         "schedule, so first deliveries keep their share of the workers."),
        ("HOOKLINE_RELEASER", "releaser", Choice(("worker", "off")),
         "`worker`: every worker runs a releaser thread; `off`: none (run `hookline releaser`)."),
        ("HOOKLINE_RELEASER_MAX_SLEEP", "releaser_max_sleep",
         Number(1.0, minimum=0.01, maximum=60.0),
         "Longest a releaser sleeps between looks at the schedule."),
    ),
    *_group(
        "Dead letters and idempotency",
        ("HOOKLINE_REPLAY_HORIZON", "replay_horizon", Number(7 * DAY, maximum=YEAR),
         "How long after the retry window a delivered event is still recognised (its done "
         "marker lives the retry window plus this), so a replay of an event delivered meanwhile "
         "is not sent twice."),
        ("HOOKLINE_DLQ_RETENTION", "dlq_retention", Number(30 * DAY, maximum=10 * YEAR),
         "How long a dead letter is kept; 0 keeps them forever. Never trimmed by size."),
        ("HOOKLINE_DLQ_SPOOL", "dlq_spool_path", Text("hookline-dlq-spool.jsonl", "a file path"),
         "Where dead letters go while Redis is unreachable; moved into Redis on the next "
         "write. `hookline worker` gives each of its processes its own file (`-<n>` before the "
         "suffix)."),
    ),
    *_group(
        "Security",
        ("HOOKLINE_ALLOWED_NETWORKS", "allowed_networks", Networks(),
         "Private networks the SSRF guard lets through (e.g. `127.0.0.0/8` for the demo and "
         "tests); none: only public addresses."),
        ("HOOKLINE_HTTPS_ONLY", "https_only", Flag(False),
         "Refuse `http://` endpoints, when they are added and at every send."),
        ("HOOKLINE_SECRET_OVERLAP", "secret_overlap", Number(DAY, maximum=30 * DAY),
         "How long an old signing secret keeps signing after a rotation."),
        ("HOOKLINE_ENCRYPTION_KEYS", "encryption_keys", EncryptionKeys(),
         "Keys that encrypt signing secrets and header values at rest (AES-256-GCM), newest "
         "first: the newest seals, every one listed opens what it sealed. Every process that "
         "reads or writes endpoints needs them (workers, the CLI, the console). A secret: "
         "never logged or shown. See the guide on encryption at rest for rotating them."),
    ),
    *_group(
        "Flower, metrics and logs",
        ("HOOKLINE_EVENTS_FLUSH_INTERVAL", "events_flush_interval", Number(0.1, maximum=10.0),
         "Longest a worker gathers task events (Flower's) before publishing them as one "
         "message (sooner at 256 events, and at shutdown); 0: at once, as Celery does."),
        ("HOOKLINE_TASK_SENT_EVENTS", "task_sent_events", Flag(False),
         "Publishers send Celery's `task-sent` event (Flower lists a queued delivery as "
         "PENDING), one Redis PUBLISH per delivery."),
        ("HOOKLINE_METRICS_PORT", "metrics_port", Port(9808),
         "Port of the worker's and `hookline metrics`' `/metrics`; 0: none."),
        ("HOOKLINE_METRICS_ADDRESS", "metrics_address", Address("127.0.0.1"),
         "IP address both metrics servers listen on."),
        ("HOOKLINE_METRICS_MAX_ENDPOINTS", "metrics_max_endpoints", Integer(200),
         "Endpoints with series of their own in a worker's metrics; the rest count as "
         "`endpoint=\"_other\"` (0: every endpoint)."),
        ("HOOKLINE_LOG_FORMAT", "log_format", Choice(("text", "json")),
         "`json`: one JSON object per log line (in Hookline's worker, Celery's lines too)."),
    ),
    *_group(
        "Attempt history",
        ("HOOKLINE_HISTORY_RETENTION", "history_retention", Number(None, maximum=YEAR),
         "How long an event's attempts are kept after its latest one; 0: none. Unset: as long "
         "as the event's delivery record (max age + replay horizon), inside it at no extra "
         "Redis command; shorter keeps them in a list of their own (two commands more per "
         "attempt)."),
        ("HOOKLINE_HISTORY_ATTEMPTS", "history_attempts", Integer(50, minimum=1, maximum=10_000),
         "Most attempts kept per event (the latest)."),
        ("HOOKLINE_HISTORY_BODY_BYTES", "history_body_bytes",
         Integer(256, minimum=0, maximum=64 * 1024, unit="bytes"),
         "Response bytes kept per attempt; 0: none."),
        ("HOOKLINE_EVENT_LOG_RETENTION", "event_log_retention",
         Number(3 * DAY, minimum=60.0, maximum=YEAR),
         "How long the event log (the console's and the portal's Events page) keeps an event "
         "after its latest change (delivered, retrying, held, dead)."),
        ("HOOKLINE_EVENT_LOG_PER_ENDPOINT", "event_log_per_endpoint",
         Integer(10_000, minimum=1, maximum=1_000_000),
         "Most events the event log keeps per endpoint (the latest changed)."),
        ("HOOKLINE_HEALTH_INTERVAL", "health_interval", Number(10.0, minimum=0.1, maximum=60.0),
         "Seconds between a worker process's writes of endpoint health (attempts per minute, "
         "latency, the latest attempts: the endpoint pages' chart), one round trip for every "
         "endpoint it attempted; what a killed worker counted since its last write is lost."),
    ),
    *_group(
        "Outbox",
        ("HOOKLINE_OUTBOX", "outbox", Flag(False),
         "`on`: `send_webhook_on_commit` and `publish_on_commit` (Django) and the SQLAlchemy "
         "helpers write each event as a row of the host's database in the caller's "
         "transaction, and the workers' relay publishes it once committed; nothing on the "
         "web path touches Redis. Off by default: it needs the table (Django's migration, or "
         "the SQLAlchemy table) and workers that reach the database. See the outbox guide."),
        ("HOOKLINE_OUTBOX_URL", "outbox_url", Text(description="a SQLAlchemy database URL"),
         "The database the relay reads, as a SQLAlchemy URL (`postgresql+psycopg://...`, "
         "`mysql+pymysql://...`, `sqlite:///path`); unset: the Django project that "
         "`DJANGO_SETTINGS_MODULE` names. May hold a password: never logged or shown."),
        ("HOOKLINE_OUTBOX_DATABASE", "outbox_database", Text("default"),
         "The Django database alias the relay reads (with `DJANGO_SETTINGS_MODULE`)."),
        ("HOOKLINE_OUTBOX_BATCH", "outbox_batch", Integer(500, minimum=1, maximum=10_000),
         "Most rows one relay pass claims and publishes."),
        ("HOOKLINE_OUTBOX_HOLD", "outbox_hold", Number(60.0, minimum=1.0, maximum=3600.0),
         "Longest a relay holds rows it claimed without finishing (a relay paused or cut off "
         "mid-pass): the lease of a claim on SQLite; on PostgreSQL the relay's session ends "
         "after this long idle in its transaction, on MySQL/MariaDB after this long idle, "
         "and its rows go to another relay (published again under the same event ids)."),
        ("HOOKLINE_OUTBOX_POLL", "outbox_poll", Number(0.05, minimum=0.005, maximum=60.0),
         "Seconds a relay waits before looking again when it found fewer rows than a batch "
         "(how soon a committed row is published at most, and the idle queries per worker)."),
    ),
    *_group(
        "Operational events",
        ("HOOKLINE_OPERATIONAL_ENDPOINT", "operational_endpoint", EndpointId(),
         "A registered endpoint that operational events (endpoint disabled, event "
         "dead-lettered, endpoint failing or recovered) are also delivered to, as webhooks."),
    ),
)

#: The Celery worker settings the environment can change, read by the Celery settings module
#: (``hookline.celeryconfig``) through :func:`celery_worker_settings`.
CELERY = _group(
    "Celery worker",
    ("CELERY_WORKER_POOL", "worker_pool", Choice(("threads", "prefork", "processes", "solo",
                                                  "gevent", "eventlet", "custom")),
     "The execution pool. `threads` is the one measured and tested; prefork needs "
     "`PROMETHEUS_MULTIPROC_DIR` for metrics."),
    ("CELERY_WORKER_CONCURRENCY", "worker_concurrency", Integer(512, minimum=1, maximum=100_000),
     "Slots per worker process (attempts in flight); `HOOKLINE_RUNNABLE_ATTEMPTS` of them run "
     "at once."),
    ("CELERY_WORKER_PREFETCH_MULTIPLIER", "worker_prefetch_multiplier",
     Integer(1, minimum=0, maximum=1000),
     "Messages reserved per slot: one, so no worker hoards events an idle one could send."),
    ("CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT", "worker_soft_shutdown_timeout",
     Number(30.0, maximum=DAY),
     "After a second SIGTERM (cold shutdown), how long running attempts may go on before they "
     "are abandoned (their messages come back)."),
)

#: Variables a single command or process reads for itself, outside the settings.
PROCESS = _group(
    "Processes",
    ("HOOKLINE_WORKER_PROCESSES", "", Described("`auto`", "a number, or `auto`"),
     "Worker processes `hookline worker` runs (its `--processes`); `auto`: one per core this "
     "process may use (CPU affinity, capped by a container's CPU quota)."),
    ("HOOKLINE_WORKER_SUPERVISED", "", Described("(unset)", "set by `hookline worker`"),
     "Set by `hookline worker` in the workers it supervises (they share one metrics server "
     "and directory); not for users to set."),
    ("DJANGO_SETTINGS_MODULE", "", Described("(none)", "a Python module path"),
     "Django's own: with `HOOKLINE_OUTBOX=on` and no `HOOKLINE_OUTBOX_URL`, a worker or "
     "`hookline outbox relay` started with the host's settings module reads the outbox from "
     "its database (`HOOKLINE_OUTBOX_DATABASE`)."),
    ("PROMETHEUS_MULTIPROC_DIR", "", Described("(none)", "a directory"),
     "Under the prefork pool: an empty directory of that worker's own where its children "
     "write their metrics (prometheus-client's multiprocess mode)."),
)

#: The standalone console's (``hookline console``), read by ``hookline.console.standalone``.
#: Their values are secrets, but for the frame ancestors: never logged or shown.
CONSOLE = _group(
    "Console",
    ("HOOKLINE_CONSOLE_BASIC_AUTH", "", Described(
        "(none)", "`user:password[,user:password...]` (a password may hold `:`, not `,`)"),
     "Operators who may sign in to `hookline console` and act. There is no default password: "
     "without this or `HOOKLINE_CONSOLE_VIEWERS` the console refuses to start."),
    ("HOOKLINE_CONSOLE_VIEWERS", "", Described("(none)", "`user:password[,user:password...]`"),
     "Users who may sign in and look, but not act (read-only, enforced on the server)."),
    ("HOOKLINE_CONSOLE_SECRET_KEY", "", Described("a random key per process",
                                                  "text of 32 characters or more"),
     "Keys the console's CSRF tokens and session digests. Give several console processes "
     "behind one balancer the same key, so that each accepts the others' forms."),
    ("HOOKLINE_CONSOLE_FRAME_ANCESTORS", "", Described(
        "`'none'`", "space-separated CSP sources, e.g. `https://admin.example.com 'self'`"),
     "Pages allowed to embed the console in a frame (the CSP's `frame-ancestors`); "
     "`'none'`: no page may."),
    ("HOOKLINE_PORTAL_URL", "", Described(
        "(none)", "an http(s) URL, e.g. `https://hooks.example.com/portal`"),
     "Where the tenant portal is served: the base of the links `hookline portal link` and "
     "`hookline.portal_link` make (signed with `HOOKLINE_CONSOLE_SECRET_KEY`)."),
    ("HOOKLINE_PORTAL_FRAME_ANCESTORS", "", Described(
        "`'none'`", "space-separated CSP sources, e.g. `https://app.example.com`"),
     "Pages allowed to embed the tenant portal in a frame (the CSP's `frame-ancestors`); "
     "`'none'`: no page may. Another site's page needs the portal on https (its session "
     "cookie is then `SameSite=None; Secure`)."),
)

#: Every variable, in the reference's order.
ALL = (*CONNECTION, *POLICY, *SETTINGS, *CELERY, *PROCESS, *CONSOLE)


def celery_worker_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The Celery settings of :data:`CELERY` from ``env`` (``{"worker_pool": "threads",
    ...}``), each validated: a bad value raises ``ConfigError`` naming its variable."""
    return {variable.field: variable.reader.read(env, variable.name)  # type: ignore[union-attr]
            for variable in CELERY}
