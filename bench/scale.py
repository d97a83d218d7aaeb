"""What each way past one Redis costs each server, per delivery: the numbers behind the README's
scaling guide.

    python -m bench.scale [--events N] [--output PATH]    (part of ``make bench``)

N events (``hookline.deliver.delay``) published at once, round-robin over 20 endpoints (one
loopback receiver answering 204, a rate limit far above the load, every gate on), one worker
``-P threads -c 32``, after a warm-up batch; in turn, each on servers of its own:

a. ``one-redis``: broker and state on one private Redis (the default set-up);
b. ``redis-broker-apart``: ``HOOKLINE_BROKER_URL`` on a second private Redis;
c. ``rabbitmq``: ``HOOKLINE_BROKER_URL=pyamqp://`` on a throwaway vhost of the machine's RabbitMQ
   (deleted afterwards), state on a private Redis; skipped, saying why, without RabbitMQ;
d. ``cluster``: ``REDIS_URL=redis+cluster://`` naming a 3-master Redis Cluster started from
   ``redis-server``, the broker on a private Redis;
e. ``naive``: the naive Celery task (``bench/naive.py``) on its own private Redis, for the ratio.

Per delivery and per Redis involved (``redis_cost.Meter``): commands (``INFO commandstats``,
those Lua scripts run included), round trips (socket reads served), Redis CPU (``used_cpu_user
+ used_cpu_sys``), and the deliveries/s one core of that Redis could carry (1000 / CPU ms);
per set-up, deliveries/s measured (publish start to last receipt). On the cluster: each master,
their sum and the spread (busiest over idlest master). With RabbitMQ, the node's own CPU
(``beam.smp``, the whole node: anything else using it is counted too) is reported beside.

Prints a markdown table and writes ``bench/results/scale.json``. Everything it starts is
stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil
import redis
from redis.crc import key_slot

from bench.common import (
    AMQP_HOST,
    AMQP_PORT,
    FastReceiver,
    LocalCluster,
    RedisServer,
    Worker,
    bench_environment,
    machine,
    private_redis,
    rabbitmq_unavailable,
    rabbitmqctl,
    run_bench,
)
from bench.redis_cost import Meter
from hookline.transport.records import held_count

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
ENDPOINTS = 20
CONCURRENCY = 32
SETUPS = ("one-redis", "redis-broker-apart", "rabbitmq", "cluster", "naive")
#: Seconds after the last receipt on RabbitMQ (no queue length to poll cheaply: rabbitmqctl
#: boots an Erlang VM) for the last acks and task events.
AMQP_SETTLE = 1.0
#: Blocking commands an idle consumer or releaser sits in.
BLOCKING = {"brpop", "blpop", "blmpop", "xread"}
#: The table's row for the RabbitMQ node's own CPU.
RABBIT_ROW = "broker: RabbitMQ node CPU (whole node)"


class Role:
    """One Redis a set-up uses, a control client on it (str replies), and how many calls the
    bench made on it since its meter started (left out of the round trips)."""

    def __init__(self, name: str, client: redis.Redis) -> None:
        self.name, self.client = name, client
        self.own = 0
        self.meter: Meter | None = None

    def start(self) -> None:
        self.own = 0
        self.meter = Meter(self.client)

    def call(self, method: Callable[..., Any], *args: Any) -> Any:
        self.own += 1
        return method(*args)

    def blocked(self) -> int:
        return sum(c.get("cmd") in BLOCKING for c in self.call(self.client.client_list))


class Setup:
    """The servers of one set-up, its worker and the way to publish and to wait."""

    def __init__(self, name: str, roles: list[Role], env: dict[str, str], *,
                 broker: Role | None, queues: tuple[str, ...], blocked: dict[str, int],
                 app: str = "app") -> None:
        self.name, self.roles, self.env, self.app = name, roles, env, app
        self.broker, self.queues, self.blocked = broker, queues, blocked
        self.worker: Worker | None = None

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until the queues and the unacknowledged hash are empty and the consumer (and on
        a single-Redis state, the releaser) block; on RabbitMQ a short settle instead."""
        assert self.worker is not None
        deadline = time.monotonic() + timeout
        roles = {role.name: role for role in self.roles}
        while True:
            self.worker.check_alive()
            busy = []
            if self.broker is not None:
                broker = self.broker
                busy += [q for q in self.queues if broker.call(broker.client.llen, q)]
                if broker.call(held_count, broker.client):
                    busy.append("unacked")
            for name, want in self.blocked.items():
                blocked = roles[name].blocked()
                if blocked < want:
                    busy.append(f"{name}: {blocked} of {want} blocked")
            if not busy:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: not idle after {timeout:.0f}s: {busy}")
            time.sleep(0.05)
        time.sleep(0.3 if self.broker is not None else AMQP_SETTLE)


class Rabbit:
    """A throwaway vhost on the machine's RabbitMQ, deleted by the stack."""

    def __init__(self, stack: ExitStack) -> None:
        self.vhost = f"hl-bench-scale-{uuid.uuid4().hex[:8]}"
        stack.callback(rabbitmqctl, "delete_vhost", self.vhost)  # before it exists: Ctrl-C
        for args in (("add_vhost", self.vhost),
                     ("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")):
            done = rabbitmqctl(*args)
            if done.returncode != 0:
                raise RuntimeError(f"rabbitmqctl {args[0]}: {done.stderr.strip() or done.stdout}")
        self.url = f"pyamqp://guest:guest@{AMQP_HOST}:{AMQP_PORT}/{self.vhost}"
        self.node = next((p for p in psutil.process_iter(["name"])
                          if p.info["name"] == "beam.smp"), None)

    def cpu(self) -> float | None:
        """The RabbitMQ node's CPU seconds so far (None if its process is not visible)."""
        if self.node is None:
            return None
        try:
            times = self.node.cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)


def use(redis_url: str, broker_url: str | None) -> None:
    """Point this process (it registers endpoints and publishes) and the next worker there."""
    os.environ["REDIS_URL"] = redis_url
    if broker_url:
        os.environ["HOOKLINE_BROKER_URL"] = broker_url
    else:
        os.environ.pop("HOOKLINE_BROKER_URL", None)
    from hookline.core.config import configure

    configure()


def role(stack: ExitStack, name: str, workdir: Path, label: str) -> tuple[RedisServer, Role]:
    server, client = private_redis(stack, name, workdir)
    return server, Role(label, client)


def build(name: str, stack: ExitStack, workdir: Path) -> tuple[Setup, Rabbit | None]:
    """Start ``name``'s servers (stopped by ``stack``) and point the process at them."""
    queues = ("hookline", "hookline.retry")
    if name == "one-redis":
        server, both = role(stack, "one", workdir, "broker + state")
        use(server.url, None)
        # The consumer's BLMPOP and the releaser's BLPOP, both on the one Redis.
        return Setup(name, [both], {}, broker=both, queues=queues,
                     blocked={both.name: 2}), None
    if name == "redis-broker-apart":
        state_server, state = role(stack, "apart-state", workdir, "state")
        broker_server, broker = role(stack, "apart-broker", workdir, "broker")
        use(state_server.url, broker_server.url)
        return Setup(name, [state, broker], {}, broker=broker, queues=queues,
                     blocked={"state": 1, "broker": 1}), None
    if name == "rabbitmq":
        rabbit = Rabbit(stack)
        state_server, state = role(stack, "rabbit-state", workdir, "state")
        use(state_server.url, rabbit.url)
        return Setup(name, [state], {}, broker=None, queues=(),
                     blocked={"state": 1}), rabbit
    if name == "cluster":
        cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="cluster-", dir=workdir)))
        stack.callback(cluster.stop)
        ports = cluster.start().ports
        masters = []
        for number, port in enumerate(ports, 1):
            client = redis.Redis(port=port, decode_responses=True)
            stack.callback(client.close)
            masters.append(Role(f"state master {number}", client))
        broker_server, broker = role(stack, "cluster-broker", workdir, "broker")
        use(f"redis+cluster://127.0.0.1:{ports[0]}", broker_server.url)
        # The releaser blocks on one shard's wake list at a time, in turn (<= 1 s each).
        return Setup(name, [*masters, broker], {}, broker=broker, queues=queues,
                     blocked={"broker": 1}), None
    assert name == "naive"
    server, naive = role(stack, "naive", workdir, "broker")
    os.environ["BENCH_NAIVE_BROKER_URL"] = server.url
    from bench import naive as naive_app  # reads BENCH_NAIVE_BROKER_URL on first import

    naive_app.app.conf.broker_url = server.url
    # Drop the connection and producer pools on an earlier round's Redis (stopped): Celery
    # does so after a fork, and has no public call for it.
    naive_app.app._after_fork()
    return Setup(name, [naive], {"BENCH_NAIVE_BROKER_URL": server.url}, broker=naive,
                 queues=("celery",), blocked={"broker": 1}, app="bench.naive"), None


def publish(setup: Setup, receiver: FastReceiver, n: int, prefix: str) -> None:
    payload = {"n": n, "object": "order", "amount": 1999}
    if setup.app == "app":
        import hookline

        hookline.deliver.delay(f"scale-{n % ENDPOINTS}", "order.paid", payload,
                               event_id=f"{setup.name}-{prefix}-{n}")
    else:
        from bench import naive

        naive.webhook.delay(receiver.url, {"type": "order.paid", "data": payload})


def publish_all(setup: Setup, receiver: FastReceiver, count: int, prefix: str) -> None:
    """Publish ``count`` events from a thread of their own: a Ctrl-C (raised in the main
    thread only) then never cuts an AMQP frame in half, which would leave the publisher's
    connection reading garbage for ever on the way out."""
    failed: list[BaseException] = []

    def publish_each() -> None:
        try:
            for n in range(count):
                publish(setup, receiver, n, prefix)
        except BaseException as exc:  # handed to the main thread
            failed.append(exc)

    thread = threading.Thread(target=publish_each, name="publisher", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)
    if failed:
        raise failed[0]


def batch(setup: Setup, receiver: FastReceiver, count: int, prefix: str,
          rabbit: Rabbit | None = None) -> dict[str, Any]:
    """``count`` events at once; each Redis's cost per delivery, and deliveries/s."""
    assert setup.worker is not None
    setup.wait_idle()
    receiver.reset()
    for each in setup.roles:
        each.start()
    node_cpu = rabbit.cpu() if rabbit else None
    started = time.monotonic()
    publish_all(setup, receiver, count, prefix)
    receiver.wait_for(count, 60 + count / 10, setup.worker)
    seconds = time.monotonic() - started
    setup.wait_idle()
    roles = {}
    for each in setup.roles:
        assert each.meter is not None
        roles[each.name] = each.meter.per_event(count, each.own)
    result: dict[str, Any] = {
        "events": count, "seconds": round(seconds, 2),
        "deliveries_per_s": round(count / seconds),
        # The naive task sends no webhook-id: duplicates cannot be told there.
        "duplicates": receiver.hits - receiver.distinct if setup.app == "app" else None,
        "roles": roles}
    after = rabbit.cpu() if rabbit else None
    if node_cpu is not None and after is not None:
        result["rabbitmq_node_cpu_ms"] = round((after - node_cpu) * 1000 / count, 3)
    return result


def measure(name: str, options: argparse.Namespace, workdir: Path,
            receiver: FastReceiver) -> dict[str, Any]:
    with ExitStack() as stack:
        setup, rabbit = build(name, stack, workdir)
        if setup.app == "app":
            from hookline.store import connection
            from hookline.store.endpoints import EndpointRegistry

            registry = EndpointRegistry(connection.client())
            for number in range(ENDPOINTS):
                registry.add(f"scale-{number}", receiver.url, rate="1000/s", burst=1000)
        setup.worker = Worker(setup.env, workdir / f"worker-{name}.log",
                              concurrency=CONCURRENCY, app=setup.app)
        stack.callback(setup.worker.stop)
        batch(setup, receiver, min(200, options.events), "warm", rabbit)
        result = batch(setup, receiver, options.events, "run", rabbit)
        if setup.name == "cluster":
            result["endpoints_per_master"] = endpoints_per_master(setup)
        if rabbit is not None:
            result["vhost"] = rabbit.vhost
        return derive(result)


def derive(result: dict[str, Any]) -> dict[str, Any]:
    """On a cluster: the masters' sum, their spread (busiest over idlest) and the deliveries/s
    the state carries before its busiest master fills one core."""
    masters = [cost for label, cost in result["roles"].items()
               if label.startswith("state master")]
    if masters:
        result["masters_sum"] = {
            key: round(sum(cost[key] for cost in masters), 3)
            for key in ("commands", "scripts", "round_trips", "redis_cpu_ms")}
        result["spread"] = {
            key: round(max(c[key] for c in masters) / min(c[key] for c in masters), 2)
            if min(c[key] for c in masters) else None
            for key in ("commands", "redis_cpu_ms")}
        busiest = max(cost["redis_cpu_ms"] for cost in masters)
        result["cluster_ceiling_per_s"] = round(1000 / busiest) if busiest else None
    return result


def endpoints_per_master(setup: Setup) -> dict[str, int]:
    """How many of the endpoints (each one's keys in its own hash-tag slot) each master
    holds: with 20 endpoints the masters' shares are uneven by placement alone."""
    slots = {}
    for each in setup.roles:
        if each.name.startswith("state master"):
            port = each.client.connection_pool.connection_kwargs["port"]
            for start, end, *nodes in each.client.cluster("slots"):
                if int(nodes[0][1]) == port:
                    slots[each.name] = (int(start), int(end))
    counts = dict.fromkeys(slots, 0)
    for number in range(ENDPOINTS):
        slot = key_slot(f"scale-{number}".encode())
        counts.update({name: counts[name] + 1 for name, (start, end) in slots.items()
                       if start <= slot <= end})
    return counts


def run(options: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hookline-scale-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        bench_environment(workdir, HOOKLINE_LOG_FORMAT="text")
        with ExitStack() as probe:
            _, client = private_redis(probe, "probe", workdir)
            info = machine(client)
        receiver = FastReceiver()
        stack.callback(receiver.stop)
        result: dict[str, Any] = {"machine": info, "events": options.events,
                                  "endpoints": ENDPOINTS, "concurrency": CONCURRENCY,
                                  "rounds": options.rounds, "setups": {}, "skipped": {}}
        runs: dict[str, list[dict[str, Any]]] = {}
        for number in range(options.rounds):  # in turn: the machine's speed drifts
            for name in options.setups:
                reason = (rabbitmq_unavailable() if name == "rabbitmq" else
                          LocalCluster.unavailable() if name == "cluster" else None)
                if reason:
                    print(f"{name}: skipped: {reason}", flush=True)
                    result["skipped"][name] = reason
                    continue
                runs.setdefault(name, []).append(measure(name, options, workdir, receiver))
                print(f"round {number + 1}, {name}: {summary(runs[name][-1])}", flush=True)
        for name, each in runs.items():
            combined = derive(median(each))  # the cluster's sums etc. from the medians
            combined["rounds_deliveries_per_s"] = [r["deliveries_per_s"] for r in each]
            combined["rounds_redis_cpu_ms"] = {
                label: [r["roles"][label]["redis_cpu_ms"] for r in each]
                for label in each[0]["roles"]}
            if "rabbitmq_node_cpu_ms" in each[0]:
                combined["rounds_redis_cpu_ms"][RABBIT_ROW] = [
                    r.get("rabbitmq_node_cpu_ms") for r in each]
            if "endpoints_per_master" in each[0]:
                combined["endpoints_per_master"] = each[0]["endpoints_per_master"]
            if "vhost" in combined:
                combined["vhost"] = [r["vhost"] for r in each]
            result["setups"][name] = combined
        one = result["setups"].get("one-redis")
        naive = result["setups"].get("naive")
        if one and naive:
            hook, plain = one["roles"]["broker + state"], naive["roles"]["broker"]
            result["hookline_over_naive"] = {
                key: round(hook[key] / plain[key], 2) if plain[key] else None
                for key in ("commands", "round_trips", "redis_cpu_ms")}
        return result


def median(values: list[Any]) -> Any:
    """The rounds' results in one: the median of each number, key by key (a key missing from
    a round counts 0 there); anything else as the first round has it."""
    first = values[0]
    if isinstance(first, dict):
        keys = list(dict.fromkeys(key for value in values for key in value))
        return {key: median([value.get(key, 0) for value in values]) for key in keys}
    if isinstance(first, (int, float)) and not isinstance(first, bool) and \
            all(isinstance(value, (int, float)) for value in values):
        middle = statistics.median(values)
        return round(middle, 3) if isinstance(middle, float) else middle
    return first


def summary(setup: dict[str, Any]) -> str:
    roles = ", ".join(f"{name} {cost['commands']} cmds {cost['redis_cpu_ms']} ms"
                      for name, cost in setup["roles"].items())
    return f"{setup['deliveries_per_s']}/s; {roles}"


def span(rounds: list[float | None] | None) -> str:
    known = [value for value in rounds or () if value is not None]
    return f" ({min(known)}-{max(known)})" if len(known) > 1 else ""


def ceiling(cpu_ms: float) -> str:
    return f"{1000 / cpu_ms:,.0f}" if cpu_ms else "-"


def report(result: dict[str, Any]) -> str:
    info = result["machine"]
    lines = [
        f"{info['date']}, {info['cpus']} cores {info['cpu_model']}, load "
        f"{info['load_average']}, Python {info['python']}, Celery {info['celery']}, kombu "
        f"{info['kombu']}, Redis {info['redis_server']}, commit {info['commit']}",
        "",
        f"{result['events']} events at once over {result['endpoints']} endpoints, one worker "
        f"-P threads -c {result['concurrency']}; per delivery, the median of "
        f"{result['rounds']} round(s) (Redis CPU: median, and the rounds' range):",
        "",
        "| set-up / Redis role | commands | round trips | Redis CPU, ms | deliveries/s one "
        "core of it carries | deliveries/s measured |",
        "|---|---|---|---|---|---|",
    ]
    for name, setup in result["setups"].items():
        rate = f"{setup['deliveries_per_s']:,.0f}"
        spans = setup.get("rounds_redis_cpu_ms", {})
        rows = list(setup["roles"].items())
        if "masters_sum" in setup:
            rows.insert(sum(label.startswith("state master") for label, _ in rows),
                        ("state, 3 masters' sum", setup["masters_sum"]))
        for label, cost in rows:
            lines.append(f"| {name} / {label} | {cost['commands']} | {cost['round_trips']} | "
                         f"{cost['redis_cpu_ms']}{span(spans.get(label))} | "
                         f"{ceiling(cost['redis_cpu_ms'])} | {rate} |")
        if "rabbitmq_node_cpu_ms" in setup:
            lines.append(f"| {name} / {RABBIT_ROW} | - | - | "
                         f"{setup['rabbitmq_node_cpu_ms']}{span(spans.get(RABBIT_ROW))} | "
                         f"{ceiling(setup['rabbitmq_node_cpu_ms'])} | {rate} |")
    lines.append("")
    cluster = result["setups"].get("cluster")
    if cluster:
        spread = cluster["spread"]
        placed = ", ".join(str(n) for n in cluster["endpoints_per_master"].values())
        lines.append(f"Cluster spread (busiest / idlest master): commands {spread['commands']}x, "
                     f"Redis CPU {spread['redis_cpu_ms']}x (endpoints per master: {placed}); "
                     f"the cluster's state carries about {cluster['cluster_ceiling_per_s']:,} "
                     f"deliveries/s before its busiest master fills one core.")
    ratio = result.get("hookline_over_naive")
    if ratio:
        lines.append(f"Hookline (one-redis) over the naive task, per delivery: commands "
                     f"{ratio['commands']}x, round trips {ratio['round_trips']}x, Redis CPU "
                     f"{ratio['redis_cpu_ms']}x.")
    seen = {name: setup["duplicates"] for name, setup in result["setups"].items()
            if setup["duplicates"] is not None}
    if seen:
        lines.append("Duplicate deliveries (a webhook-id received twice), median: " +
                     ", ".join(f"{name} {count}" for name, count in seen.items()) + ".")
    lines.append("Deliveries/s measured: one worker on this machine, publisher and servers "
                 "sharing its cores (the machine's ceiling here, not the servers').")
    for name, reason in result["skipped"].items():
        lines.append(f"{name}: skipped: {reason}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="events at once per set-up")
    parser.add_argument("--setups", type=lambda text: text.split(","), default=list(SETUPS),
                        help=f"comma-separated, of {','.join(SETUPS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of every set-up in turn; the table shows medians")
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args(argv)
    if options.events < ENDPOINTS or options.rounds < 1 or \
            not set(options.setups) <= set(SETUPS):
        parser.error(f"--events >= {ENDPOINTS}, --rounds >= 1; --setups among "
                     f"{','.join(SETUPS)}")
    return run_bench(run, options, report)


if __name__ == "__main__":
    sys.exit(main())
