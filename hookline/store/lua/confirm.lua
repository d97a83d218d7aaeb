-- Confirm retries claimed by release.lua ('claim') once the releaser pushed them to the broker:
-- they leave the schedule, unless one was parked again meanwhile (a worker took the pushed
-- message and deferred it before this confirmation): that retry is a new one, and stays.
-- KEYS[1]     due         hookline:{schedule}:due
-- KEYS[2]     messages    hookline:{schedule}:messages
-- KEYS[3]     meta        hookline:{schedule}:meta
-- KEYS[4]     counts      hookline:{schedule}:counts
-- KEYS[5]     releasing   hookline:{schedule}:releasing
-- KEYS[6...]  *indexes    hookline:{schedule}:by_endpoint:<endpoint id of ARGV[i]>, the i-th
--                         of them
-- (one shard's keys: {schedule:<n>} on a Redis Cluster)
-- ARGV[1...]  *retry_ids  the retry ids
-- Returns    how many left the schedule.
--#include piece_park.lua
local schedule = {due = KEYS[1], messages = KEYS[2], meta = KEYS[3], counts = KEYS[4]}
local removed = 0
for i, id in ipairs(ARGV) do
  redis.call('ZREM', KEYS[5], id)
  if not redis.call('ZSCORE', KEYS[1], id) and forget_retry(schedule, KEYS[5 + i], id) then
    removed = removed + 1
  end
end
return removed
