-- Remove retries from the schedule (released to a separate broker, or dead-lettered because
-- their endpoint was disabled, removed or gone).
-- KEYS[1]     due         hookline:{schedule}:due
-- KEYS[2]     messages    hookline:{schedule}:messages
-- KEYS[3]     meta        hookline:{schedule}:meta
-- KEYS[4]     counts      hookline:{schedule}:counts
-- KEYS[5]     releasing   hookline:{schedule}:releasing
-- KEYS[6...]  *indexes    hookline:{schedule}:by_endpoint:<endpoint id of ARGV[i]>, the i-th
--                         of them
-- ARGV[1...]  *retry_ids  the retry ids
-- Returns    how many were still there.
--#include piece_park.lua
local schedule = {due = KEYS[1], messages = KEYS[2], meta = KEYS[3], counts = KEYS[4]}
local removed = 0
for i, id in ipairs(ARGV) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[5], id)
  if forget_retry(schedule, KEYS[5 + i], id) then
    removed = removed + 1
  end
end
return removed
