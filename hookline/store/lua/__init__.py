"""The store's Lua scripts (this folder's ``.lua`` files) and the contract of each: the names of
its KEYS and its ARGV, in order, as its header declares them (``hookline.store.scripts``;
``tests/unit/test_lua_contracts.py`` checks the two agree). The broker's scripts, which only
the transport runs, are in ``hookline/transport/lua/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hookline.store.scripts import Contract

if TYPE_CHECKING:
    from hookline.store.keys import ScheduleKeys

#: The schedule's keys every schedule script takes first, in this order (``schedule``).
SCHEDULE = "due messages meta counts"

ADD_ENDPOINT = Contract("add_endpoint", keys="endpoint", args="*fields")
SAVE_ENDPOINT = Contract("save_endpoint", keys="endpoint", args="*fields")
RESEAL_ENDPOINT = Contract("reseal_endpoint", keys="endpoint", args="*changes")
PAUSE_ENDPOINT = Contract("pause_endpoint", keys="endpoint breaker", args="action kept")

ADMIT = Contract(
    "admit", keys="endpoint record old_done old_digest leases doorbell?",
    args="token lease_ms max_starts starts_ttl rate_slot read_timeout_ms digest record_ttl "
         "ordering_key event_id")
SETTLE = Contract(
    "settle", keys="endpoint record history leases doorbell records?",
    args="token outcome record_ttl reason retry_after_ms breaker_threshold cooldown_ms "
         "max_cooldown_ms attempt_record event_id letter last_error history_attempts "
         "history_ttl recent_attempts digest now_ms history_in_record member acknowledge "
         "ordering_key log_prefix log_shard_prefix endpoint_id event_type attempt_number "
         "status log_age_ms log_rows")
RELEASE_DEAD = Contract("release_dead", keys="record endpoint leases", args="prefix")
RECONCILE_LEASES = Contract("reconcile_leases", keys="leases endpoint doorbell?",
                            args="*tokens")
HOLD = Contract("hold", keys="breaker")
CLAIM = Contract("claim", keys="endpoint record old_digest", args="digest record_ttl bind")

PARK = Contract(
    "park", keys=f"{SCHEDULE} wake index",
    args="retry_id countdown_ms message meta_json endpoint_id max_total max_per_endpoint")
RELEASE = Contract("release", keys=f"{SCHEDULE} release_to doorbell? *indexes",
                   args="most limit mode *candidates")
UNPARK = Contract("unpark", keys=f"{SCHEDULE} releasing *indexes", args="*retry_ids")
CONFIRM = Contract("confirm", keys=f"{SCHEDULE} releasing *indexes", args="*retry_ids")
DEFER_CLAIMED = Contract("defer_claimed", keys="due releasing", args="*delays")

ORDER = Contract("order", keys="endpoint doorbell", args="action ordering_key event_id?")
LOG_EVENT = Contract(
    "log_event", keys="slot",
    args="mode endpoint_prefix shard_prefix endpoint_id event_id letter event_type attempts "
         "status now age_ms most_rows was_letter? was_type?")

PUBLISH_EVENT = Contract("publish_event", keys="app published", args="digest ttl *fields")
ADVANCE_FANOUT = Contract("advance_fanout", keys="published", args="cursor total now")
PUSH_FANOUT = Contract("push_fanout", keys="published queue doorbell",
                       args="cursor total now *messages")


def schedule(shard: ScheduleKeys) -> dict[str, str]:
    """``shard``'s keys every schedule script takes first, by their names (:data:`SCHEDULE`)."""
    return {"due": shard.due, "messages": shard.messages, "meta": shard.meta,
            "counts": shard.counts}


#: Every contract above: one per script of this folder (tests/unit/test_lua_contracts.py).
CONTRACTS = (ADD_ENDPOINT, SAVE_ENDPOINT, RESEAL_ENDPOINT, PAUSE_ENDPOINT, ADMIT, SETTLE,
             RELEASE_DEAD, RECONCILE_LEASES, HOLD, CLAIM, PARK, RELEASE, UNPARK, CONFIRM,
             DEFER_CLAIMED, ORDER, LOG_EVENT, PUBLISH_EVENT, ADVANCE_FANOUT, PUSH_FANOUT)
