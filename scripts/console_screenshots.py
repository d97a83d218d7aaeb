"""Take the console's and the portal's screenshots for the docs (docs/images/console-*.png,
portal-home.png, portal-events.png, portal-endpoint.png and portal-dead-letters.png), 1280x800
each.

    .venv/bin/python scripts/console_screenshots.py [--redis-port 6395] [--output docs/images]

Not run by the tests. Starts everything it uses and stops it at the end: a private
``redis-server`` on ``--redis-port`` (nothing kept on disk; the port must be free), a loopback
receiver, a worker, ``hookline console`` with the portal, and a headless Chromium (Debian's
``chromium`` and ``/usr/bin/chromedriver``, with selenium; ``scripts/ensure-chromium.sh``
installs them). It seeds a small deployment through the library and the service, as a host
and an operator would: two applications, a few endpoints, one whose receiver fails until its
circuit breaker opens, one paused, dead letters, an hour of delivery counts, a day of endpoint
health for two endpoints, a bulk replay
running at 20 entries a minute, and a few operator actions for the audit log.

With Pillow installed the images are reduced to a small palette (text and flat colours stay
sharp), which keeps them a few tens of KB each.
"""

from __future__ import annotations

import argparse
import functools
import io
import math
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Who signs in to the console for the shots.
OPERATOR = ("alice", secrets.token_urlsafe(12))
#: The receiver's fixed port, so the endpoints' URLs are the same in every run.
RECEIVER_PORT = 8701
#: The shots' size, CSS pixels (device scale 1).
WIDTH, HEIGHT = 1280, 800
#: An event whose attempts the events page shows (two failures, then delivered).
SHOWN_EVENT = "evt_01HZX4K7Q2"
CHROMIUM = os.environ.get("HOOKLINE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HOOKLINE_CHROMEDRIVER", "/usr/bin/chromedriver")


def wait(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """``condition()``'s first true value, polled; exits naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def settings(redis_url: str, key: str, console_port: int) -> dict[str, str]:
    """The deployment's settings: short backoffs (the shots are taken within a minute), a
    breaker that stays open once open, loopback receivers allowed."""
    return {
        "REDIS_URL": redis_url, "HOOKLINE_BROKER_URL": redis_url,
        "HOOKLINE_INITIAL_BACKOFF": "0.2", "HOOKLINE_BACKOFF_MULTIPLIER": "2",
        "HOOKLINE_MAX_BACKOFF": "1", "HOOKLINE_JITTER": "0.1", "HOOKLINE_MAX_ATTEMPTS": "3",
        "HOOKLINE_BREAKER_THRESHOLD": "10", "HOOKLINE_BREAKER_COOLDOWN": "900",
        "HOOKLINE_BREAKER_MAX_COOLDOWN": "900", "HOOKLINE_CONNECT_TIMEOUT": "1",
        "HOOKLINE_READ_TIMEOUT": "2", "HOOKLINE_ALLOWED_NETWORKS": "127.0.0.0/8",
        "HOOKLINE_CONSOLE_SECRET_KEY": key,
        "HOOKLINE_PORTAL_URL": f"http://127.0.0.1:{console_port}/portal",
        "HOOKLINE_DLQ_SPOOL": str(Path(tempfile.gettempdir()) / "hookline-shots-spool.jsonl"),
    }


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the deployment --------------------------------------------------------------------------


def seed_endpoints(receiver: Any) -> None:
    """Two applications and their endpoints, each on a receiver route behaving as named."""
    from examples.receiver import Reply, always, fail_first
    from hookline.store.apps import AppRegistry
    from hookline.store.endpoints import EndpointRegistry

    apps, registry = AppRegistry(), EndpointRegistry()
    apps.add("acme-shop", name="Acme Shop", description="Orders and billing")
    apps.add("northwind", name="Northwind Traders", description="Fulfilment partner")
    busy = Reply(503, headers={"Content-Type": "application/json"},
                 body=b'{"error": "upstream busy, try later"}')
    routes: dict[str, tuple[Any, str, dict[str, Any]]] = {
        "acme-orders": (always(Reply(204)), "acme-shop",
                        {"rate": "50/s", "event_types": ["order.created", "order.paid"],
                         "headers": {"X-Acme-Tenant": "eu-1"}}),
        "acme-billing": (always(Reply(500, body=b"Internal Server Error")), "acme-shop", {}),
        "acme-crm": (fail_first(2, busy, Reply(200, body=b'{"ok": true}')), "acme-shop", {}),
        "nw-fulfilment": (always(Reply(204)), "northwind",
                          {"rate": "20/s", "event_types": ["order.paid", "order.shipped"]}),
        "nw-analytics": (always(Reply(204)), "northwind", {"rate": "5/s"}),
        "nw-legacy": (always(Reply(400, body=b"unknown event type")), "northwind", {}),
        "nw-returns": (always(Reply(422, headers={"Content-Type": "application/json"},
                                    body=b'{"error": "unknown sku"}')), "northwind", {}),
    }
    for endpoint_id, (behaviour, app, options) in routes.items():
        path = f"/{app}/{endpoint_id.split('-', 1)[1]}"
        registry.add(endpoint_id, receiver.route(path, behaviour), app=app, **options)


def send_traffic() -> None:
    """A few dozen events: most delivered, acme-billing's failing until its breaker opens,
    nw-legacy's refused (dead letters), one event on acme-crm retried twice."""
    import hookline

    types = ["order.created", "order.paid", "order.shipped", "invoice.sent"]
    for n in range(24):
        hookline.send_webhook("acme-orders", types[n % 2], {"order": 1000 + n})
        hookline.send_webhook("nw-fulfilment", types[1 + n % 2], {"order": 1000 + n})
    for n in range(18):
        hookline.send_webhook("nw-legacy", types[n % 4], {"order": 2000 + n})
    for n in range(5):
        hookline.send_webhook("nw-returns", "return.created", {"return": f"R-{310 + n}"})
    hookline.send_webhook("acme-crm", "customer.updated",
                          {"customer": "cus_8842", "email": "ada@example.com"},
                          event_id=SHOWN_EVENT)


def break_billing() -> None:
    """acme-billing's receiver fails every attempt: its first invoices are dead-lettered one
    after the other (retries exhausted), the next ones open its breaker and wait behind it."""
    import hookline

    for n in range(1, 4):
        hookline.send_webhook("acme-billing", "invoice.sent", {"invoice": f"INV-{4099 + n}"})
        wait(functools.partial(letters_at_least, "acme-billing", n), "acme-billing's letter")
    for n in range(4, 7):
        hookline.send_webhook("acme-billing", "invoice.sent", {"invoice": f"INV-{4099 + n}"})
    wait(lambda: breaker_open("acme-billing"), "acme-billing's breaker")


def backfill_counts(minutes: int = 60, seed: int = 7) -> None:
    """An hour of per-minute outcome counts, written the way the workers write theirs
    (``hookline.worker.tallies``), so that the stats chart has a history to draw."""
    from hookline.worker.tallies import MinuteTallies

    clock = [0.0]
    tallies = MinuteTallies(interval=0, clock=lambda: clock[0])
    rng = random.Random(seed)
    now = time.time()
    for back in range(minutes, 0, -1):
        clock[0] = now - back * 60
        load = 320 + 140 * math.sin(back / 9) + rng.randint(-30, 30)
        tallies.count("delivered", int(load))
        tallies.count("retry_scheduled", rng.randint(4, 18) + (40 if 18 <= back <= 22 else 0))
        if rng.random() < 0.4 or 18 <= back <= 22:
            tallies.count("dead_lettered", rng.randint(1, 4))
        tallies.count("deferred", rng.randint(0, 6))
    tallies.flush()


def backfill_health(seed: int = 11) -> None:
    """A day of attempts at acme-orders (steady, a slow spell) and acme-billing (failing for
    the last two hours), written the way the workers write them (``hookline.worker.health``),
    so that the endpoint pages' charts have a history to draw."""
    from hookline.store.history import AttemptRecord
    from hookline.worker.health import HealthTally

    rng = random.Random(seed)
    now = time.time()
    tally = HealthTally(interval=0)
    for back in range(1440, 0, -1):
        at = now - back * 60
        slow = 1.0 + (2.5 if 300 <= back <= 340 else 0.0) + 0.3 * math.sin(back / 40)
        for n in range(6):
            failed = rng.random() < (0.25 if 300 <= back <= 340 else 0.01)
            tally.observe("acme-orders", f"evt_seed_o{back}_{n}", AttemptRecord(
                attempt=1, at=at + 10 * n, outcome="failed" if failed else "delivered",
                status=503 if failed else 204, latency=0.045 * slow * rng.lognormvariate(0, 0.4),
                response='{"error": "upstream busy"}' if failed else ""))
        if back % 3 == 0:
            failing = back <= 120
            tally.observe("acme-billing", f"evt_seed_b{back}", AttemptRecord(
                attempt=1, at=at, outcome="failed" if failing else "delivered",
                status=500 if failing else 200, latency=0.12 * rng.lognormvariate(0, 0.3),
                response="Internal Server Error" if failing else "ok"))
        if back % 60 == 0:
            tally.flush()
    tally.flush()


def operate(receiver: Any) -> str:
    """What an operator did today (the audit log's entries), and a bulk replay of nw-legacy's
    dead letters at 20 a minute once its receiver was fixed; returns the job's id."""
    from examples.receiver import Reply, always
    from hookline.service import endpoint_actions, portal, replay_jobs
    from hookline.service.actor import Actor
    from hookline.service.dead_letters import DeadLetterQuery

    alice = Actor(name="alice", session="console:4f2a91")
    bob = Actor(name="cli:bob", session="cli:31337@ops-1")
    endpoint_actions.pause(alice, "nw-analytics")
    endpoint_actions.rotate_secret(bob, "acme-crm")
    portal.issue("acme-shop", actor=alice, read_only=True)
    receiver.route("/northwind/legacy", always(Reply(204)))
    return replay_jobs.start_bulk_replay(alice, DeadLetterQuery.from_params(
        {"endpoint": "nw-legacy"}), rate="20/m")


def dead_letter_count(endpoint_id: str) -> int:
    from hookline.service import dead_letters
    from hookline.service.actor import Actor

    return dead_letters.count(Actor(name="shots", session="shots"),
                              dead_letters.DeadLetterQuery.from_params({"endpoint": endpoint_id}))


def letters_at_least(endpoint_id: str, n: int) -> bool:
    return dead_letter_count(endpoint_id) >= n


def breaker_open(endpoint_id: str) -> bool:
    from hookline.service import endpoints
    from hookline.service.actor import Actor

    health = endpoints.endpoint_health(Actor(name="shots", session="shots"), endpoint_id)
    return health.breaker.state == "open"


# -- Chromium --------------------------------------------------------------------------------


def chromium(profile: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking", "--hide-scrollbars",
                 "--disable-component-update", "--disable-sync", "--disable-extensions",
                 f"--window-size={WIDTH},{HEIGHT}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1,
                            "mobile": False})
    driver.execute_cdp_cmd("Network.enable", {})
    return driver


def signed_in(driver: Any, user: tuple[str, str] | None) -> None:
    import base64

    token = base64.b64encode(":".join(user).encode()).decode() if user else None
    headers = {"Authorization": f"Basic {token}"} if token else {}
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": headers})


def shoot(driver: Any, url: str, output: Path, settle: float = 0.3) -> None:
    """Load ``url`` and save what the 1280x800 viewport shows as ``output``."""
    driver.get(url)
    wait(lambda: driver.execute_script("return document.readyState") == "complete", url)
    time.sleep(settle)
    png = driver.get_screenshot_as_png()
    try:
        from PIL import Image
    except ImportError:
        output.write_bytes(png)
    else:
        image = Image.open(io.BytesIO(png)).convert("RGB")
        image.quantize(colors=96, dither=Image.Dither.NONE).save(output, optimize=True)
    print(f"{output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}: "
          f"{output.stat().st_size // 1024} KB")


def take_shots(driver: Any, base: str, output: Path, job_id: str) -> None:
    from hookline.service import portal

    signed_in(driver, OPERATOR)
    shoot(driver, f"{base}/dead-letters/jobs/{job_id}", output / "console-bulk-replay.png")
    shoot(driver, f"{base}/", output / "console-overview.png")
    shoot(driver, f"{base}/endpoints/acme-billing", output / "console-endpoint.png")
    shoot(driver, f"{base}/endpoints/acme-orders#endpoint-health-chart",
          output / "console-endpoint-health.png")
    shoot(driver, f"{base}/events?event_id={SHOWN_EVENT}", output / "console-event.png")
    shoot(driver, f"{base}/events?endpoint=nw-legacy&status=dead&since=1h",
          output / "console-event-log.png")
    shoot(driver, f"{base}/dead-letters?since=1h&order=newest",
          output / "console-dead-letters.png")
    shoot(driver, f"{base}/stats", output / "console-stats.png")
    shoot(driver, f"{base}/audit", output / "console-audit.png")
    signed_in(driver, None)
    driver.delete_all_cookies()
    shoot(driver, portal.portal_link("acme-shop"), output / "portal-home.png")
    shoot(driver, f"{base}/portal/events", output / "portal-events.png")
    shoot(driver, f"{base}/portal/endpoints/acme-billing", output / "portal-endpoint.png")
    shoot(driver, f"{base}/portal/dead-letters", output / "portal-dead-letters.png")


# -- the run ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-port", type=int, default=6395)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images")
    arguments = parser.parse_args()
    output: Path = arguments.output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hookline-shots-"))
    redis_url = f"redis://127.0.0.1:{arguments.redis_port}/0"
    console_port = free_port()
    env_settings = settings(redis_url, secrets.token_urlsafe(32), console_port)
    os.environ.update(env_settings)
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("CELERY_")} | {"PYTHONUNBUFFERED": "1"}

    if listening(arguments.redis_port):
        raise SystemExit(f"port {arguments.redis_port} is taken: pass --redis-port")
    processes = [start(["redis-server", "--port", str(arguments.redis_port), "--bind",
                        "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(work)],
                       env, work / "redis.log")]
    driver = None
    try:
        import redis

        wait(lambda: pings(redis.Redis.from_url(redis_url)), "redis-server")
        from examples.receiver import Receiver

        with Receiver(port=RECEIVER_PORT) as receiver:
            seed_endpoints(receiver)
            backfill_counts()
            backfill_health()
            processes.append(start(
                [sys.executable, "-m", "celery", "-A", "app", "worker", "-l", "info", "-P",
                 "threads", "-c", "8", "-n", "shots@%h", "--without-gossip", "--without-mingle",
                 "--without-heartbeat"], env, work / "worker.log"))
            wait(lambda: " ready." in (work / "worker.log").read_text(errors="replace"),
                 "the worker", timeout=60)
            send_traffic()
            break_billing()
            wait(lambda: dead_letter_count("nw-legacy") >= 18, "nw-legacy's dead letters")
            job_id = operate(receiver)
            processes.append(start(
                [sys.executable, "-c", "from hookline.cli import main; main()", "console",
                 "--address", "127.0.0.1", "--port", str(console_port)],
                env | {"HOOKLINE_CONSOLE_BASIC_AUTH": ":".join(OPERATOR)},
                work / "console.log"))
            base = f"http://127.0.0.1:{console_port}"
            wait(lambda: answers(base + "/"), "hookline console")
            driver = chromium(str(work / "profile"))
            time.sleep(8)  # the bulk replay a few entries in
            take_shots(driver, base, output, job_id)
    finally:
        if driver is not None:
            driver.quit()
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(work, ignore_errors=True)


def listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # not up yet
        return False


if __name__ == "__main__":
    main()
