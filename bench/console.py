"""The console at scale: every page's answer time with 10,000 endpoints and 100,000 dead letters.

    python -m bench.console [--endpoints N] [--dead-letters N] [--log-events N] [--requests R]
                            [--quick]

A private Redis is filled the way Hookline fills it, through the store's own writes (so every
index a page reads is there): ``--endpoints`` endpoints over ``APPS`` applications, the
``--dead-letters`` spread over them, their reasons and the last week, in transactions of
``BATCH`` entries; ``--log-events`` rows in the event log (through its script, pipelined,
and measured with MEMORY USAGE: bytes per event); a few thousand scheduled retries;
``OPEN_BREAKERS`` open breakers; audit entries and a day of per-minute stats. Then each
console page is asked for ``--requests`` times (after two requests not timed) through
werkzeug's test client against the standalone application, signed in with basic auth: the
whole WSGI answer (authorization, the service's reads, the template) but no network.
Reported: p50, p95 and the slowest answer per page, each page's verdict against
``TARGET_MS``, and the machine; and ``hookline stats``' full data (every endpoint and breaker,
not a page: timed, not held to the target). Writes ``bench/results/console.json``.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, control_redis, machine, run_bench

OUTPUT = ROOT / "bench" / "results" / "console.json"

#: Every page must answer within this, milliseconds (the console's scale target).
TARGET_MS = 300.0
#: Applications the endpoints belong to (each has endpoints / APPS of them).
APPS = 20
#: Dead letters written per transaction.
BATCH = 1000
#: Scheduled retries parked over the first endpoints.
RETRIES = 2000
#: Endpoints whose breaker is seeded open: every 40th of the first 200 (with retries) and
#: every 500th of the rest (open with nothing waiting: the overview's sample misses them).
OPEN_BREAKERS = 25
#: Audit entries written.
AUDIT_ENTRIES = 2000
#: Minutes of per-minute stats written (a day).
STATS_MINUTES = 24 * 60
#: How far back the dead letters go, seconds.
SPREAD = 7 * 86400
#: The basic-auth operator the bench signs in as.
OPERATOR = ("bench", "bench-password")
#: The event log's seeded rows: how far back, their types and statuses (as often as listed).
LOG_SPREAD = 2 * 86400
LOG_TYPES = ("order.created", "order.paid", "order.shipped", "order.refunded", "invoice.sent",
             "invoice.paid", "customer.created", "customer.updated", "subscription.renewed",
             "subscription.cancelled", "payment.failed", "payment.succeeded")
LOG_STATUSES = ("delivered",) * 18 + ("retrying", "dead")
#: The receiver's answer three dead letters in four keep (the list's last error); the fourth
#: keeps none, as one moved from the retry schedule: the list looks in its event's history.
ANSWER = '{"error": "service unavailable", "retry_after": 30, "request_id": "4f1c9a07e2"}'
#: Reasons the seeded dead letters are given, most often first.
SEEDED_REASONS = ("exhausted", "exhausted", "exhausted", "rejected", "endpoint_disabled",
                  "expired", "endpoint_gone")


@dataclass(frozen=True)
class Seeded:
    """What the pages are asked about: ids that exist in the filled Redis."""

    endpoint_id: str
    app_id: str
    event_id: str
    #: The endpoint ``event_id`` was dead-lettered at (found once, by a full search).
    event_endpoint: str
    since: float
    until: float


def seed_endpoints(count: int) -> list[str]:
    """``count`` endpoints through the registry (validated, indexed), over ``APPS``
    applications; returns their ids."""
    from hookline.store.apps import AppRegistry
    from hookline.store.endpoints import EndpointRegistry

    apps = AppRegistry()
    app_ids = [f"app-{n:02d}" for n in range(APPS)]
    for app_id in app_ids:
        apps.add(app_id, name=f"Application {app_id}")
    registry = EndpointRegistry()
    ids = [f"ep-{n:05d}" for n in range(count)]
    for n, endpoint_id in enumerate(ids):
        registry.add(endpoint_id, f"http://127.0.0.1:9/hooks/{endpoint_id}",
                     app=app_ids[n % APPS], rate="50/s" if n % 3 == 0 else None)
    return ids


def seed_dead_letters(endpoint_ids: list[str], count: int, now: float) -> None:
    """``count`` dead letters through the queue's own transactional write (entry and every
    index together), ``BATCH`` at a time, spread over the endpoints, reasons and ``SPREAD``."""
    from hookline.store.dead_letter_index import ensure_endpoint_index
    from hookline.store.dead_letter_queue import DeadLetter, DeadLetterQueue

    queue = DeadLetterQueue()
    # The queue is empty, so its per-endpoint and per-status indexes are complete: say so
    # before writing, as a queue grown by workers of this version would have.
    ensure_endpoint_index(queue.redis, queue.shards)
    chooser = random.Random(25)
    for start in range(0, count, BATCH):
        batch = []
        for n in range(start, min(start + BATCH, count)):
            at = now - SPREAD + SPREAD * n / count
            batch.append(DeadLetter(
                endpoint_id=endpoint_ids[chooser.randrange(len(endpoint_ids))],
                event_id=f"evt-{n:06d}", event_type="order.paid",
                payload={"order": n, "total": "12.50"},
                reason=SEEDED_REASONS[n % len(SEEDED_REASONS)], attempts=8,
                first_attempt_at=at - 3600, last_attempt_at=at, last_status=503,
                last_error="", last_response=ANSWER if n % 4 else "",
                dead_lettered_at=at, enqueued_at=at - 3600))
        queue._write(batch)  # the write add() makes, without its per-entry replica wait


def seed_event_log(endpoint_ids: list[str], count: int, now: float) -> dict[str, Any]:
    """``count`` rows in the event log through its own script (``log_event.lua``, what a
    held or dead delivery writes; settle.lua writes the same), pipelined ``BATCH`` at a time:
    spread over the endpoints, ``LOG_TYPES``, the statuses (``LOG_STATUSES``) and the last
    ``LOG_SPREAD``. Returns the Redis memory they take (:func:`log_memory`)."""
    from hookline.store.event_log import STATUS_LETTERS, EventLog, endpoint_prefix, log_args

    log = EventLog()
    age_ms, most = log_args()
    chooser = random.Random(34)
    start_ms = int((now - LOG_SPREAD) * 1000)
    for start in range(0, count, BATCH * 5):
        pipe = log.redis.pipeline(transaction=False)
        for n in range(start, min(start + BATCH * 5, count)):
            endpoint_id = endpoint_ids[n % len(endpoint_ids)]
            log._script(keys=[f"{endpoint_prefix(endpoint_id)}log"], client=pipe, args=[
                "row", endpoint_prefix(endpoint_id), log.inline_prefix(endpoint_id),
                endpoint_id, f"log-{n:07d}",
                STATUS_LETTERS[LOG_STATUSES[chooser.randrange(len(LOG_STATUSES))]],
                LOG_TYPES[chooser.randrange(len(LOG_TYPES))], 1 + n % 3,
                chooser.choice((200, 204, 503, 0)),
                start_ms + (LOG_SPREAD * 1000) * n // count, age_ms, most])
        pipe.execute()
    return log_memory(log.redis, log.shards)


def log_memory(client: Any, shards: Any) -> dict[str, Any]:
    """``MEMORY USAGE <key> SAMPLES 0`` (every element counted) summed over the event log's
    keys: each endpoint's ``log`` and ``log_rows``, each shard's indexes and types; per row."""
    keys = [key for shard in shards
            for key in client.scan_iter(match=f"{shard.prefix}*", count=1000)]
    endpoint_keys = [key for key in client.scan_iter(match="hookline:{*}:log*", count=5000)]
    total = 0
    for group in (keys, endpoint_keys):
        for start in range(0, len(group), BATCH):
            pipe = client.pipeline(transaction=False)
            for key in group[start:start + BATCH]:
                pipe.memory_usage(key, samples=0)
            total += sum(size or 0 for size in pipe.execute())
    pipe = client.pipeline(transaction=False)
    row_keys = [key for key in endpoint_keys if key.endswith(":log_rows")]
    for key in row_keys:
        pipe.hlen(key)
    rows = sum(pipe.execute())
    return {"rows": rows, "bytes": total, "bytes_per_event": round(total / max(rows, 1), 1)}


def seed_retries(endpoint_ids: list[str]) -> None:
    """``RETRIES`` retries parked over the first 200 endpoints, due from a minute on, each a
    real broker message (the schedule page decodes them)."""
    from hookline.store.schedule import RetrySchedule
    from hookline.transport.envelope import build_message
    from hookline.worker.celery import worker_app as celery_app

    schedule = RetrySchedule()
    for n in range(RETRIES):
        endpoint_id, event_id = endpoint_ids[n % 200], f"retry-{n:05d}"
        message = build_message(celery_app, task_name="hookline.deliver", task_id=event_id,
                                args=[endpoint_id, "order.paid", {"order": n}],
                                kwargs={"event_id": event_id}, retries=3,
                                queue="hookline.retry")
        schedule.park(endpoint_id=endpoint_id, event_id=event_id, countdown=60 + n,
                      message=message, last_status=503, last_error="503 Service Unavailable")


def seed_breakers(endpoint_ids: list[str]) -> list[str]:
    """Open the breakers of some endpoints (an hour's cooldown), as settle.lua writes them;
    returns their ids."""
    from hookline.store import connection as store
    from hookline.store import keys

    opened = [*endpoint_ids[:200:40], *endpoint_ids[200::500]][:OPEN_BREAKERS]
    now_ms = int(store.redis_time(store.client()) * 1000)
    pipe = store.client().pipeline(transaction=False)
    for endpoint_id in opened:
        pipe.hset(keys.breaker_key(endpoint_id), mapping={
            "state": "open", "failures": 5, "cooldown_ms": 3_600_000,
            "open_until": now_ms + 3_600_000, "opened_at": now_ms})
    pipe.execute()
    return opened


def seed_audit_and_stats(endpoint_ids: list[str], now: float) -> None:
    from hookline.service import audit
    from hookline.service.actor import Actor
    from hookline.store import connection as store
    from hookline.store import keys

    operator = Actor(name=OPERATOR[0], session="bench")
    for n in range(AUDIT_ENTRIES):
        audit.record(operator, "endpoint.pause", endpoint_ids[n % len(endpoint_ids)])
    client = store.client()
    pipe = client.pipeline(transaction=False)
    minute = int(now // 60)
    for back in range(STATS_MINUTES):
        key = keys.stats_key(minute - back)
        pipe.hset(key, mapping={"delivered": 900 + back % 50, "failed": 40, "dead_lettered": 2})
        pipe.expire(key, keys.STATS_TTL)
    pipe.execute()


def seed_health(endpoint_id: str, now: float) -> None:
    """A day of the timed endpoint's health: 20 attempts every minute (one in ten failed,
    latencies spread over the histogram), written as workers write it; its chart's worst
    case (every minute of the day drawn)."""
    from hookline.store import connection as store
    from hookline.store import health

    batch = health.HealthBatch()
    for minute in range(24 * 60):
        at = now - minute * 60
        for n in range(20):
            failed = n % 10 == 0
            batch.add(endpoint_id, health.SeenAttempt(
                at=at, event_id=f"evt-h-{minute}-{n}", attempt=1,
                outcome="failed" if failed else "delivered", status=500 if failed else 204,
                latency=0.005 * (1 + n) * (1 + minute % 7), error="",
                response="upstream down" if failed else ""))
    health.write(store.client(), batch)


def seed(options: argparse.Namespace) -> tuple[Seeded, dict[str, float]]:
    """Fill the Redis; returns what the pages ask about and seconds per part."""
    now = time.time()
    seconds: dict[str, float] = {}
    started = time.monotonic()
    endpoint_ids = seed_endpoints(options.endpoints)
    seconds["endpoints"] = time.monotonic() - started
    started = time.monotonic()
    seed_dead_letters(endpoint_ids, options.dead_letters, now)
    seconds["dead_letters"] = time.monotonic() - started
    started = time.monotonic()
    seed_retries(endpoint_ids)
    seed_breakers(endpoint_ids)
    seed_audit_and_stats(endpoint_ids, now)
    seconds["retries_audit_stats"] = time.monotonic() - started
    started = time.monotonic()
    options.log_memory = seed_event_log(endpoint_ids, options.log_events, now)
    seconds["event_log"] = time.monotonic() - started
    from hookline.store.dead_letter_queue import DeadLetterQueue
    from hookline.store.events import EventView

    middle = options.dead_letters // 2
    letter = DeadLetterQueue().find(limit=1)[0]
    event_id = f"evt-{middle:06d}"
    seeded = Seeded(endpoint_id=letter.endpoint_id, app_id="app-07", event_id=event_id,
                    event_endpoint=EventView().endpoints_of(event_id)[0],
                    since=now - 2 * 86400, until=now - 86400)
    started = time.monotonic()
    seed_health(seeded.endpoint_id, now)
    seconds["endpoint_health"] = time.monotonic() - started
    return seeded, {part: round(value, 1) for part, value in seconds.items()}


def page_urls(console: Any, seeded: Seeded) -> dict[str, str]:
    """The pages timed, by name: each list unfiltered and filtered, one of each detail page.
    URLs are built from the console's own routes, so a renamed path is followed."""
    adapter = console.url_map.bind("localhost")
    built: dict[str, str] = {}

    def add(name: str, page: str, query: dict[str, Any] | None = None, **values: Any) -> None:
        try:
            url = adapter.build(page, values, force_external=False)
        except Exception as exc:  # a page the console does not have (yet): said, not timed
            built[name] = f"!{type(exc).__name__}: {page}"
            return
        if query:
            url += "?" + "&".join(f"{key}={value}" for key, value in query.items())
        built[name] = url

    add("overview", "overview.overview")
    add("overview figures (its refresh)", "overview.overview_fragment")
    add("applications", "endpoints.app_list")
    add("endpoints", "endpoints.endpoint_list")
    add("endpoints of an application", "endpoints.endpoint_list", {"app": seeded.app_id})
    add("endpoints by search", "endpoints.endpoint_list", {"search": "ep-0999"})
    add("endpoint health", "endpoints.endpoint_show", endpoint_id=seeded.endpoint_id)
    add("event search", "events.event_search", {"event_id": seeded.event_id})
    add("event at its endpoint", "events.event_search",
        {"event_id": seeded.event_id, "endpoint": seeded.event_endpoint})
    add("dead letters", "dead_letters.letter_list")
    add("dead letters of an endpoint", "dead_letters.letter_list",
        {"endpoint": seeded.endpoint_id})
    add("dead letters by reason and time", "dead_letters.letter_list",
        {"reason": "rejected", "since": int(seeded.since), "until": int(seeded.until)})
    add("dead letters by status", "dead_letters.letter_list", {"status": 503})
    add("dead letters, oldest first", "dead_letters.letter_list", {"order": "oldest"})
    add("purge dry run", "dead_letters.purge_confirm", {"reason": "expired"})
    add("purge dry run by status", "dead_letters.purge_confirm", {"status": 503})
    add("bulk replay dry run", "dead_letters.bulk_confirm", {"reason": "expired"})
    add("bulk replay dry run by status", "dead_letters.bulk_confirm", {"status": 503})
    add("bulk replay dry run by status and reason", "dead_letters.bulk_confirm",
        {"status": 503, "reason": "expired"})
    window = {"since": _iso(seeded.until - 3600), "until": _iso(seeded.until)}
    add("event log", "events.event_search")
    add("event log of an endpoint", "events.event_search", {"endpoint": seeded.endpoint_id})
    add("event log by status (dead)", "events.event_search", {"status": "dead"})
    add("event log by status (retrying)", "events.event_search", {"status": "retrying"})
    add("event log by type prefix", "events.event_search", {"type": "invoice."})
    add("event log by time window (an hour, a day ago)", "events.event_search", window)
    add("event log, all filters", "events.event_search",
        {"type": "order.", "status": "dead", **window})
    add("retry schedule", "overview.schedule")
    add("stats", "overview.stats")
    add("audit log", "overview.audit_log")
    return built


def _iso(seconds: float) -> str:
    from hookline.core.times import format_time_param

    return format_time_param(round(seconds)).replace("+00:00", "Z")


def timed(get: Callable[[str], Any], url: str, requests: int) -> dict[str, Any]:
    """``requests`` answers to ``url`` after two untimed ones: p50, p95, max (ms), status."""
    for _ in range(2):
        response = get(url)
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        response = get(url)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    answer = {"url": url, "status": response.status_code, "bytes": len(response.data),
            "p50_ms": round(statistics.median(samples), 1), "p95_ms": round(p95, 1),
            "max_ms": round(samples[-1], 1), "within_target": p95 <= TARGET_MS}
    if b'id="event-report"' in response.data:  # an event page: did its search finish?
        answer["search_complete"] = b'id="event-search-incomplete"' not in response.data
        answer["found"] = b'data-found="true"' in response.data
    return answer


def time_pages(app: Any, urls: dict[str, str], requests: int) -> dict[str, Any]:
    """Each page of ``urls`` timed (:func:`timed`) through ``app``, in one signed-in session."""
    from werkzeug.test import Client

    client = Client(app)
    authorization = "Basic " + base64.b64encode(":".join(OPERATOR).encode()).decode()
    # One browser's session: the cookie the first answer sets is sent with every later one.
    client.get("/", headers={"Authorization": authorization})

    def get(url: str) -> Any:
        return client.get(url, headers={"Authorization": authorization})

    pages: dict[str, Any] = {}
    for name, url in urls.items():
        if url.startswith("!"):
            pages[name] = {"missing": url[1:]}
            continue
        pages[name] = timed(get, url, requests)
    return pages


def time_cli_stats(requests: int) -> dict[str, Any]:
    """``hookline stats``' data (``stats_report``: every endpoint and, pipelined, every
    breaker): not a page, so not held to the target, but timed at the same scale."""
    from hookline.cli.stats import stats_report

    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        report, _rows = stats_report()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 1), "max_ms": round(samples[-1], 1),
            "endpoints": report["endpoints"]["total"], "breakers_listed": len(report["breakers"])}


def standalone() -> Any:
    """The standalone console (what ``hookline console`` serves), the bench's operator its
    only user."""
    from hookline.console.standalone import standalone_app

    return standalone_app({"HOOKLINE_CONSOLE_BASIC_AUTH": ":".join(OPERATOR)})


def run(options: argparse.Namespace) -> dict[str, Any]:
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hl-console-")))
        _control, client = control_redis(stack, workdir)
        seeded, seed_seconds = seed(options)
        app = standalone()
        # The session-cookie middleware wraps the console, whose routes build the URLs.
        urls = page_urls(getattr(app, "app", app), seeded)
        pages = time_pages(app, urls, options.requests)
        cli_stats = time_cli_stats(max(3, options.requests // 10))
        memory = client.info("memory")["used_memory_human"]
        timed_pages = [page for page in pages.values() if "p95_ms" in page]
        return {"machine": machine(client), "target_ms": TARGET_MS,
                "endpoints": options.endpoints, "dead_letters": options.dead_letters,
                "retries": RETRIES, "audit_entries": AUDIT_ENTRIES,
                "requests_per_page": options.requests, "seed_seconds": seed_seconds,
                "redis_memory": memory, "open_breakers": OPEN_BREAKERS, "pages": pages,
                "log_events": options.log_events, "event_log_memory": options.log_memory,
                "cli_stats": cli_stats,
                "all_within_target": bool(timed_pages) and all(
                    page["within_target"] and page["status"] == 200 for page in timed_pages)}


def report(result: dict[str, Any]) -> str:
    lines = [f"{result['endpoints']:,} endpoints, {result['dead_letters']:,} dead letters "
             f"(seeded in {sum(result['seed_seconds'].values()):.0f} s, Redis "
             f"{result['redis_memory']}); {result['requests_per_page']} requests a page; "
             f"target p95 <= {result['target_ms']:.0f} ms",
             "| page | status | p50 ms | p95 ms | max ms | verdict |", "|---|---|---|---|---|---|"]
    for name, page in result["pages"].items():
        if "missing" in page:
            lines.append(f"| {name} | - | - | - | - | no such page ({page['missing']}) |")
            continue
        verdict = "ok" if page["within_target"] and page["status"] == 200 else "OVER"
        lines.append(f"| {name} | {page['status']} | {page['p50_ms']} | {page['p95_ms']} | "
                     f"{page['max_ms']} | {verdict} |")
    memory = result["event_log_memory"]
    lines.append(f"event log: {memory['rows']:,} rows, {memory['bytes']:,} bytes "
                 f"(MEMORY USAGE ... SAMPLES 0 over its keys): "
                 f"{memory['bytes_per_event']} bytes per event")
    lines.append("all pages within target" if result["all_within_target"]
                 else "NOT all pages within target")
    cli = result["cli_stats"]
    lines.append(f"hookline stats (every endpoint and breaker): p50 {cli['p50_ms']} ms, "
                 f"max {cli['max_ms']} ms, {cli['breakers_listed']} breakers listed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, help="endpoints (10000; --quick 1000)")
    parser.add_argument("--dead-letters", type=int, help="dead letters (100000; --quick 10000)")
    parser.add_argument("--log-events", type=int,
                        help="rows in the event log (1000000; --quick 100000)")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    options = parser.parse_args(argv)
    options.endpoints = options.endpoints or (1000 if options.quick else 10_000)
    options.dead_letters = options.dead_letters or (10_000 if options.quick else 100_000)
    options.log_events = options.log_events or (100_000 if options.quick else 1_000_000)
    return run_bench(run, options, report)


if __name__ == "__main__":
    raise SystemExit(main())
