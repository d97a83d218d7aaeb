"""The broker's Lua scripts, the ones only the transport runs (this folder's ``.lua`` files;
their pieces here, or the store's in ``hookline/store/lua/``), and the contract of each: the
names of its KEYS and its ARGV, in order, as its header declares them
(``hookline.store.scripts``; ``tests/unit/test_lua_contracts.py`` checks the two agree).
"""

from __future__ import annotations

from hookline.store.lua import SCHEDULE
from hookline.store.scripts import Contract

#: This folder, where the loader finds these scripts.
FOLDER = __name__

CONSUME = Contract(
    "consume", folder=FOLDER,
    keys=f"records {SCHEDULE} wake waiting_set *queues *doorbells *endpoint_keys",
    args="now park_held max_total max_per_endpoint budget queue_count most owner slots "
         "dig_above look_all max_age *endpoints")
RESTORE = Contract("restore", folder=FOLDER, keys="records *queues",
                   args="member message push")
WAIT_SHARE = Contract("wait_share", folder=FOLDER,
                      keys="records waiting waiting_set endpoint doorbell leases",
                      args="member entry endpoint_id")
HEARTBEAT = Contract("heartbeat", folder=FOLDER, keys="live dead slots info clock",
                     args="token window_ms own_slots description register most_dead")
CLAIM_PUSH = Contract("claim_push", folder=FOLDER,
                      keys="endpoint record old_digest queue doorbell",
                      args="digest record_ttl message")

#: Every contract above: one per script of this folder (tests/unit/test_lua_contracts.py).
CONTRACTS = (CONSUME, RESTORE, WAIT_SHARE, HEARTBEAT, CLAIM_PUSH)
