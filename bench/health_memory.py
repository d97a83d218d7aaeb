"""Redis bytes per endpoint-day of endpoint health (``hookline.store.health``): a day of
attempts written the way a worker writes them (``hookline.worker.health``), at three loads,
measured with MEMORY USAGE on a private ``redis-server``.

    python -m bench.health_memory [--redis-port 6396]

Prints one line per load: the keys, the minute hashes' bytes (and per minute), the attempt
list's, and the total per endpoint-day. Nothing is kept.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import tempfile
import time

import redis

#: (name, attempts per minute, latency spread (lognormal sigma), share failed)
LOADS = (("quiet", 1, 0.3, 0.01), ("steady", 60, 0.6, 0.05), ("busy", 2000, 1.2, 0.2))
#: The response excerpt of a failed attempt: HOOKLINE_HISTORY_BODY_BYTES' default.
BODY = "x" * 256


def one_day(client: redis.Redis, endpoint_id: str, per_minute: int, spread: float,
            failed: float, rng: random.Random) -> None:
    from hookline.store.history import AttemptRecord
    from hookline.worker.health import HealthTally

    tally = HealthTally(interval=0, client=lambda: client)
    now = time.time()
    for back in range(1440, 0, -1):
        for n in range(per_minute):
            ok = rng.random() > failed
            tally.observe(endpoint_id, f"evt-{back}-{n}", AttemptRecord(
                attempt=1, at=now - back * 60 + n * 60 / per_minute,
                outcome="delivered" if ok else "failed", status=200 if ok else 503,
                latency=rng.lognormvariate(-2.5, spread), response="ok" if ok else BODY))
        if back % 10 == 0:  # a write per 10 minutes of attempts (workers write more often)
            tally.flush()
    tally.flush()


def measure(client: redis.Redis, endpoint_id: str) -> tuple[int, int, int, set[str]]:
    from hookline.store import health

    found = list(client.scan_iter(f"hookline:{{{endpoint_id}}}:health:*"))
    hashes = [key for key in found if key != health.attempts_key(endpoint_id)]
    minutes = sum(int(client.memory_usage(key, samples=0) or 0) for key in hashes)
    attempts = int(client.memory_usage(health.attempts_key(endpoint_id), samples=0) or 0)
    encodings = {str(client.object("encoding", key)) for key in hashes}
    return len(found), minutes, attempts, encodings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-port", type=int, default=6396)
    port = parser.parse_args().redis_port
    work = tempfile.mkdtemp(prefix="hookline-health-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", work],
                              stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, decode_responses=True)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        version = client.info("server")["redis_version"]
        rng = random.Random(1)
        for name, per_minute, spread, failed in LOADS:
            one_day(client, name, per_minute, spread, failed, rng)
            keys, minutes, attempts, encodings = measure(client, name)
            total = minutes + attempts
            print(f"{name:6} {per_minute:>5}/min  {keys} keys  minute hashes {minutes:,} B "
                  f"({minutes / 1440:.0f} B/min, {'/'.join(sorted(encodings))})  attempts "
                  f"{attempts:,} B  total {total / 1024:.1f} KiB per endpoint-day "
                  f"(Redis {version})")
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
