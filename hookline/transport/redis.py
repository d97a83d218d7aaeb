"""kombu's Redis transport, made so that a worker dying at any instant loses no message.

Selected in the Celery settings (``broker_transport``); the URL stays ``redis://...`` and the
keys, message format, acknowledgement and visibility-timeout restore are kombu's own, so
workers and producers using the stock transport can share the queues ("mixed fleets" below).

**The window it closes.** kombu consumes with ``BRPOP``, which takes the message off its list,
and only then, in a second round trip, records it in the ``unacked`` hash from which a dead
worker's messages are restored. A worker killed between the two (a whole container killed, or
the reply still in the socket while the event loop is busy) loses that message for good: the
fault run lost 2 of 3,000 events this way. Here one Lua script
(``hookline/transport/lua/consume.lua``) takes the message and records it in the same atomic step,
so a message is always on its list or in the unacked records, and the restore sweep brings
back whatever a dead worker held. The record is one member of a sorted set, written with one
command and removed by the acknowledgement with one (``hookline/transport/unacked.py``: the
sweep, and records of kombu's own layout left by earlier workers; ``records.py``: the format).

**Blocking without taking, waking one.** A script cannot block, so when every queue is empty
the consumer blocks on its queues' doorbells (``BLMPOP ... COUNT 2``; ``BLPOP`` before Redis
7): a list of wake-up tokens per queue, one pushed with every message (this transport's
publish, kombu's restore, the retry releaser). Redis hands a token to exactly one blocked
client, so a message wakes one idle consumer of its queue, not all of them: Redis work per
delivery stays flat as idle workers are added, and a consumer of another queue (``celery
inspect``'s replies) is not handed it. The script that finds every queue empty also empties
their doorbells in the same atomic step, so a token left there is for a message pushed after
it: a push between the script and the block wakes it at once, and stale tokens (messages
busy consumers took) wake nobody. A consumer woken with a single token takes one message and
waits again (a message pushed meanwhile left its token); with two it consumes until the
queues are empty.

**Mixed fleets.** A producer on the stock transport (or anything pushing onto the lists by
hand) pushes no token; its messages are still taken, at the latest after the
blocking wait's timeout (kombu's ``brpop_timeout``, 1 s). With a ``global_keyprefix`` this
transport falls back to kombu's BRPOP.

**Not messages.** An item on a queue's list that is not a kombu message (garbage pushed by
hand or by a broken producer) is kept in the dead-letter queue (reason ``malformed``) and only
then removed from its list, instead of stopping the worker with "Unrecoverable error".
"""

from __future__ import annotations

import hashlib
import json
import logging
from time import monotonic, time
from typing import TYPE_CHECKING, Any

from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError

from hookline.core.config import settings
from hookline.core.envelope import decode_task
from hookline.core.logs import log_event
from hookline.core.messages import QUEUES
from hookline.store.event_log import EventLog
from hookline.store.keys import (
    FAIR_WAITING_KEY,
    breaker_key,
    doorbell_key,
    entry_shard,
    fair_waiting_key,
    leases_key,
    schedule_endpoint_key,
    schedule_shards,
)
from hookline.store.lua import schedule
from hookline.transport.lua import CONSUME
from hookline.transport.push import PushingChannel
from hookline.transport.unacked import QoS

if TYPE_CHECKING:
    from hookline.transport.liveness import Liveness

# A process that only publishes (a web process's send_webhook) loads this module as its
# broker transport, but never consumes: what only consuming needs (the unacked records, the
# liveness heartbeats, the dead-letter queue, the metrics) is imported where it is used.

#: consume.lua's retry schedule keys (the one shard a broker on this Redis parks in), by their
#: names.
_SCHEDULE = {**schedule(schedule_shards(1)[0]), "wake": schedule_shards(1)[0].wake}


_HOOKLINE_QUEUES = frozenset(QUEUES)
#: The doorbell token settle.lua pushes when an endpoint with waiting deliveries finished an
#: attempt: the consumer woken by it looks at every endpoint's waiting deliveries.
FAIR_TOKEN = b"w"
#: Most deliveries to held endpoints consume.lua parks in one call (bounds its run time).
PARK_BATCH = 200
#: Most messages one consume call takes (fewer when the consumer has fewer free prefetch
#: slots): behind a backlog, one round trip, and one wake-up of the event loop, brings several.
CONSUME_BATCH = 16
#: Most endpoints whose breaker and schedule-index keys a consume call passes (the endpoints
#: of the messages taken most recently). consume.lua takes every key through KEYS; a message
#: for another endpoint makes it answer 'need', and the next call passes that one's keys too.
HELD_ENDPOINTS = 64

#: What a consume call's parked deliveries are told as: ``(task id, endpoint id, event id,
#: reason, countdown seconds)`` each (hookline/transport/amqp.py, ``Connection.on_parked``).
Parked = tuple[str, str, str, str, float]


def _parked(entries: list[Any]) -> list[Parked]:
    """Log and count the deliveries consume.lua parked for held endpoints: each is a deferral,
    the same as a worker would have logged."""
    from hookline.core import metrics

    parked = []
    for entry in entries:
        endpoint_id, event_id, reason, countdown_ms, task_id = loads(bytes_to_str(entry))
        countdown = round(int(float(countdown_ms)) / 1000.0, 3)
        log_event("delivery.deferred", endpoint_id=endpoint_id, event_id=event_id,
                  reason=reason, countdown=countdown, by="consumer")
        metrics.count_deferral(endpoint_id, reason)
        parked.append((str(task_id), endpoint_id, event_id, reason, countdown))
    return parked


def _held_rows(client: Any, parked: list[Parked]) -> list[tuple[str, str, str]]:
    """``(endpoint id, event id, event type)`` of parked deliveries for the event log, the
    type read from the message each left in the schedule (one HMGET per shard; '' when it
    cannot be read: the row keeps the type it has)."""
    count = settings().state_shards
    ids = [f"{endpoint_id}/{event_id}" for _, endpoint_id, event_id, _, _ in parked]
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.hget(schedule_shards(count)[entry_shard(entry_id, count)].messages, entry_id)
    rows = []
    for entry_id, message in zip(ids, pipe.execute(), strict=True):
        endpoint_id, _, event_id = entry_id.partition("/")
        try:
            event_type = str(decode_task(bytes_to_str(message))[1][1]) if message else ""
        except (ValueError, KeyError, IndexError, TypeError):
            event_type = ""
        rows.append((endpoint_id, event_id, event_type))
    return rows


class Channel(PushingChannel):
    """Hookline's consuming side of kombu's Redis channel (module docstring); its publishing
    side is :class:`~hookline.transport.push.PushingChannel`'s."""

    QoS = QoS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: Endpoints whose keys consume.lua gets (insertion order: least recently needed first).
        self._endpoints: dict[str, None] = {}
        #: Their breaker and schedule-index keys, in that order: built when the set changes
        #: (a 'need'), not on every consume call.
        self._endpoint_keys: list[str] = []
        #: The command pending on the consuming connection is (or is about to be) the
        #: blocking wait on the doorbell: a consume found every queue empty, or took the one
        #: message a push woke this consumer for.
        self._waiting = False
        #: The last wait ended with a single token: a push woke this consumer for one
        #: message, so once it is taken, wait again rather than look at the queues once more.
        self._single_wake = False
        #: The broker is Redis 7 or later (the wait is BLMPOP ... COUNT 2); None: not known.
        self._blmpop: bool | None = None
        self._shared_client: tuple[Any, Any] | None = None
        #: Look at every endpoint's waiting deliveries in the next consume call (the last one
        #: said some wait, or a doorbell token said one may go now).
        self._fair_look = True
        #: The current wait is only for a heartbeat to say this process is still live.
        self._stale = False
        super().__init__(*args, **kwargs)
        if not self.global_keyprefix:
            self._load_script()  # now, rather than on the first NOSCRIPT reply

    def _create_client(self, asynchronous: bool = False) -> Any:
        """One client per connection pool, not a new one per call: kombu builds a fresh
        ``redis.Redis`` (costly in redis-py 8) for every ack and every published event. A
        client on a pool is thread-safe; the consuming connection (``asynchronous``) keeps
        kombu's own.

        On a channel closed because Redis went away (a task that ran across a reconnect
        acknowledges on it, or its close restores), kombu 5.7 fails with ``AttributeError``
        on the vanished connection details and Celery stops the worker ("Unrecoverable
        error"). A connection error is what kombu's and Celery's callers handle: the message
        stays recorded as unacknowledged and the sweep restores it after the visibility
        timeout (the idempotency gate stops a second send if it was delivered)."""
        if asynchronous:
            return super()._create_client(asynchronous=True)
        connection = self.connection
        if connection is None or connection.client is None:
            raise RedisConnectionError("the broker channel is closed")
        pool = self.pool
        shared = self._shared_client
        if shared is None or shared[0] is not pool:
            shared = self._shared_client = (pool, super()._create_client())
        return shared[1]

    # -- consuming -------------------------------------------------------------------------

    def _brpop_start(self, timeout: Any = None) -> None:
        if self.global_keyprefix:
            return super()._brpop_start(timeout)
        if timeout is None:
            timeout = self.brpop_timeout
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        connection = self.client.connection
        if self._waiting:
            # Block until a push leaves a token (or the timeout, for pushes that leave none),
            # then consume again. Up to two tokens: two say that more than one message
            # waits (see _brpop_read).
            block = round(timeout, 3) if timeout else 0
            if self._blmpop is None:
                try:
                    with self.conn_or_acquire() as client:
                        version = str(client.info("server")["redis_version"])
                except ResponseError:  # INFO refused (renamed, ACL): BLPOP works everywhere
                    version = "0"
                self._blmpop = int(version.split(".")[0]) >= 7
            bells = [doorbell_key(queue) for queue in queues]
            command: list[Any] = (["BLMPOP", block, len(bells), *bells, "LEFT", "COUNT", 2]
                                  if self._blmpop else ["BLPOP", *bells, block])
        else:
            keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps
                    for queue in queues]
            bells = [doorbell_key(queue) for _ in self.priority_steps for queue in queues]
            config = settings()
            live = self._liveness()
            if live is not None and not live.fresh():
                # Paused past most of the liveness window (or not registered): this process
                # may have been declared dead. Take nothing until a heartbeat says where it
                # stands (a short wait on the doorbells instead).
                self._waiting, self._stale = True, True
                return self._brpop_start(min(timeout, 0.2))
            park_held = config.broker_is_state
            endpoints = list(self._endpoints) if park_held else []
            endpoint_keys = self._endpoint_keys if park_held else []
            slots = live.total_slots if live is not None and park_held else 0
            dig_above = (live.live * min(config.runnable_attempts, live.slots)
                         if live is not None else 0)
            named_keys, args = CONSUME.keys_and_args(
                records=self.qos.records_key, **_SCHEDULE, waiting_set=FAIR_WAITING_KEY,
                queues=keys, doorbells=bells, endpoint_keys=endpoint_keys,
                now=repr(time()), park_held="1" if park_held else "0",
                max_total=config.schedule_max, max_per_endpoint=config.schedule_max_per_endpoint,
                budget=PARK_BATCH, queue_count=len(keys), most=self._batch(),
                owner=live.current().token if live is not None else "", slots=slots,
                dig_above=dig_above, look_all="1" if self._fair_look else "0",
                max_age=config.retry_policy.max_age, endpoints=endpoints)
            command = ["EVALSHA", CONSUME.sha, len(named_keys), *named_keys, *args]
        self._in_poll = connection
        # Read by kombu 5.7's check of the consuming connection; unused by kombu 5.6.
        self._brpop_sent_at = monotonic()  # type: ignore[assignment, unused-ignore]
        connection.send_command(*command)

    def _brpop_read(self, **options: Any) -> Any:
        if self.global_keyprefix:
            return self._brpop_read_stock(**options)
        waited = self._waiting
        try:
            try:
                reply = self.client.parse_response(
                    self.client.connection, "BLMPOP" if waited else "EVALSHA", **options)
            except NoScriptError:
                self._load_script()
                raise kombu_redis.Empty() from None
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
        finally:
            self._in_poll = None  # type: ignore[assignment, unused-ignore]
            # kombu 5.7 flushes pending streaming re-authentication here, while the consuming
            # connection is idle; kombu 5.6 has no such step.
            flush_reauth = getattr(self, "_flush_brpop_reauth", None)
            if flush_reauth is not None:
                flush_reauth()
        if waited and self._stale:
            self._stale = False
            raise kombu_redis.Empty()
        if waited:
            # Woken: look at the queues again. One token: a push woke this consumer for one
            # message; once it is taken the queues are most likely empty, and a message
            # pushed meanwhile has left its token, so wait again at once (a consume call
            # less per message at low rates). Two tokens, or none (the timeout: pushes that
            # leave none, kombu's stock transport): consume until the queues are empty.
            self._waiting = False
            tokens = [] if reply is None else (reply[1] if self._blmpop else [reply[1]])
            self._single_wake = len(tokens) == 1
            if FAIR_TOKEN in tokens:
                # An endpoint with waiting deliveries finished an attempt (settle.lua).
                self._fair_look, self._single_wake = True, False
            raise kombu_redis.Empty()
        kind = bytes_to_str(reply[0])
        self._fair_look = reply[1] in (b"1", "1")
        taken = 2 * int(reply[2]) if kind in ("message", "last") else 0
        self._report_parked(reply[4:] if kind == "bad" else reply[3 + taken:])
        if taken:
            return self._deliver_taken(reply[3:3 + taken], last=kind == "last")
        if kind == "empty":
            self._waiting = True
            self._single_wake = False
            raise kombu_redis.Empty()
        if kind == "more":
            raise kombu_redis.Empty()  # parked a batch of held deliveries: look again at once
        if kind == "need":
            # The next message is for an endpoint whose keys were not passed: pass them (the
            # least recently needed endpoint makes room) and look again at once.
            self._endpoints.pop(bytes_to_str(reply[2]), None)
            self._endpoints[bytes_to_str(reply[2])] = None
            while len(self._endpoints) > HELD_ENDPOINTS:
                del self._endpoints[next(iter(self._endpoints))]
            self._endpoint_keys = [key for endpoint in self._endpoints for key in
                                   (breaker_key(endpoint), schedule_endpoint_key(endpoint),
                                    fair_waiting_key(endpoint), leases_key(endpoint))]
            raise kombu_redis.Empty()
        # 'bad'
        self._drop_bad_item(bytes_to_str(reply[2]), bytes_to_str(reply[3]))
        raise kombu_redis.Empty()

    def _report_parked(self, entries: list[Any]) -> None:
        """Deliveries parked by this consume call: logged and counted, then told to whoever
        listens on this channel's connection (the worker's consumer registers there: Flower
        hears they wait for a retry, hookline/worker/consumer.py)."""
        if not entries:
            return
        parked = _parked(entries)
        try:  # the event log's rows: held
            EventLog(self.client).record_held(_held_rows(self.client, parked))
        except RedisError as exc:
            log_event("event_log.failed", level=logging.WARNING, error=type(exc).__name__)
        listener = getattr(self.connection.client, "parked_listener", None)
        if listener is not None:
            listener(parked)

    def _liveness(self) -> Liveness | None:
        """This process's heartbeat (registered on its first consume), with this channel's
        reaper; None with a ``global_keyprefix`` (kombu's own records, restored by the
        visibility timeout)."""
        if self.global_keyprefix or not _HOOKLINE_QUEUES.intersection(self.active_queues):
            return None  # (a `celery inspect` waiting for replies is no worker)
        from hookline.transport.liveness import process_liveness

        slots = self.qos.prefetch_count or 1
        live = process_liveness(slots=slots)
        if live is not None:
            live.add_holder(self.qos)
            if slots > live.slots:  # Celery sets the prefetch limit after the first consume
                live.slots = live.total_slots = slots
        return live

    def _batch(self) -> int:
        """How many messages the next consume call may take: one after a single wake-up (a
        push woke this consumer for one message), else as many as the prefetch limit leaves
        room for, at most CONSUME_BATCH (kombu starts a consume only when there is room)."""
        if self._single_wake:
            return 1
        room = self.qos.can_consume_max_estimate()
        return CONSUME_BATCH if room is None else max(1, min(CONSUME_BATCH, room))

    def _deliver_taken(self, taken: list[Any], *, last: bool) -> bool:
        """Hand the messages one consume call took (``[list key, member, ...]``) to their
        consumers, in order. Each is recorded unacknowledged already; should handing one over
        fail, the ones after it go back on their queue at once rather than wait for the
        visibility timeout. ``last``: the queues ran empty after them (consume.lua emptied
        the doorbells), so the next wait can block at once."""
        from hookline.transport.records import parse_member

        messages = []
        for key, member in zip(taken[::2], taken[1::2], strict=True):
            # The member is kept as Redis sent it: the acknowledgement removes these bytes.
            tag, record = parse_member(member)  # type: ignore[misc]  # consume.lua wrote it
            messages.append((tag, member, loads(record)[0],
                             bytes_to_str(key).rsplit(self.sep, 1)[0]))
        if self._single_wake or last:
            self._single_wake = False
            self._waiting = True
        ledger = self.qos.ledger
        for index, (tag, member, message, dest) in enumerate(messages):
            self._queue_cycle.rotate(dest)
            entry = ledger.take(tag, member)  # held from now on (QoS.append accepts it)
            try:
                self.connection._deliver(message, dest)
            except BaseException:
                with self.conn_or_acquire() as client:  # the next one ends up to be taken first
                    for _, rest, _, _ in reversed(messages[index + 1:]):
                        self.qos.restore_member(client, rest)
                raise
            finally:
                if not entry.accepted:
                    # Delivered to a no-ack consumer (or to none): it is done with, as kombu's
                    # own BRPOP would have it; do not restore it later.
                    ledger.release(tag)
                    self.qos.remove_record(member).execute()
        return True

    def _brpop_read_stock(self, **options: Any) -> Any:
        from hookline.transport.malformed import dead_letter_text

        try:
            return super()._brpop_read(**options)
        except json.JSONDecodeError as exc:
            # BRPOP already took the item off the list: keep it, then carry on polling.
            dead_letter_text(str(exc.doc), f"not a broker message: {exc.msg}")
            raise kombu_redis.Empty() from None

    def _load_script(self) -> None:
        with self.conn_or_acquire() as client:
            client.script_load(CONSUME.text())

    def _drop_bad_item(self, key: str, item: str) -> None:
        from hookline.transport.malformed import dead_letter_text

        digest = hashlib.sha1(item.encode("utf-8", "replace")).hexdigest()[:20]
        # Kept first, then removed: a worker dying in between leaves it on the list, to be
        # kept again (same id, so the same dead letter) by the next consumer.
        if dead_letter_text(item, "not a broker message (not a kombu JSON envelope)",
                            task_id=f"raw-{digest}"):
            with self.conn_or_acquire() as client:
                client.lrem(key, -1, item)


class Transport(kombu_redis.Transport):
    Channel = Channel

    #: The worker's event loop (kombu's Hub), once registered: the QoS wakes it when a slot
    #: frees while the consumer waits for one (hookline/transport/unacked.py,
    #: ``QoS.room_freed``).
    hookline_hub: Any = None

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        self.hookline_hub = loop
        super().register_with_event_loop(connection, loop)
