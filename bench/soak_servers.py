"""The soak's Redis behind Sentinel (``python -m bench.soak --sentinel``): a master and two
replicas, each with an AOF of its own, watched by three Sentinels, so that a Sentinel failover
joins the faults. It offers what ``bench.chaos_procs.AofRedis`` offers the soak, each fault done
to the master of the moment."""

from __future__ import annotations

import signal
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from hookline.store.sentinel import FollowingPool
from tests.support.sentinel import SentinelDeployment

#: The master's name for the Sentinels and the workers (``HOOKLINE_SENTINEL_MASTER``).
MASTER = "hookline-soak"
#: Silence before the Sentinels declare the master down: Redis's default. The soak's Redis
#: restart (a few seconds) and 20 s pause stay what they are, and do not become failovers.
DOWN_AFTER_MS = 30_000


class SentinelRedis:
    """A Sentinel deployment with the soak's Redis faults: restart from the AOF, pause, and
    ``SENTINEL FAILOVER``."""

    def __init__(self, workdir: Path) -> None:
        directory = workdir / "sentinel"
        directory.mkdir(parents=True, exist_ok=True)
        self.deployment = SentinelDeployment(directory, master_name=MASTER,
                                             down_after_ms=DOWN_AFTER_MS, appendonly=True)
        self.url = self.deployment.url(0)
        self._down: int | None = None
        self._paused: int | None = None
        self.failovers = 0

    def start(self) -> None:
        """The deployment, the first time; after :meth:`shutdown`, the master it shut down,
        from its AOF."""
        if self._down is None:
            self.deployment.start()
            return
        self.deployment.restart_node(self._down)
        self._down = None

    def shutdown(self) -> None:
        self._down = self.deployment.master_port()
        self.deployment.shutdown_node(self._down)

    def pause(self) -> None:
        self._paused = self.deployment.master_port()
        self.deployment.process_of(self._paused).send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._paused is not None
        self.deployment.process_of(self._paused).send_signal(signal.SIGCONT)
        self._paused = None

    def failover(self) -> str:
        old, new = self.deployment.failover(timeout=60.0)
        self.failovers += 1
        return f"{old}->{new}"

    def env(self) -> dict[str, str]:
        return {"REDIS_URL": self.url, "HOOKLINE_SENTINEL_MASTER": MASTER}

    def _master(self, **options: object) -> redis.Redis:
        sentinels = [("127.0.0.1", port) for port in self.deployment.sentinel_ports]
        # Hookline's own pool (as its publisher's): it follows a failover within a second,
        # where redis-py's stays on the demoted master until Sentinel reconfigures it
        return Sentinel(sentinels, socket_timeout=1).master_for(
            MASTER, connection_pool_class=FollowingPool, decode_responses=True, **options)

    def client(self) -> redis.Redis:
        return self._master(socket_timeout=10)

    def quick_client(self) -> redis.Redis:
        return self._master(socket_timeout=1, socket_connect_timeout=1,
                            retry=Retry(NoBackoff(), 0))

    def stop(self) -> None:
        if self._paused is not None:
            self.resume()
        self.deployment.stop()
