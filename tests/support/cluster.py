"""A Redis Cluster of three masters started from ``redis-server`` on loopback, for one test
module: its own ports and directory, stopped (by pid) afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import redis
import redis.cluster
from redis.cluster import RedisCluster

from tests.conftest import free_port, wait_until

#: A cluster node's bus port is its port plus this (Redis's fixed offset).
BUS_OFFSET = 10000


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET < 65536 and _port_free(port + BUS_OFFSET):
            return port


class LocalCluster:
    """``masters`` redis-server processes with ``cluster-enabled yes``, joined with
    ``redis-cli --cluster create`` (no replicas); :attr:`url` is Hookline's
    ``redis+cluster://`` URL naming one seed node."""

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
            self.processes.append(subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no",
                 "--dir", str(node_dir)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            wait_until(lambda port=port: _answers(port), timeout=10,
                       what=lambda port=port: f"redis-server on {port} does not answer")
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}"
                               f"{created.stderr}")
        wait_until(self._ready, timeout=30, what=self._states)
        return self

    def _states(self) -> str:
        return ", ".join(f"{port}: {_info(port).get('cluster_state')}" for port in self.ports)

    def _ready(self) -> bool:
        return all(_info(port).get("cluster_state") == "ok"
                   and str(_info(port).get("cluster_slots_assigned")) == "16384"
                   for port in self.ports)

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.ports[0], decode_responses=True)

    def master_of(self, client: RedisCluster, key: str) -> str:
        """``host:port`` of the master holding ``key``'s slot."""
        node = client.get_node_from_key(key)
        assert node is not None, key
        return f"{node.host}:{node.port}"

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.ConnectionError:
        return False


def _info(port: int) -> dict[str, object]:
    try:
        return dict(redis.Redis(port=port, socket_timeout=2).cluster("info"))
    except redis.RedisError:
        return {}
