"""Fault run under steady load: does Hookline lose anything when things go wrong?

    python -m bench.chaos [--events N] [--quick]              (or: make chaos)

One run starts a private ``redis-server`` (AOF on, fsync every second), two receivers in
processes of their own that record every request by ``webhook-id`` (``examples.receiver``
answering 204 on ``/ok`` behind an endpoint limited to ``--rate``; ``bench.chaos_receiver``
flapping between 200, 503 and answers slower than the read timeout), and ``celery -A app
worker -P threads -c 16`` subprocesses. It enqueues N events (two thirds to the rate-limited
endpoint) in batches every 0.5 s while it injures the fleet on a fixed timeline: SIGKILL of a
worker (a replacement starts at once), a scale-out from one worker to three, a Redis restart
(shutdown, a few seconds down, start on the same port and directory), a SIGTERM. ``--quick``
(600 events, CI): one SIGKILL, the scale-out and one Redis restart.

Then it waits until every event is final and checks (bench/chaos_check.py): every event
delivered (done marker) or dead-lettered with a reason, none lost (held nowhere) and none
still pending at the timeout; each event received twice with a 2xx explained by a SIGKILL,
the Redis restart or a worker crash just after its first copy; no 1 s window at the
rate-limited receiver over rate + burst, unless Hookline's attempt history shows those
requests left the workers over a second or more (bench/chaos_rate.py). Prints a table, writes
``bench/results/chaos.json``; exit status 0 only if all hold. Everything it starts is stopped
on the way out, Ctrl-C and SIGTERM included (exit status 130 / 143).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

import redis

from bench.chaos_options import (
    BATCH_INTERVAL,
    FLAPPING,
    STEADY,
    WORKER_SETTINGS,
    Options,
    parse_options,
)
from bench.chaos_procs import AofRedis, ReceiverProcess, WorkerFleet, clean_env


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


class Chaos:
    """One run: the processes, the load, the faults, the wait and the verdict."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.redis = AofRedis(options.workdir)
        self.receivers: dict[str, ReceiverProcess] = {}
        self.fleet: WorkerFleet | None = None
        self.faults: list[Any] = []
        self.events: dict[str, str] = {}
        #: Dead letters found spooled on disk at the end (Redis was down when they were made).
        self.spooled = 0
        self.spool_path = options.workdir / "dlq-spool.jsonl"
        self.redelivery = {"oldest_unacked_seconds": 0.0, "restore_mutex_held_seconds": 0.0}
        self._mutex = ("", 0.0)
        self._sampled = 0.0

    def run(self) -> dict[str, Any]:
        options = self.options
        self.redis.start()
        env = clean_env({**WORKER_SETTINGS, "REDIS_URL": self.redis.url, "PYTHONUNBUFFERED": "1",
                         "HOOKLINE_DLQ_SPOOL": str(self.spool_path)})
        # ``app`` reads its settings once per process: set them before the first import.
        for key in [k for k in os.environ if k not in env]:
            del os.environ[key]
        os.environ.update(env)
        from bench import chaos_check
        from hookline.store.connection import ring
        from hookline.store.endpoints import EndpointRegistry
        from hookline.transport.envelope import build_message
        from hookline.worker.celery import worker_app

        self.receivers[STEADY] = ReceiverProcess("examples.receiver",
                                                 options.workdir / "steady.jsonl")
        self.receivers[FLAPPING] = ReceiverProcess("bench.chaos_receiver",
                                                   options.workdir / "flapping.jsonl")
        client = self.redis.client()
        registry = EndpointRegistry(client)
        steady = registry.add(STEADY, self.receivers[STEADY].url("/ok"), rate=options.rate)
        registry.add(FLAPPING, self.receivers[FLAPPING].url("/flap"))
        self.fleet = WorkerFleet(env, options.workdir)
        self.fleet.wait_ready(self.fleet.start())

        batches = max(1, math.ceil(options.duration / BATCH_INTERVAL))
        size = math.ceil(options.events / batches)
        ids = [f"chaos-{n:05d}" for n in range(options.events)]
        self.events = {e: FLAPPING if n % 3 == 2 else STEADY for n, e in enumerate(ids)}
        plan = sorted((fraction * options.duration, kind) for fraction, kind in options.plan)
        started = time.time()
        print(f"chaos: {options.events} events over {options.duration:.0f}s, workdir "
              f"{options.workdir}", flush=True)
        sent = 0
        while sent < len(ids) or plan:
            now = time.time() - started
            if plan and now >= plan[0][0]:
                self.inject(plan.pop(0)[1])
            elif sent < len(ids) and now >= (sent // size) * BATCH_INTERVAL:
                pipe = client.pipeline(transaction=False)
                for event_id in ids[sent:sent + size]:
                    pipe.lpush("hookline", build_message(
                        worker_app, task_name="hookline.deliver", task_id=event_id,
                        args=[self.events[event_id], "order.created", {"id": event_id}],
                        kwargs={"event_id": event_id}, retries=0, queue="hookline"))
                ring(pipe, "hookline", len(ids[sent:sent + size]))  # a token per message
                pipe.execute()
                sent += len(ids[sent:sent + size])
            else:
                self.watch(client)
                time.sleep(0.02)
        loaded = time.time() - started
        print(f"chaos: load and faults done at +{loaded:.1f}s; waiting for every event to be "
              f"final (up to {options.timeout:.0f}s)", flush=True)
        self.wait_final(client, started)
        duration = time.time() - started
        self.fleet.stop_all()
        self.restore_spool(client)
        logs = {w.name: w.log_path for w in self.fleet.workers}
        records = {name: chaos_check.read_records(r.record)
                   for name, r in self.receivers.items()}
        summary = chaos_check.analyse(
            client, self.events, records, self.faults, logs, rate_endpoint=STEADY,
            rate=options.rate, burst=steady.effective_burst(), started=started)
        summary.update(duration=round(duration, 1), load_seconds=round(loaded, 1),
                       workdir=str(options.workdir), spool_restored=self.spooled,
                       redelivery=self.redelivery,
                       workers=[{"name": w.name, "state": w.state,
                                 "started": round(w.started_at - started, 1),
                                 "ended": None if w.ended_at is None
                                 else round(w.ended_at - started, 1)}
                                for w in self.fleet.workers])
        return summary

    def wait_final(self, client: Any, started: float) -> None:
        """Until every event is delivered or dead-lettered (in Redis or the spool file), the
        timeout passes, or the only events left are held nowhere (not scheduled, queued nor
        unacknowledged) three looks in a row: those are lost, waiting longer cannot help."""
        from bench import chaos_check

        deadline = time.monotonic() + self.options.timeout
        last_print = last_look = 0.0
        strikes = 0
        while time.monotonic() < deadline:
            done, dead = chaos_check.final_states(client, self.events)
            remaining = set(self.events) - done - dead - chaos_check.spooled_ids(self.spool_path)
            if not remaining:
                return
            if time.monotonic() - last_print >= 10:
                print(f"chaos: +{time.time() - started:.0f}s {len(remaining)} not final yet",
                      flush=True)
                last_print = time.monotonic()
            if len(remaining) <= 50 and time.monotonic() - last_look >= 5:
                last_look = time.monotonic()
                nowhere = chaos_check.untraceable(client, self.events, remaining)
                strikes = strikes + 1 if nowhere == remaining else 0
                if strikes >= 3:
                    print(f"chaos: {sorted(remaining)} held nowhere: lost", flush=True)
                    return
            self.watch(client)
            time.sleep(1.0)

    def inject(self, kind: str) -> None:
        from bench.chaos_check import Fault

        assert self.fleet is not None
        at = time.time()
        if kind in ("sigkill", "sigterm"):
            victim = self.fleet.victim()
            self.fleet.signal(victim, signal.SIGKILL if kind == "sigkill" else signal.SIGTERM)
            replacement = self.fleet.start()
            self.faults.append(Fault(kind, at, f"{victim.name}->{replacement.name}"))
        elif kind == "scale":
            running = len(self.fleet.running())
            added = [self.fleet.start().name for _ in range(max(0, 3 - running))]
            self.faults.append(Fault(kind, at, f"{running}->3 (+{', '.join(added)})"))
        elif kind == "redis_restart":
            self.redis.shutdown()
            time.sleep(self.options.redis_down)
            self.redis.start()
            self.faults.append(Fault(kind, at, f"down {time.time() - at:.1f}s", time.time()))
        print(f"chaos: {self.faults[-1].kind} {self.faults[-1].target}", flush=True)

    def watch(self, client: Any) -> None:
        """Replace workers that died without being told to, and note it (a finding too);
        every 2 s, note how old the oldest unacknowledged message is and how long one token
        has held kombu's restore mutex (killed workers' messages come back only through it)."""
        from bench.chaos_check import Fault, redelivery_sample

        assert self.fleet is not None
        if time.monotonic() - self._sampled >= 2.0:
            self._sampled = time.monotonic()
            try:
                age, token = redelivery_sample(client)
            except redis.RedisError:  # Redis restarting: sample next time
                age, token = 0.0, self._mutex[0]
            if token != self._mutex[0]:
                self._mutex = (token, time.monotonic())
            held = time.monotonic() - self._mutex[1] if token else 0.0
            self.redelivery["oldest_unacked_seconds"] = round(
                max(self.redelivery["oldest_unacked_seconds"], age), 1)
            self.redelivery["restore_mutex_held_seconds"] = round(
                max(self.redelivery["restore_mutex_held_seconds"], held), 1)
        self.fleet.reap()
        for worker in self.fleet.unexpected_exits():
            worker.state = f"exited by itself ({worker.process.returncode})"
            replacement = self.fleet.start()  # as a container's restart policy would
            self.faults.append(Fault("worker_exit", worker.ended_at or time.time(),
                                     f"{worker.name}->{replacement.name}"))
            print(f"chaos: worker {worker.name} exited by itself "
                  f"({worker.process.returncode}), {replacement.name} started; see "
                  f"{worker.log_path}", flush=True)

    def restore_spool(self, client: Any) -> None:
        """Dead letters spooled to disk while Redis was down go into Redis, as an operator's
        ``hookline dlq restore-spool`` would do (workers do it on their next dead letter)."""
        from hookline.store.dead_letter_queue import DeadLetterQueue, restore_spool

        self.spooled = restore_spool(DeadLetterQueue(client), str(self.spool_path))

    def stop(self) -> None:
        if self.fleet is not None:
            self.fleet.stop_all()
        for receiver in self.receivers.values():
            receiver.stop()
        self.redis.stop()


def main(argv: list[str] | None = None) -> int:
    options = parse_options(argv)
    signal.signal(signal.SIGTERM, _terminate)
    chaos = Chaos(options)
    try:
        summary = chaos.run()
    except KeyboardInterrupt:
        print("chaos: interrupted; stopping everything it started", flush=True)
        return 130
    finally:
        chaos.stop()
    from bench import chaos_check

    print()
    print(chaos_check.table(summary))
    options.results.parent.mkdir(parents=True, exist_ok=True)
    options.results.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwritten to {options.results}; logs and records in {options.workdir}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
