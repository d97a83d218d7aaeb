-- Confirm retries claimed by release.lua ('claim') once the releaser pushed them to the broker:
-- they leave the schedule, unless one was parked again meanwhile (a worker took the pushed
-- message and deferred it before this confirmation): that retry is a new one, and stays.
-- KEYS[1]    hookline:{schedule}:due
-- KEYS[2]    hookline:{schedule}:messages
-- KEYS[3]    hookline:{schedule}:meta
-- KEYS[4]    hookline:{schedule}:counts
-- KEYS[5]    hookline:{schedule}:releasing
-- KEYS[5+i]  hookline:{schedule}:by_endpoint:<endpoint id of ARGV[i]>
-- (one shard's keys: {schedule:<n>} on a Redis Cluster)
-- ARGV       retry ids
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
