-- Remove retries from the schedule (released to a separate broker, or dead-lettered because
-- their endpoint was disabled, removed or gone).
-- KEYS[1]  hookline:{schedule}:due
-- KEYS[2]  hookline:{schedule}:messages
-- KEYS[3]  hookline:{schedule}:meta
-- KEYS[4]  hookline:{schedule}:counts
-- KEYS[5]  hookline:{schedule}:releasing
-- ARGV     retry ids
-- Returns  how many were still there.
local removed = 0
for _, id in ipairs(ARGV) do
  local meta = redis.call('HGET', KEYS[3], id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('HDEL', KEYS[2], id)
  if meta then
    redis.call('HDEL', KEYS[3], id)
    local endpoint = cjson.decode(meta)['endpoint_id']
    if redis.call('HINCRBY', KEYS[4], endpoint, -1) <= 0 then
      redis.call('HDEL', KEYS[4], endpoint)
    end
    removed = removed + 1
  end
end
return removed
