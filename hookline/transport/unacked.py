"""The unacknowledged messages of Hookline's Redis broker: one sorted set, one command each way.

kombu records a message a worker holds twice: the record ``[message, exchange, routing key]``
in the ``unacked`` hash under its delivery tag, and the tag in the ``unacked_index`` sorted set
scored with the time it was taken (two writes on consume, two removals on the acknowledgement).
Here the record lives in the sorted set's member itself (``hookline.transport.records``), in a
sorted set of its own, ``<unacked_key>_records`` (``unacked_records``): consume.lua writes it with
one ZADD in the step that takes the message, the worker keeps the member it returned and the
acknowledgement removes it with one ZREM (:class:`QoS`).

**The sweep.** kombu's visibility-timeout sweep (``restore_visible``) is replaced by one that,
under kombu's mutex and at the same period, restores the overdue members of the records set
(``restore.lua``: push back where kombu would and ring the doorbell, only if the member is
still there) and then, exactly as kombu does, the overdue tags of kombu's index and hash.

**Rolling upgrades and mixed fleets.** Records written by a worker of an earlier Hookline
version or by kombu's stock transport stay in kombu's hash and index and are acknowledged by
whoever holds them (HDEL + ZREM by tag); the new sweep restores them only once overdue, with
kombu's own code. The records set is a key of its own, not kombu's index, because a worker
running kombu's sweep (an earlier version, the stock transport) would take a member of the
index for a tag without a hash record and drop it without restoring the message; it never
reads this set. A fleet still running such workers restores a dead new worker's messages only
through its new workers' sweeps.

What this process holds is kept in one :class:`~hookline.transport.ledger.Ledger` per
channel, one entry per message; kombu's own ``_delivered`` stays kombu's. A delivered event's
settle removes the member itself (``hookline.transport.ledger``): the acknowledgement then
sends nothing.
"""

from __future__ import annotations

import logging
from time import time
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads
from redis.exceptions import RedisError

from hookline.core.attempts import notify_when_waiting, waiting_on_receivers
from hookline.core.config import settings
from hookline.store.keys import WORKERS_LIVE_KEY, doorbell_key
from hookline.transport.ledger import Ledger
from hookline.transport.lua import RESTORE
from hookline.transport.malformed import dead_letter_text
from hookline.transport.records import member_owner, parse_member, records_key

logger = logging.getLogger("hookline")

#: Seconds between kombu 5.6's calls of the visibility-timeout sweep (fixed there; kombu 5.7
#: takes ``unacked_restore_interval``). See :meth:`QoS.restore_visible`.
_KOMBU_SWEEP_CALL_PERIOD = 10


def _nothing() -> None:
    """What the event loop is woken to run."""


class _Removed:
    """What :meth:`QoS._remove_from_indices` returns for a record already removed: a pipeline
    with nothing to send."""

    def execute(self) -> list[Any]:
        return []


#: Most records of one dead process restored per heartbeat (the rest at the next ones).
REAP_BATCH = 2000


def _orphaned() -> None:
    """A record this process no channel holds any more: its next beat looks for it."""
    from hookline.transport.liveness import process_liveness

    live = process_liveness(create=False)
    if live is not None:
        live.orphaned = True


def _live_owners(client: Any) -> set[str]:
    return {bytes_to_str(token) for token in client.zrange(WORKERS_LIVE_KEY, 0, -1)}


def _release_lease(member: bytes, owner: str) -> None:
    """The in-flight lease the dead owner's attempt held on the member's event, if any,
    released in Hookline's state (release_dead.lua), so the restored message goes at once."""
    parsed = parse_member(member)
    try:
        headers = loads(parsed[1])[0]["headers"] if parsed else {}
        endpoint_id, event_id = headers["hookline_endpoint"], headers["hookline_event"]
    except (ValueError, TypeError, KeyError, IndexError):
        return
    if not (isinstance(endpoint_id, str) and isinstance(event_id, str)):
        return
    from hookline.store.gates import Gate

    try:
        Gate.shared().release_dead(endpoint_id, event_id, f"{owner}-")
    except RedisError as exc:  # the lease runs out by itself; the message is back already
        logger.warning("broker.lease_release_failed endpoint_id=%s error=%s", endpoint_id,
                       type(exc).__name__)


class QoS(kombu_redis.QoS):
    """kombu's Redis QoS with the records set (module docstring). A message recorded by
    consume.lua has its entry in :attr:`ledger`; one recorded by kombu's own ``append`` (the
    transport's BRPOP fallback with a ``global_keyprefix``) keeps kombu's layout and code
    throughout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: What this channel holds with a records-set member, one entry per message.
        self.ledger = Ledger(self.channel)
        #: can_consume said no: the event loop stopped polling (see :meth:`room_freed`).
        self._starved = False
        #: :meth:`room_freed` is registered (once, at the first time without room; weakly, so
        #: a channel a reconnect replaced goes).
        self._listening = False

    @property
    def records_key(self) -> str:
        return records_key(self.channel.unacked_key)

    def can_consume(self) -> bool:
        """kombu's prefetch limit, and fewer than ``HOOKLINE_RUNNABLE_ATTEMPTS`` held messages
        that are not waiting on a receiver (hookline/core/attempts.py): the slots fill with
        attempts waiting on slow receivers, never with more runnable work than a core serves.

        Without room the event loop stops polling the queue and sleeps until something else
        wakes it (a timer, up to a second later): so when room comes back from a pool thread
        (an acknowledgement, an attempt starting to wait on its receiver), the loop is woken
        at once (:meth:`room_freed`). Against receivers that answer after a second, slots
        sat empty for a third of a second on average before."""
        room = self.can_consume_max_estimate()
        if room is None or room > 0:
            return True
        self._starved = True
        if not self._listening:
            self._listening = True
            notify_when_waiting(self.room_freed)
        return False

    def room_freed(self) -> None:
        """A slot may have freed: wake the event loop if it stopped polling for want of one
        (kombu's Hub.call_soon wakes it from another thread; kombu 5.6's has no waker, and
        the loop notices at its next tick, as before)."""
        if not self._starved:
            return
        self._starved = False
        hub = getattr(self.channel.connection, "hookline_hub", None)
        if hub is not None:
            hub.call_soon(_nothing)

    def can_consume_max_estimate(self) -> int | None:
        pcount = self.prefetch_count
        if not pcount:
            return None
        held = len(self._delivered) - len(self._dirty)
        runnable = held - waiting_on_receivers()
        return max(0, min(pcount - held, settings().runnable_attempts - runnable))

    @property
    def closed(self) -> bool:
        """The channel is closed (its connection gone): it restores nothing any more."""
        connection = self.channel.connection
        return connection is None or getattr(connection, "client", None) is None

    def held_members(self) -> set[bytes]:
        return self.ledger.members()

    def _records_of(self, client: Any, owner: str, taken_before: float = float("inf")
                    ) -> list[bytes]:
        """The records-set members of ``owner`` (a liveness token) taken before
        ``taken_before`` (Unix seconds), oldest taken first."""
        return [member for member in client.zrangebyscore(self.records_key, 0, taken_before)
                if member_owner(member) == owner]

    def restore_own(self, owner: str, held: set[bytes], older_than: float) -> int:
        """Restore the records of ``owner`` (this process) older than ``older_than`` seconds
        that no channel of this process holds (``held``), in the order :meth:`reap` keeps."""
        restored = 0
        with self.channel.conn_or_acquire() as client:
            for member in reversed(self._records_of(client, owner, time() - older_than)):
                if bytes(member) not in held:
                    restored += self.restore_member(client, member)
        return restored

    def reap(self, owner: str) -> tuple[int, int]:
        """Restore the messages a dead process (liveness token ``owner``) held, oldest taken
        first (each pushed back where it will be taken next, newest first), and release the
        in-flight leases its attempts held (release_dead.lua). Returns how many this call
        restored and how many of that owner's records are left (another reaper got them,
        or there were more than one call restores)."""
        restored = 0
        with self.channel.conn_or_acquire() as client:
            members = self._records_of(client, owner)
            for member in reversed(members[:REAP_BATCH]):
                # The lease first: once the message is back, a worker may take it at once.
                # (Only the dead owner's lease is released, so a racing reaper, or an attempt
                # already running on a restored copy, is never touched.)
                _release_lease(member, owner)
                if self.restore_member(client, member):
                    restored += 1
        return restored, max(0, len(members) - REAP_BATCH)

    def append(self, message: Any, delivery_tag: str) -> None:
        if self.ledger.accept(delivery_tag) is not None:
            # consume.lua already wrote the record: only the in-memory bookkeeping.
            virtual.QoS.append(self, message, delivery_tag)
            return
        super().append(message, delivery_tag)

    def remove_record(self, member: bytes) -> Any:
        """A pipeline (to ``execute()``) removing one records-set member."""
        with self.channel.conn_or_acquire() as client:
            return client.pipeline(transaction=False).zrem(self.records_key, member)

    def _remove_from_indices(self, delivery_tag: str, pipe: Any = None) -> Any:
        """The acknowledgement's removal of the record: one ZREM of its member. A record in
        kombu's layout is removed in one round trip without kombu's MULTI/EXEC, the hash
        entry first: a client dying between the two leaves an index entry without a record,
        which the sweep drops (kombu's ``restore_by_tag``), never a record no sweep would
        find. Inside kombu's restore transaction (``pipe`` given) its own order stands."""
        if pipe is not None:
            return super()._remove_from_indices(delivery_tag, pipe)
        self.room_freed()
        entry = self.ledger.release(delivery_tag)
        if entry is not None and entry.gone is not None:
            return _Removed()  # settled, fenced or set waiting: its member is gone already
        if entry is not None:
            return self.remove_record(entry.member)
        with self.channel.conn_or_acquire() as client:
            return (client.pipeline(transaction=False)
                    .hdel(self.unacked_key, delivery_tag)
                    .zrem(self.unacked_index_key, delivery_tag))

    def restore_by_tag(self, tag: Any, client: Any = None, leftmost: bool = False) -> None:
        """Put one message this channel holds back on its queue (a reject with requeue, the
        restore at close); kombu's transaction for a record in kombu's layout."""
        entry = self.ledger.entry(bytes_to_str(tag))
        if entry is None:
            super().restore_by_tag(tag, client, leftmost)
            return
        try:
            with self.channel.conn_or_acquire(client) as conn:
                self.restore_member(conn, entry.member, leftmost=leftmost)
        except RedisError:
            # Redis did not answer (paused, cut off): the record stays. Held by no channel
            # from now on, it is this process's heartbeat's to restore (Liveness.orphaned);
            # kept in this channel's ledger it would stay held for as long as the channel
            # lives (the soak saw two such events come back only when their worker died).
            self.ledger.release(entry.tag)
            self._delivered.pop(entry.tag, None)
            self.room_freed()
            _orphaned()
            raise
        self.ledger.release(entry.tag)

    def restore_unacked(self, client: Any = None) -> None:
        """Put this channel's unacknowledged messages back on their queues (on close).

        When the channel closes because Redis went away this fails (see
        ``Channel._create_client``); the messages are still recorded, so leaving them there
        loses nothing: the sweep puts them back after the visibility timeout. Swallowed here
        so that the rest of the channel's close still runs."""
        self._flush()  # acknowledged meanwhile: nothing to restore (kombu's would look)
        from hookline.transport.liveness import process_liveness

        live = process_liveness(create=False)
        if live is not None:
            live.watch_orphans()  # an acknowledgement may have been lost with the connection
        try:
            super().restore_unacked(client)
        except RedisError as exc:
            logger.warning("broker.restore_deferred messages=%d error=%s: restored by this "
                           "worker's heartbeat once Redis is back (or, if it dies, by "
                           "another's)", len(self._delivered), type(exc).__name__)
            self._delivered.clear()
            if live is not None:
                live.orphaned = True
        self.ledger.release_all()

    def restore_visible(self, start: int = 0, num: int | None = 10,
                        interval: int | None = None) -> None:
        """The visibility-timeout sweep: the overdue records of dead workers (and of live ones
        holding a message longer than the timeout) back on their queues, both layouts.

        kombu 5.7 passes ``interval`` (its ``unacked_restore_throttle``) and calls the sweep
        every ``unacked_restore_interval`` seconds. kombu 5.6 knows neither option: it calls
        the sweep every 10 s, and its own scanned Redis on every tenth call, so a dead
        worker's messages would come back only after up to ~100 s plus the visibility
        timeout. Without ``interval`` this scans on every Nth call, N making the same period
        from the two options (at least every call, i.e. every 10 s).

        With a ``global_keyprefix`` (kombu's BRPOP and records, see
        hookline/transport/redis.py) this is kombu's own sweep, at that period."""
        if interval is None:
            options = self.channel.connection.client.transport_options
            period = (options.get("unacked_restore_interval", 10)
                      * options.get("unacked_restore_throttle", 10))
            interval = max(1, round(period / _KOMBU_SWEEP_CALL_PERIOD))
        if self.channel.global_keyprefix:
            super().restore_visible(start, num, interval)
            return
        self._vrestore_count += 1
        if (self._vrestore_count - 1) % (interval or 1):
            return
        with self.channel.conn_or_acquire() as client:
            ceil = time() - self.visibility_timeout
            window = {"start": start, "num": num} if num else {}
            try:
                with kombu_redis.Mutex(client, self.unacked_mutex_key,
                                       self.unacked_mutex_expire):
                    overdue = client.zrangebyscore(self.records_key, 0, ceil, **window)
                    live = _live_owners(client) if overdue else set()
                    for member in overdue:
                        if member_owner(member) not in live:  # a live process keeps its own
                            self.restore_member(client, member)
                    # kombu's layout (earlier workers, the stock transport): kombu's code.
                    for tag in client.zrangebyscore(self.unacked_index_key, 0, ceil, **window):
                        kombu_redis.QoS.restore_by_tag(self, tag, client)
            except kombu_redis.MutexHeld:
                pass

    def restore_member(self, client: Any, member: bytes | str, *, leftmost: bool = False
                       ) -> bool:
        """Push the message of records-set ``member`` back where kombu's restore would (marked
        redelivered; ``leftmost``: taken last, kombu's reject with requeue) and ring its
        queue's doorbell, removing the member in the same step; nothing if another client
        removed it first. Returns whether it was restored."""
        parsed = parse_member(member)
        try:
            if parsed is None:
                raise ValueError("not a records-set member")
            payload, exchange, routing_key = loads(parsed[1])
        except (ValueError, TypeError) as exc:
            return self._drop_unreadable(client, member, exc)
        channel = self.channel
        try:
            payload["headers"]["redelivered"] = True
            payload["properties"]["delivery_info"]["redelivered"] = True
        except (KeyError, TypeError):
            pass
        try:
            queues = channel._lookup(exchange, routing_key)
        except channel.connection_errors:
            raise
        except Exception:  # kombu's restore: logged, and the record removed all the same
            logger.critical("Could not restore message: %r", payload, exc_info=True)
            queues = []
        priority = channel._get_message_priority(payload, reverse=False)
        pushed_to = [key for queue in queues
                     for key in (channel._q_for_pri(queue, priority), doorbell_key(queue))]
        return bool(RESTORE.run(client, records=self.records_key, queues=pushed_to,
                                member=member, message=dumps(payload),
                                push="LPUSH" if leftmost else "RPUSH"))

    def _drop_unreadable(self, client: Any, member: bytes | str, exc: Exception) -> bool:
        """A member that holds no message (written by hand): kept in the dead-letter queue,
        then removed, instead of failing every sweep."""
        text = bytes_to_str(member)
        if dead_letter_text(text, f"an unacked record that is not a kombu message: {exc}"):
            client.zrem(self.records_key, member)
        return False
