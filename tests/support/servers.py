"""Local servers for the tests and the benchmarks (``bench/`` imports these; the tests never
import ``bench/``): free ports, stopping a process, the machine's RabbitMQ (``rabbitmqctl``), and
a Redis Cluster on loopback (``masters`` redis-server processes with ``cluster-enabled yes``,
joined with ``redis-cli --cluster create`` and stopped by :meth:`LocalCluster.stop`). Nothing
here imports pytest or the test configuration."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import redis.cluster

#: Where the machine's RabbitMQ is expected (override with HOOKLINE_TEST_AMQP_HOST / _PORT).
AMQP_HOST = os.environ.get("HOOKLINE_TEST_AMQP_HOST", "127.0.0.1")
AMQP_PORT = int(os.environ.get("HOOKLINE_TEST_AMQP_PORT", "5672"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
                 timeout: float = 20.0) -> None:
    """Signal ``process`` and wait for it; kill it if it outlives ``timeout``."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess[str]:
    """``rabbitmqctl *args``, in its own session (a Ctrl-C reaches only the caller, which then
    cleans up with rabbitmqctl)."""
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=60,
                          check=False, start_new_session=True)


def rabbitmq_unavailable() -> str | None:
    """Why a RabbitMQ vhost cannot be made here, or None when it can."""
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed (RabbitMQ is needed for the RabbitMQ broker runs)"
    try:
        with socket.create_connection((AMQP_HOST, AMQP_PORT), timeout=2):
            pass
    except OSError as exc:
        return f"no RabbitMQ answers on {AMQP_HOST}:{AMQP_PORT} ({exc.strerror or exc})"
    return None


#: A cluster node's bus port is its port plus this (Redis's fixed offset).
BUS_OFFSET = 10000


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET >= 65536:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                continue
        return port


class LocalCluster:
    """``masters`` redis-server processes with ``cluster-enabled yes`` in ``directory``,
    joined with ``redis-cli --cluster create`` (no replicas); :attr:`url` is Hookline's
    ``redis+cluster://`` URL naming one seed node. Each node runs in its own session and is
    stopped by :meth:`stop`."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        self.directory = directory
        self.ports = [cluster_port() for _ in range(masters)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    @staticmethod
    def unavailable() -> str | None:
        """Why a cluster cannot be started here, or None."""
        for program in ("redis-server", "redis-cli"):
            if shutil.which(program) is None:
                return f"{program} is not installed: a Redis Cluster cannot be started"
        if not hasattr(redis.cluster, "TransactionStrategy"):
            return (f"redis-py {redis.__version__} runs no transactions in cluster pipelines "
                    "(6.1 or later does): Hookline refuses a cluster REDIS_URL with it")
        return None

    def start(self) -> LocalCluster:
        for port in self.ports:
            node_dir = self.directory / str(port)
            node_dir.mkdir(parents=True, exist_ok=True)
            with open(node_dir / "redis.log", "wb") as log:
                self.processes.append(subprocess.Popen(
                    ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                     "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no",
                     "--daemonize", "no", "--dir", str(node_dir)],
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        for port in self.ports:
            _wait_for(functools.partial(_cluster_info, port), f"redis-server on {port} answers",
                      10)
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, start_new_session=True)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}"
                               f"{created.stderr}")
        _wait_for(self._ready, "the cluster is ok", 30, self._states)
        return self

    def _ready(self) -> bool:
        infos = [_cluster_info(port) or {} for port in self.ports]
        return all(info.get("cluster_state") == "ok"
                   and str(info.get("cluster_slots_assigned")) == "16384" for info in infos)

    def _states(self) -> str:
        return ", ".join(f"{port}: {(_cluster_info(port) or {}).get('cluster_state')}"
                         for port in self.ports)

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.ports[0],
                                          decode_responses=True)

    def master_of(self, client: redis.cluster.RedisCluster, key: str) -> str:
        """``host:port`` of the master holding ``key``'s slot."""
        node = client.get_node_from_key(key)
        assert node is not None, key
        return f"{node.host}:{node.port}"

    def stop(self) -> None:
        for process in self.processes:
            stop_process(process, timeout=10.0)


def _cluster_info(port: int) -> dict[str, Any] | None:
    """CLUSTER INFO of the node on ``port``; None while it does not answer."""
    try:
        with redis.Redis(port=port, socket_timeout=2) as node:
            return dict(node.cluster("info"))
    except redis.RedisError:
        return None


def _wait_for(check: Callable[[], Any], what: str, timeout: float,
              state: Callable[[], str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            detail = f" ({state()})" if state is not None else ""
            raise TimeoutError(f"waited {timeout:.0f}s for: {what}{detail}")
        time.sleep(0.1)
