"""The publishing side of Hookline's Redis channel: every push rings its queue's doorbell, and
``send_webhook``'s publish claims the event id in the step that pushes the message.

The doorbell is a list of wake-up tokens per queue, one pushed with every message (here, in
kombu's restore, and by the retry releaser): the consuming side (hookline/transport/redis.py)
blocks on it, so a message wakes one idle consumer of its queue, not all of them.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps

from hookline.core.config import settings
from hookline.store.connection import ring
from hookline.store.identity import CLAIM_HEADER, Claim, ClaimRefused, claim_keys, claims
from hookline.store.keys import doorbell_key
from hookline.transport.lua import CLAIM_PUSH


class PushingChannel(kombu_redis.Channel):
    """kombu's Redis channel whose pushes ring the doorbell and claim the event id."""

    #: claim_push.lua, registered on first use.
    _claim_push: Any = None

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        publish_batch = kwargs.get("_publish_batch")
        headers = message.get("headers") or {}
        digest = headers.get(CLAIM_HEADER)
        if digest and publish_batch is None:
            return self._put_claimed(queue, message, headers, digest)
        return self._put_message(queue, message, publish_batch, **kwargs)

    def _put_claimed(self, queue: str, message: Any, headers: dict[str, Any],
                     digest: str) -> None:
        """send_webhook's publish (``CLAIM_HEADER``): the event id claimed and the message
        pushed in one script when Hookline's state is this Redis, as it is by default;
        otherwise (a separate state Redis, a key prefix, a queue TTL) the claim first on the
        state Redis, then the push. Raises ClaimRefused, pushing nothing, when it is refused."""
        endpoint_id, event_id = headers["hookline_endpoint"], headers["hookline_event"]
        config = settings()
        expires = getattr(self, "_expires", None)
        if (self.global_keyprefix or (expires and queue in expires)
                or not config.broker_is_state):
            verdict = claims().claim(endpoint_id, event_id, digest)
            if verdict in (Claim.MISSING, Claim.CONFLICT):
                raise ClaimRefused(verdict)
            return self._put_message(queue, message, None)
        pri = self._get_message_priority(message, reverse=False)
        with self.conn_or_acquire() as client:
            if self._claim_push is None:
                self._claim_push = CLAIM_PUSH.register(client)
            reply = self._claim_push(
                client, **claim_keys(endpoint_id, event_id), queue=self._q_for_pri(queue, pri),
                doorbell=doorbell_key(queue), digest=digest, record_ttl=config.record_ttl,
                message=dumps(message))
        verdict = Claim(bytes_to_str(reply))
        if verdict in (Claim.MISSING, Claim.CONFLICT):
            raise ClaimRefused(verdict)
        return None

    def _put_message(self, queue: str, message: Any, publish_batch: Any,
                     **kwargs: Any) -> None:
        if self.global_keyprefix:
            return super()._put(queue, message, **kwargs)
        if publish_batch is not None:
            # kombu 5.7's batched publish (``create_publish_batch``); kombu 5.6 never passes it.
            super()._put(queue, message, **kwargs)
            publish_batch.add("lpush", doorbell_key(queue), "1")
            return None
        pri = self._get_message_priority(message, reverse=False)
        # Queue TTLs (x-expires) are kombu 5.7's; kombu 5.6 has no ``_expires``.
        expires = getattr(self, "_expires", None)
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            pipe.lpush(self._q_for_pri(queue, pri), dumps(message))
            if expires and queue in expires:
                for step in self.priority_steps:
                    pipe.pexpire(self._q_for_pri(queue, step), expires[queue])
            ring(pipe, queue)
            pipe.execute()
        return None

    def _restore(self, message: Any, leftmost: bool = False) -> None:
        """kombu's restore of one held message (``basic_recover``), for a records-set one
        too."""
        qos = self.qos
        if bytes_to_str(message.delivery_tag) in qos.ledger:
            qos.restore_by_tag(message.delivery_tag, leftmost=leftmost)
            return
        super()._restore(message, leftmost)

    def _do_restore_message(self, payload: Any, exchange: Any, routing_key: Any, pipe: Any,
                            leftmost: bool = False) -> None:
        super()._do_restore_message(payload, exchange, routing_key, pipe, leftmost)
        if not self.global_keyprefix:
            try:
                queues = self._lookup(exchange, routing_key)
            except self.connection_errors:
                raise
            except Exception:  # kombu logged it: nothing was restored to ring for
                return
            for queue in queues:
                ring(pipe, queue)
