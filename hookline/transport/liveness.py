"""Worker liveness: a dead process's messages back in seconds, a live one's never taken.

kombu's Redis transport knows only the visibility timeout: an unacknowledged message comes back
when it has been held for longer than that (5 minutes by default), whether its worker died or
is merely slow. Here each consuming process proves it is alive instead:

- **Registration and heartbeat.** The first consume of a process registers a random token in
  the broker's Redis (``hookline:workers:live``, scored with Redis time) with its slots, and a
  thread of its own (never a task slot: a busy process keeps beating) beats every
  ``HOOKLINE_HEARTBEAT_INTERVAL`` seconds (2). Every message the process takes is recorded
  unacknowledged with that token as the owner (the records set member, records.py),
  so what each process holds is known.
- **Declared dead.** A process whose latest beat is older than ``HOOKLINE_LIVENESS_WINDOW``
  (6 s) is declared dead by the next beat of any live process (heartbeat.lua, atomic: exactly
  one declares it). The declaring process then restores the dead one's messages, oldest taken
  first, each exactly once (restore.lua removes the record in the step that pushes it back),
  and releases the in-flight leases its attempts held (release_dead.lua), so the messages are
  sent at once. A gap in everybody's beats (Redis unreachable) is not taken for the death of
  all: nobody is declared dead until a whole window after beats resume.
- **Fencing.** A process declared dead that comes back (a long pause, a partition) finds its
  token gone at its next beat and registers anew. Until then its late writes are refused in
  Redis: a settle or an acknowledgement of a message whose record was restored finds the record
  gone (settle.lua refuses the whole outcome), and a message it took under the old token is not
  attempted (:meth:`Liveness.current`).
- **Last resort.** The visibility-timeout sweep still runs, for records of processes that never
  registered (earlier Hookline versions, kombu's stock transport); it leaves live owners' alone.

Only the Redis broker has this; RabbitMQ redelivers a dead consumer's messages itself when its
connection drops.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from hookline.core.logs import log_event
from hookline.store.connection import bounded_options, redis_for
from hookline.store.keys import (
    WORKERS_CLOCK_KEY,
    WORKERS_DEAD_KEY,
    WORKERS_INFO_KEY,
    WORKERS_LIVE_KEY,
    WORKERS_SLOTS_KEY,
)
from hookline.transport.lua import HEARTBEAT

logger = logging.getLogger("hookline")

#: Keys of heartbeat.lua, by their names.
REGISTRY_KEYS = {"live": WORKERS_LIVE_KEY, "dead": WORKERS_DEAD_KEY, "slots": WORKERS_SLOTS_KEY,
                 "info": WORKERS_INFO_KEY, "clock": WORKERS_CLOCK_KEY}
#: Most processes one beat declares dead, and most dead ones it names back to restore.
DECLARE_BATCH = 16



@dataclass(frozen=True)
class Registration:
    """One registration of this process: its token (the owner of the records it writes and
    the prefix of its attempt tokens) and a generation counted from 1 (a new one after each
    fencing)."""

    token: str
    generation: int


class Holder(Protocol):
    """What holds this process's messages: a consuming channel's QoS (unacked.py)."""

    @property
    def closed(self) -> bool: ...

    def reap(self, owner: str) -> tuple[int, int]:
        """Restore a dead process's messages: how many restored, how many left."""

    def held_members(self) -> set[bytes]:
        """The records of the messages it holds now."""

    def restore_own(self, owner: str, held: set[bytes], older_than: float) -> int:
        """Restore this process's records that none of its channels holds (left by a
        channel closed while Redis was away): how many."""


#: Beats between two looks for this process's own records that no channel holds any more.
ORPHAN_EVERY = 30


class Liveness:
    """The heartbeat of one consuming process (one per process: :func:`process_liveness`).

    ``client``: the broker's Redis (bytes replies). ``interval`` and ``window``: seconds
    between beats and of silence before a process is dead. ``slots``: how many messages it may
    hold at once (the worker's prefetch limit)."""

    def __init__(self, client: Any, *, interval: float, window: float, slots: int) -> None:
        self.client = client
        self.interval = interval
        self.window = window
        self.slots = slots
        self._script = HEARTBEAT.register(client)
        self._registration = Registration(secrets.token_hex(8), 1)
        self._registered = False
        self._announced = 0
        #: monotonic time of the latest beat Redis accepted (0: none yet)
        self._beat_at = 0.0
        self._beaten = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._holders: list[Holder] = []
        self._beats = 0
        #: A channel closed without putting its messages back (Redis was away): look for
        #: this process's orphaned records at the next beat.
        self.orphaned = False
        #: Until then (monotonic), look at every beat (:meth:`watch_orphans`).
        self._orphan_watch = 0.0
        #: the latest beat's view: slots of all live processes, how many are live
        self.total_slots = slots
        self.live = 1
        #: Set when Redis is back after beats failed, or the registration was lost with its
        #: data (fenced): the counts Redis keeps for this process need mending
        #: (hookline.worker.reconciler waits on it).
        self.resumed = threading.Event()
        self._failing = False

    # -- the registration --------------------------------------------------------------------

    def current(self) -> Registration:
        return self._registration

    def fresh(self) -> bool:
        """Whether this process's latest beat was accepted within three quarters of a window:
        it cannot have been declared dead since (a paused process, just resumed, is not fresh
        until its next beat tells it where it stands). A beat late by a second or so (a busy
        interpreter) leaves it fresh."""
        return self._beat_at > 0 and time.monotonic() - self._beat_at < self.window * 0.75

    def wait_fresh(self, timeout: float) -> bool:
        """Block (up to ``timeout`` seconds) until :meth:`fresh`; beats now if the thread is
        not running."""
        if self.fresh():
            return True
        if self._thread is None:
            self.beat()
            return self.fresh()
        deadline = time.monotonic() + timeout
        with self._beaten:
            while not self.fresh():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._beaten.wait(left)
        return True

    def add_holder(self, holder: Holder) -> None:
        """A consuming channel's QoS. One that replaces a closed channel (a reconnect, a
        Sentinel failover) starts the watch for orphans (:meth:`watch_orphans`): kombu restores
        a closing channel's messages only when it still held some, so the close alone cannot
        be relied on to start it, and a write lost with the old connection (an
        acknowledgement, a reject's requeue) may have left a record nobody holds."""
        if holder not in self._holders:
            replaced = any(h.closed for h in self._holders)
            self._holders = [*(h for h in self._holders if not h.closed), holder]
            if replaced:
                self.watch_orphans()

    def _open_holders(self) -> list[Holder]:
        return [holder for holder in self._holders if not holder.closed]

    # -- beating ---------------------------------------------------------------------------

    def start(self) -> Liveness:
        """Register (one beat now) and beat from a daemon thread of its own from then on."""
        if self._thread is None:
            self.beat()
            self._thread = threading.Thread(target=self._run, name="hookline-heartbeat",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and leave the registry (a clean shutdown: nothing to restore)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.interval + 2)
        try:
            pipe = self.client.pipeline(transaction=False)
            token = self._registration.token
            pipe.zrem(WORKERS_LIVE_KEY, token).hdel(WORKERS_SLOTS_KEY, token)
            pipe.hdel(WORKERS_INFO_KEY, token).execute()
        except Exception as exc:  # Redis away: the others declare it dead after the window
            log_event("worker.unregister_failed", level=logging.WARNING,
                      error=type(exc).__name__)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception as exc:  # Redis away: try again next interval
                self._failing = True
                log_event("worker.heartbeat_failed", level=logging.WARNING,
                          error=type(exc).__name__)
            else:
                if self._failing:
                    self._failing = False
                    self.resumed.set()

    def beat(self) -> None:
        """One heartbeat: register if not yet, learn of a fencing, restore dead processes'
        messages."""
        registration = self._registration
        slots = self.slots
        reply = self._script(
            **REGISTRY_KEYS, token=registration.token, window_ms=round(self.window * 1000),
            own_slots="" if self._registered and slots == self._announced else slots,
            description=self._describe(), register="0" if self._registered else "1",
            most_dead=DECLARE_BATCH)
        status = _text(reply[0])
        if status == "fenced":
            self._fenced(registration)
            return
        self._registered, self._announced = True, slots
        self.total_slots, self.live = max(1, int(reply[1])), max(1, int(reply[2]))
        with self._beaten:
            self._beat_at = time.monotonic()
            self._beaten.notify_all()
        for dead in reply[3:]:
            self._reap(_text(dead))
        self._beats += 1
        if (self.orphaned or time.monotonic() < self._orphan_watch
                or self._beats % ORPHAN_EVERY == 0):
            self._restore_orphans()

    def _fenced(self, old: Registration) -> None:
        """Declared dead while alive (paused past the window): the messages it held were
        given to others. Register anew; what was taken under the old token is not attempted
        and its late writes are refused (module docstring)."""
        self._registration = Registration(secrets.token_hex(8), old.generation + 1)
        self._registered = False
        self._beat_at = 0.0
        self.resumed.set()
        log_event("worker.fenced", level=logging.WARNING, token=old.token,
                  new_token=self._registration.token,
                  detail="no longer registered (declared dead after a pause, or the registry "
                         "was lost); registered anew")
        self.beat()

    def _reap(self, token: str) -> None:
        holders = self._open_holders()
        if not holders:
            return
        restored, remaining = holders[-1].reap(token)  # any channel reaches the same Redis
        if not remaining:
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(WORKERS_DEAD_KEY, token).hdel(WORKERS_INFO_KEY, token)
            if restored:
                pipe.hincrby(WORKERS_CLOCK_KEY, "restored", restored)
            pipe.execute()
        elif restored:
            self.client.hincrby(WORKERS_CLOCK_KEY, "restored", restored)
        if restored:
            log_event("worker.restored", level=logging.WARNING, dead=token, messages=restored,
                      by=self._registration.token)

    def watch_orphans(self) -> None:
        """A channel closed (a reconnect, a Sentinel failover): an acknowledgement lost with
        it leaves a record nobody holds. Look for such records at every beat for a while."""
        self._orphan_watch = time.monotonic() + 3 * self.window

    def _restore_orphans(self) -> None:
        """This process's records that none of its channels holds (a channel closed while
        Redis was away could not put them back): restored, as a dead process's would be."""
        holders = self._open_holders()
        if not holders:
            return
        held: set[bytes] = set()
        for holder in holders:
            held |= holder.held_members()
        # Older than a beat: a record consume.lua wrote is on its way to a channel for a
        # few milliseconds before that channel holds it.
        restored = holders[-1].restore_own(self._registration.token, held,
                                           max(2.0, self.interval))
        self.orphaned = False
        if restored:
            self.client.hincrby(WORKERS_CLOCK_KEY, "restored", restored)
            log_event("worker.restored", level=logging.WARNING, dead=self._registration.token,
                      messages=restored, by=self._registration.token,
                      detail="this worker's own, left by a channel closed while Redis was away")

    def _describe(self) -> str:
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                           "started": round(time.time(), 3), "slots": self.slots})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_lock = threading.Lock()
_process: tuple[int, Liveness] | None = None


def process_liveness(*, slots: int = 0, create: bool = True) -> Liveness | None:
    """This process's :class:`Liveness` (made and started on first use by a consuming
    channel; again after a fork). ``slots``: the consumer's prefetch limit, taken the first
    time. None when ``create`` is false and there is none."""
    global _process
    entry = _process
    if entry is not None and entry[0] == os.getpid():
        return entry[1]
    if not create:
        return None
    from hookline.core.config import settings

    with _lock:
        entry = _process
        if entry is not None and entry[0] == os.getpid():
            return entry[1]
        config = settings()
        client = redis_for(config.broker_url, decode_responses=False, **bounded_options())
        liveness = Liveness(client, interval=config.heartbeat_interval,
                            window=config.liveness_window, slots=max(1, slots))
        _process = (os.getpid(), liveness)
    liveness.start()
    return liveness


def stop_process_liveness() -> None:
    """Leave the registry at a clean shutdown (the worker's, after its consumer stopped)."""
    global _process
    entry = _process
    if entry is not None and entry[0] == os.getpid():
        _process = None
        entry[1].stop()


def registry(client: Any) -> dict[str, Any]:
    """What ``hookline stats`` shows of the registry: live processes (token, slots, latest
    beat's age in seconds, what each says of itself), processes declared dead whose messages
    are being restored, and the counters."""
    now = float(client.time()[0])
    pipe = client.pipeline(transaction=False)
    pipe.zrange(WORKERS_LIVE_KEY, 0, -1, withscores=True)
    pipe.hgetall(WORKERS_SLOTS_KEY).hgetall(WORKERS_INFO_KEY)
    pipe.zcard(WORKERS_DEAD_KEY).hgetall(WORKERS_CLOCK_KEY)
    live, slots, info, dead, clock = pipe.execute()
    slots = {_text(k): int(v) for k, v in slots.items()}
    info = {_text(k): _text(v) for k, v in info.items()}
    clock = {_text(k): _text(v) for k, v in clock.items()}
    processes = []
    for token, beat in live:
        token = _text(token)
        try:
            about = json.loads(info.get(token, "{}"))
        except ValueError:
            about = {}
        processes.append({"token": token, "slots": slots.get(token, 0),
                          "beat_age": round(max(0.0, now - beat / 1000.0), 1),
                          "host": about.get("host"), "pid": about.get("pid")})
    return {"live": processes, "dead_restoring": int(dead),
            "declared_dead": int(clock.get("declared", 0)),
            "restored": int(clock.get("restored", 0))}
