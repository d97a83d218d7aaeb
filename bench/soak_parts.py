"""The soak's parts (bench/soak.py): its endpoints and load, its receivers, its workers and the
faults it injures them with, in rotation."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import redis

from bench.chaos_procs import ROOT, WorkerFleet, clean_env, stop_process
from bench.soak_report import Fault

if TYPE_CHECKING:
    from bench.soak import Options

#: The endpoints, by kind: (kind, how many, the receiver's path kind, endpoint options).
#: 50 in all; the ``down`` ones sit behind the receiver that the soak takes down.
KINDS: list[tuple[str, int, str, dict[str, Any]]] = [
    ("fast", 20, "fast", {}),
    ("slow", 8, "slow", {}),
    ("flaky", 8, "flaky", {}),
    # Their retries end within the drain: an open breaker holds them until their max age.
    ("failing", 2, "fail", {"retry_policy": {"max_age": 30, "max_attempts": 4}}),
    ("rejecting", 1, "reject", {}),
    ("ordered", 4, "fast", {"ordered": True}),
    ("capped", 3, "fast", {"max_in_flight": 2}),
    ("down", 4, "fast", {}),
]
#: Kinds whose deliveries count toward throughput after a fault: they should all go.
HEALTHY = frozenset({"fast", "slow", "flaky", "ordered", "capped"})
#: Ordering keys per ordered endpoint.
ORDERING_KEYS = 10


class Receivers:
    """``main`` serves every endpoint but the ``down`` ones, which ``down`` serves; ``down``
    can be stopped and started again on its port."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        for name in ("main", "down"):
            self.start(name)

    def start(self, name: str) -> None:
        from bench.chaos_procs import free_port

        port = self.ports.setdefault(name, free_port())
        record = self.workdir / f"receiver-{name}.jsonl"
        record.touch()
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.soak_receiver", "--port", str(port), "--record",
             str(record)], cwd=ROOT, env=clean_env({"PYTHONUNBUFFERED": "1"}),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        assert process.stdout is not None
        if not process.stdout.readline():
            raise RuntimeError(f"receiver {name} did not start")
        self.processes[name] = process

    def url(self, name: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}{path}"

    def take_down(self, name: str) -> None:
        stop_process(self.processes[name], signal.SIGKILL, 5.0)

    def records(self) -> dict[str, list[dict[str, Any]]]:
        import json

        return {name: [json.loads(line) for line in
                       (self.workdir / f"receiver-{name}.jsonl").read_text().splitlines()
                       if line.strip()] for name in self.processes}

    def outcomes(self, client: redis.Redis, pairs: list[tuple[str, str]]) -> dict[str, str]:
        """Of ``(event, endpoint)`` pairs, the final ones: ``delivered`` (marked done) or
        ``dead:<reason>`` (a dead letter)."""
        from hookline.store import delivery
        from hookline.store.dead_letter_queue import DeadLetterQueue

        done = delivery.delivered(client, [(endpoint, event) for event, endpoint in pairs])
        found = {event: "delivered" for (event, _), ok in zip(pairs, done, strict=True) if ok}
        rest = [(event, endpoint) for event, endpoint in pairs if event not in found]
        letters = DeadLetterQueue(client).get_many(f"{endpoint}/{event}"
                                                   for event, endpoint in rest)
        for event, endpoint in rest:
            letter = letters.get(f"{endpoint}/{event}")
            if letter is not None:
                found[event] = f"dead:{letter.reason}"
        return found

    def stop(self) -> None:
        for process in self.processes.values():
            stop_process(process, signal.SIGTERM, 5.0)
            if process.stdout is not None:
                process.stdout.close()


@dataclass
class Plan:
    """The endpoints (id -> kind), in the order events go round them."""

    kinds: dict[str, str]
    order: list[str]

    @property
    def count(self) -> int:
        return len(self.order)

    @property
    def healthy(self) -> set[str]:
        return {e for e, kind in self.kinds.items() if kind in HEALTHY}

    @property
    def healthy_share(self) -> float:
        return len(self.healthy) / self.count

    def endpoint_for(self, n: int) -> str:
        return self.order[n % self.count]

    def enqueue(self, client: redis.Redis, pairs: list[tuple[str, str]]) -> None:
        """Push the deliveries ``(event, endpoint)`` onto the delivery queue, one pipeline, a
        doorbell token per message (as a publish does)."""
        from hookline.store.connection import ring
        from hookline.store.replication import wait_for_replicas
        from hookline.transport.envelope import build_message
        from hookline.worker.celery import worker_app

        pipe = client.pipeline(transaction=False)
        now = time.time()
        for event_id, endpoint_id in pairs:
            kwargs: dict[str, Any] = {"event_id": event_id, "enqueued_at": now}
            if self.kinds[endpoint_id] == "ordered":
                kwargs["ordering_key"] = f"k{int(event_id.rsplit('-', 1)[1]) % ORDERING_KEYS}"
            pipe.lpush("hookline", build_message(
                worker_app, task_name="hookline.deliver", task_id=event_id,
                args=[endpoint_id, "soak.event", {"id": event_id}], kwargs=kwargs,
                retries=0, queue="hookline"))
        ring(pipe, "hookline", len(pairs))
        pipe.execute()
        # As a publish does: not let go of before the replicas have it (behind Sentinel, a
        # failover loses what only the demoted master took). Too few: ReplicasBehind, a
        # ConnectionError, and the soak pushes the batch again (the same event ids).
        wait_for_replicas(client)


def endpoint_plan(client: redis.Redis, receivers: Receivers) -> Plan:
    from hookline.store.endpoints import EndpointRegistry

    registry = EndpointRegistry(client)
    kinds: dict[str, str] = {}
    for kind, count, path, options in KINDS:
        for n in range(count):
            endpoint_id = f"{kind}-{n:02d}"
            server = "down" if kind == "down" else "main"
            registry.add(endpoint_id, receivers.url(server, f"/{path}/{endpoint_id}"), **options)
            kinds[endpoint_id] = kind
    # Round-robin over the endpoints, kinds interleaved.
    order = sorted(kinds, key=lambda e: (int(e.rsplit("-", 1)[1]), e))
    return Plan(kinds, order)


@dataclass
class Action:
    at: float
    run: Callable[[], None]


@dataclass
class Schedule:
    """Timed actions (a fault's start and end) and the faults they made."""

    actions: list[Action] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)

    def pending(self) -> bool:
        return bool(self.actions)

    def run_due(self, now: float) -> None:
        while self.actions and self.actions[0].at <= now:
            self.actions.pop(0).run()

    def add(self, at: float, run: Callable[[], None]) -> None:
        self.actions.append(Action(at, run))
        self.actions.sort(key=lambda a: a.at)


#: The rotation, and each fault's length in a full run and in ``--quick``.
#: The faults, in turn: (kind, seconds, seconds in the quick run).
ROTATION = [("redis_restart", 5.0, 3.0), ("redis_pause", 20.0, 10.0), ("sigkill", 0.0, 0.0),
            ("worker_pause", 36.0, 15.0), ("receiver_down", 60.0, 20.0)]
#: Joins the rotation when the soak's Redis sits behind Sentinel (``--sentinel``).
FAILOVER = ("sentinel_failover", 0.0, 0.0)
#: Every kind of fault, for ``--faults``.
FAULT_KINDS = tuple(kind for kind, _, _ in [*ROTATION, FAILOVER])


class SoakRedis(Protocol):
    """The soak's Redis: ``bench.chaos_procs.AofRedis``, or ``bench.soak_servers.SentinelRedis``
    (which adds ``failover``)."""

    url: str

    def start(self) -> None: ...
    def shutdown(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def env(self) -> dict[str, str]: ...
    def client(self) -> redis.Redis: ...
    def quick_client(self) -> redis.Redis: ...
    def stop(self) -> None: ...


def rotation(server: SoakRedis, only: tuple[str, ...] = ()) -> list[tuple[str, float, float]]:
    """The faults in their order; only the kinds in ``only`` where it names any (``--faults``)."""
    faults = [*ROTATION, FAILOVER] if hasattr(server, "failover") else ROTATION
    return [fault for fault in faults if not only or fault[0] in only]


@dataclass
class Fleet:
    """The workers, and the faults done to them and their surroundings."""

    workers: WorkerFleet

    def start(self, count: int) -> None:
        started = [self.workers.start() for _ in range(count)]
        for worker in started:
            self.workers.wait_ready(worker)

    def running_pids(self) -> dict[str, int]:
        return {w.name: w.process.pid for w in self.workers.running()}

    def replace_exited(self) -> None:
        self.workers.reap()
        for worker in self.workers.unexpected_exits():
            worker.state = f"exited by itself ({worker.process.returncode})"
            self.workers.start()
            print(f"soak: worker {worker.name} exited by itself; replaced", flush=True)

    def stop_all(self) -> None:
        self.workers.stop_all()

    def schedule(self, server: SoakRedis, receivers: Receivers, started: float,
                 options: Options) -> Schedule:
        plan = Schedule()
        at = started + options.first_fault
        end = started + options.minutes * 60
        n = 0
        faults = rotation(server, options.faults)
        while at < end - 10 and (not options.quick or n < len(faults)):
            kind, full, quick = faults[n % len(faults)]
            self._plan(plan, kind, at, quick if options.quick else full, server, receivers)
            at += options.fault_every
            n += 1
        return plan

    def _plan(self, plan: Schedule, kind: str, at: float, length: float, server: SoakRedis,
              receivers: Receivers) -> None:
        fault = Fault(kind, at, at)

        def begin() -> None:
            fault.at = time.time()
            fault.target = self._begin(kind, server, receivers)
            print(f"soak: {kind} {fault.target}", flush=True)
            if length == 0:
                fault.until = fault.at
                plan.faults.append(fault)

        def end() -> None:
            self._end(kind, fault.target, server, receivers)
            fault.until = time.time()
            plan.faults.append(fault)
            print(f"soak: {kind} over after {fault.until - fault.at:.1f}s", flush=True)

        plan.add(at, begin)
        if length > 0:
            plan.add(at + length, end)

    def _begin(self, kind: str, server: SoakRedis, receivers: Receivers) -> str:
        if kind == "redis_restart":
            server.shutdown()
            return "shut down"
        if kind == "redis_pause":
            server.pause()
            return "SIGSTOP"
        if kind == "sentinel_failover":
            return server.failover()  # type: ignore[attr-defined]
        if kind == "receiver_down":
            receivers.take_down("down")
            return "4 endpoints' receiver"
        victim = self.workers.victim()
        if kind == "sigkill":
            self.workers.signal(victim, signal.SIGKILL)
            replacement = self.workers.start()
            return f"{victim.name}->{replacement.name}"
        victim.process.send_signal(signal.SIGSTOP)  # worker_pause
        return victim.name

    def _end(self, kind: str, target: str, server: SoakRedis, receivers: Receivers) -> None:
        if kind == "redis_restart":
            server.start()
        elif kind == "redis_pause":
            server.resume()
        elif kind == "receiver_down":
            receivers.start("down")
        elif kind == "worker_pause":
            worker = next(w for w in self.workers.workers if w.name == target)
            worker.process.send_signal(signal.SIGCONT)


def where_held(client: redis.Redis, event_ids: list[str], *, batch: int = 500
               ) -> dict[str, list[str]]:
    """For each of ``event_ids`` (a sample of the unsettled), the Redis keys whose contents
    name it: the queue, an unacked record, the schedule, a fair share's waiting list, a held
    park, a delivery record... (the soak's own diagnosis when an event never settles; it
    reads every key, pipelined, so only at the end of a run)."""
    found: dict[str, list[str]] = {event_id: [] for event_id in event_ids}
    readers = {"list": lambda p, k: p.lrange(k, 0, -1), "zset": lambda p, k: p.zrange(k, 0, -1),
               "set": lambda p, k: p.smembers(k), "hash": lambda p, k: p.hgetall(k),
               "string": lambda p, k: p.get(k)}
    found["(keys read)"] = []
    read = 0
    keys = list(client.scan_iter(count=1000))
    for start in range(0, len(keys), batch):
        chunk = keys[start:start + batch]
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.type(key)
        kinds = pipe.execute()
        pipe = client.pipeline(transaction=False)
        readable = [(key, kind) for key, kind in zip(chunk, kinds, strict=True)
                    if kind in readers]
        for key, kind in readable:
            readers[kind](pipe, key)
        for (key, kind), value in zip(readable, pipe.execute(), strict=True):
            text = str(value)
            read += 1
            for event_id in event_ids:
                if event_id in text or event_id in key:
                    found[event_id].append(f"{kind} {key}")
    found["(keys read)"] = [str(read)]
    return found
