"""The chaos run's settings: command line, worker environment and fault timelines."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "chaos.json"
BATCH_INTERVAL = 0.5
STEADY, FLAPPING = "steady", "flapping"
#: The worker settings the brief fixes: a killed worker's messages return within ~22 s.
WORKER_SETTINGS = {
    "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
    "CELERY_VISIBILITY_TIMEOUT": "20",
    "HOOKLINE_READ_TIMEOUT": "1",
    "HOOKLINE_CONNECT_TIMEOUT": "1",
    "HOOKLINE_INITIAL_BACKOFF": "0.5",
    "HOOKLINE_MAX_BACKOFF": "4",
    "HOOKLINE_MAX_ATTEMPTS": "50",
    "HOOKLINE_MAX_AGE": "600",
    "HOOKLINE_BREAKER_COOLDOWN": "2",
    "HOOKLINE_BREAKER_MAX_COOLDOWN": "5",
    "HOOKLINE_METRICS_PORT": "0",  # several workers on one host, and colleagues' too
}
#: Fault timelines, as fractions of the load's duration.
FULL_PLAN = [(0.12, "sigkill"), (0.25, "scale"), (0.40, "sigkill"), (0.55, "redis_restart"),
             (0.70, "sigterm"), (0.82, "sigkill"), (0.95, "sigkill")]
QUICK_PLAN = [(0.2, "sigkill"), (0.4, "scale"), (0.6, "redis_restart")]


@dataclass
class Options:
    events: int
    duration: float
    plan: list[tuple[float, str]]
    rate: str
    redis_down: float
    timeout: float
    workdir: Path
    results: Path


def parse_options(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description="Fault run under steady load (make chaos).")
    parser.add_argument("--events", type=int, help="events to send (3000; --quick 600)")
    parser.add_argument("--quick", action="store_true",
                        help="CI size: 600 events, one SIGKILL, scale-out, one Redis restart")
    parser.add_argument("--duration", type=float,
                        help="seconds over which the events are enqueued (45; --quick 10)")
    parser.add_argument("--rate", default="50/s", help="the steady endpoint's rate limit")
    parser.add_argument("--redis-down", type=float, default=2.0,
                        help="seconds Redis stays down at the restart (2)")
    parser.add_argument("--timeout", type=float,
                        help="seconds to wait for every event to be final after the load "
                             "(300; --quick 90)")
    parser.add_argument("--workdir", type=Path, help="logs, records, AOF (default: a new "
                                                     "directory under the system temp dir)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="hookline-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    return Options(
        events=args.events or (600 if args.quick else 3000),
        duration=args.duration or (10.0 if args.quick else 45.0),
        plan=QUICK_PLAN if args.quick else FULL_PLAN, rate=args.rate,
        redis_down=args.redis_down, timeout=args.timeout or (90.0 if args.quick else 300.0),
        workdir=workdir, results=args.results)
