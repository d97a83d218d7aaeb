-- Confirm retries a releaser claimed (release.lua 'claim') and has published to a broker apart
-- from this Redis: each leaves the schedule, unless it was parked again since it was claimed
-- (its delivery already ran and was deferred or failed again: it is back in the due set), in
-- which case only the claim is dropped and the new park stays.
-- KEYS[1]    hookline:{schedule}:due
-- KEYS[2]    hookline:{schedule}:messages
-- KEYS[3]    hookline:{schedule}:meta
-- KEYS[4]    hookline:{schedule}:counts
-- KEYS[5]    hookline:{schedule}:releasing
-- KEYS[5+i]  hookline:{schedule}:by_endpoint:<endpoint id of ARGV[i]>
-- ARGV       the retry ids published
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
