"""A Redis Sentinel deployment on loopback for one test: a master, replicas and three
Sentinels, each a ``redis-server`` process on a free port with its files in a directory of
the test's own, stopped (killed if need be) by :meth:`SentinelDeployment.stop`."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import redis

from tests.conftest import free_port, wait_until

#: Seconds of silence before a Sentinel thinks the master is down, and the failover timeout:
#: short, so that a test's failover ends in a second or two.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


def redis_server_missing() -> str | None:
    """Why a deployment cannot be started here, or None."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (needed for a master, replicas and Sentinels)"
    return None


class SentinelDeployment:
    """``replicas`` replicas of one master, watched by ``sentinels`` Sentinels (quorum 2)
    under ``master_name``."""

    def __init__(self, directory: Path, *, master_name: str = "hookline-test",
                 replicas: int = 2, sentinels: int = 3, down_after_ms: int = DOWN_AFTER_MS,
                 appendonly: bool = False) -> None:
        self.directory = directory
        self.master_name = master_name
        #: Silence before the Sentinels fail the master over (a pause shorter than this is
        #: a pause, not a failover), and whether each node keeps an AOF of its own.
        self.down_after_ms = down_after_ms
        self.appendonly = appendonly
        self.redis_ports = [free_port() for _ in range(1 + replicas)]
        self.sentinel_ports = [free_port() for _ in range(sentinels)]
        self.processes: list[subprocess.Popen[bytes]] = []

    # -- addresses ---------------------------------------------------------------------------

    def url(self, db: int = 0) -> str:
        """The ``sentinel://`` URL naming every Sentinel (``HOOKLINE_SENTINEL_MASTER``:
        :attr:`master_name`)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"sentinel://{hosts}/{db}"

    def sentinel(self, index: int = 0) -> redis.Redis:
        return redis.Redis(port=self.sentinel_ports[index], decode_responses=True,
                           socket_timeout=5)

    def master_port(self) -> int:
        """The master's port, as the first Sentinel says."""
        port = self._master_port_from(0)
        assert port is not None, "the first Sentinel names no master"
        return port

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, decode_responses=True, socket_timeout=5)

    # -- life --------------------------------------------------------------------------------

    def start(self) -> SentinelDeployment:
        master, *replicas = self.redis_ports
        self._redis_server(master)
        for port in replicas:
            self._redis_server(port, "--replicaof", "127.0.0.1", str(master))
        for port in replicas:
            wait_until(lambda port=port: self._replica_linked(port), timeout=15,
                       what=lambda port=port: f"replica {port} never linked to {master}")
        for port in self.sentinel_ports:
            config = self.directory / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
                f"sentinel monitor {self.master_name} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.master_name} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {self.master_name} 1\n")
            self._spawn(["redis-server", str(config), "--sentinel"])
        wait_until(self._sentinels_agree, timeout=20,
                   what=lambda: f"Sentinels did not find each other and the replicas: "
                                f"{self._sentinel_views()}")
        return self

    def stop(self) -> None:
        """Stop every process this deployment started (SIGTERM, then SIGKILL)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 5
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def stop_node(self, port: int) -> None:
        """Kill the redis-server on ``port`` (a master or a replica)."""
        index = self.redis_ports.index(port)
        process = self.processes[index]
        process.kill()
        process.wait(5)

    def process_of(self, port: int) -> subprocess.Popen[bytes]:
        """The redis-server process serving ``port``."""
        return self.processes[self.redis_ports.index(port)]

    def shutdown_node(self, port: int) -> None:
        """SHUTDOWN the node on ``port``: its AOF (if on) is flushed first."""
        with contextlib.suppress(redis.ConnectionError):
            self.node(port).shutdown()
        self.process_of(port).wait(20)

    def restart_node(self, port: int) -> None:
        """Start the node on ``port`` again from its own files, as a master: one shut down
        and back before the Sentinels' ``down_after_ms`` stays the master they know."""
        index = self.redis_ports.index(port)
        self._redis_server(port)
        self.processes[index] = self.processes.pop()

    def failover(self, timeout: float = 20.0) -> tuple[int, int]:
        """``SENTINEL FAILOVER``; waits until the Sentinels name a new master that answers as
        one and accepts writes; returns (old port, new port)."""
        old = self.master_port()
        self.sentinel().execute_command("SENTINEL", "FAILOVER", self.master_name)

        def switched() -> int | None:
            ports = {self._master_port_from(index) for index in range(len(self.sentinel_ports))}
            if len(ports) != 1:
                return None
            (new,) = ports
            if new is None or new == old:
                return None
            try:
                role = self.node(new).execute_command("ROLE")[0]
            except redis.RedisError:
                return None
            return new if role == "master" else None

        new = wait_until(switched, timeout=timeout,
                         what=lambda: f"no new master after SENTINEL FAILOVER (was {old})")
        return old, int(new)

    # -- helpers -----------------------------------------------------------------------------

    def _redis_server(self, port: int, *extra: str) -> None:
        self._spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", str(self.directory),
                     "--dbfilename", f"dump-{port}.rdb",
                     # A replica (re)attached after a failover syncs at once, not after 5 s.
                     "--repl-diskless-sync-delay", "0",
                     *(("--appendonly", "yes", "--appendfsync", "everysec",
                        "--appenddirname", f"appendonly-{port}") if self.appendonly else ()),
                     *extra])
        client = self.node(port)
        wait_until(lambda: _answers(client), timeout=20,
                   what=lambda: f"redis-server on port {port} never answered")

    def _spawn(self, command: list[str]) -> None:
        self.processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))

    def _replica_linked(self, port: int) -> bool:
        info = self.node(port).info("replication")
        return info.get("master_link_status") == "up"

    def _master_port_from(self, index: int) -> int | None:
        # Raw commands: redis-py's SENTINEL reply parsers differ (and fail) across versions.
        try:
            address = self.sentinel(index).execute_command(
                "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
        except redis.RedisError:
            return None
        return int(address[1]) if address else None

    def _sentinel_views(self) -> list[dict[str, object]]:
        views = []
        for index in range(len(self.sentinel_ports)):
            try:
                reply = self.sentinel(index).execute_command("SENTINEL", "MASTER",
                                                             self.master_name)
            except redis.RedisError as exc:
                views.append({"error": str(exc)})
                continue
            master = (reply if isinstance(reply, dict)  # redis-py 8 parses it, 6 does not
                      else dict(zip(reply[::2], reply[1::2], strict=True)))
            views.append({key: master.get(key) for key in
                          ("num-slaves", "num-other-sentinels", "flags")})
        return views

    def _sentinels_agree(self) -> bool:
        replicas = len(self.redis_ports) - 1
        others = len(self.sentinel_ports) - 1
        return all(str(view.get("num-slaves")) == str(replicas)
                   and str(view.get("num-other-sentinels")) == str(others)
                   for view in self._sentinel_views())


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
