"""Take the README's Flower screenshot (docs/flower-tasks.png): a worker, a loopback receiver
and Flower, a small mixed run, then one headless Chromium shot of Flower's tasks page.

    REDIS_URL=redis://127.0.0.1:6379/14 python scripts/flower_screenshot.py [OUTPUT.png]

Not run by the tests. Needs ``chromium`` (Debian: ``apt-get install chromium``). Uses the Redis
at ``REDIS_URL`` (adds ``shot-*`` endpoints; flushes nothing). Flower runs on loopback without
auth for the shot only (headless Chromium cannot answer a basic-auth prompt).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.update({
    "HOOKLINE_INITIAL_BACKOFF": "0.5", "HOOKLINE_MAX_BACKOFF": "2", "HOOKLINE_MAX_ATTEMPTS": "3",
    "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
})

from examples.receiver import Receiver, Reply, always, fail_first  # noqa: E402
from hookline import deliver, send_webhook  # noqa: E402
from hookline.store.endpoints import EndpointRegistry  # noqa: E402
from hookline.worker.celery import worker_app  # noqa: E402

COLUMNS = "name,uuid,state,args,result,received,started,runtime,worker"


def wait(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.2)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def main() -> None:
    output = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "flower-tasks.png")
    port = 5599
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "app", "worker", "-l",
                               "warning", "-n", "shot@%h", "-c", "8"], cwd=ROOT, env=env)
    flower = subprocess.Popen([sys.executable, "-m", "celery", "-A", "app", "flower",
                               "--address=127.0.0.1", f"--port={port}",
                               f"--tasks_columns={COLUMNS}", "--persistent=False"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        with Receiver() as receiver:
            wait(lambda: answers(f"http://127.0.0.1:{port}/healthcheck"))
            time.sleep(3)  # the worker's ready and Flower's event receiver bound
            registry = EndpointRegistry()
            for endpoint_id in ("shot-shop", "shot-flaky", "shot-strict", "shot-slow", "shot-lim"):
                if registry.get(endpoint_id):
                    registry.remove(endpoint_id)
            ok = registry.add("shot-shop", receiver.route("/ok", always(Reply(204))))
            flaky = registry.add("shot-flaky", receiver.route("/flaky", fail_first(1, Reply(503))))
            strict = registry.add("shot-strict", receiver.route("/strict", always(Reply(400))))
            slow = registry.add("shot-slow", receiver.route("/slow", always(Reply(500))),
                                retry_policy={"initial_backoff": 600, "max_backoff": 600})
            limited = registry.add("shot-lim", receiver.route("/lim", always(Reply(204))),
                                   rate="1/h", burst=1)
            body = {"order": 1234, "email": "ada@example.com"}
            for _ in range(3):
                send_webhook(ok.id, "order.created", body)
            deliver.delay(ok.id, "order.paid", body)
            send_webhook(flaky.id, "invoice.sent", body)
            send_webhook(strict.id, "order.created", body)
            send_webhook(limited.id, "order.created", body)
            send_webhook(limited.id, "order.updated", body)
            send_webhook(slow.id, "order.refunded", body)  # parked for 10 minutes: RETRY
            revoked = send_webhook(slow.id, "order.cancelled", body)
            time.sleep(3)
            worker_app.control.revoke(revoked)
            time.sleep(1)
            # its retry comes back now, meets the revocation: dead letter (revoked)
            from hookline.store import connection

            connection.client().zadd("hookline:{schedule}:due", {f"{slow.id}/{revoked}": 0})
            time.sleep(3)
            output.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                            "--disable-background-networking", "--disable-component-update",
                            "--no-first-run", "--hide-scrollbars", f"--screenshot={output}",
                            "--window-size=1900,820", f"http://127.0.0.1:{port}/tasks"],
                           check=True, timeout=60, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            print(f"wrote {output} ({output.stat().st_size} bytes)")
    finally:
        for process in (flower, worker):
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
