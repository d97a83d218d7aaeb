-- Pause or resume an endpoint, in its two hashes at once.
-- KEYS[1]  endpoint  hookline:{ep}:endpoint: paused_at (ms of Redis time) while paused, for
--                    listings; pauses: JSON [[start_ms, end_ms], ...], the latest ARGV[2]
--                    pauses (the engine leaves paused time out of max_age)
-- KEYS[2]  breaker   the hash holding the endpoint's breaker (keys.breaker_key: the
--                    endpoint's own hash since the gates moved there): paused_at, what
--                    piece_held.lua reads (the endpoint is held, why 'paused')
-- ARGV[1]  action    'pause' or 'resume'
-- ARGV[2]  kept      most pause periods kept
-- Returns  {'missing'} when there is no such endpoint;
--          {'paused', since_ms, changed}: paused since since_ms; changed is 1 when this call
--            paused it, 0 when it was paused already;
--          {'resumed', since_ms, now_ms}: the pause this call ended began at since_ms ('' when
--            the endpoint was not paused).
--#include piece_clock.lua
if redis.call('HEXISTS', KEYS[1], 'url') == 0 then
  return {'missing'}
end
local since = redis.call('HGET', KEYS[2], 'paused_at')
local now = redis_now_ms()
if ARGV[1] == 'pause' then
  if since then
    return {'paused', since, 0}
  end
  redis.call('HSET', KEYS[2], 'paused_at', now)
  redis.call('HSET', KEYS[1], 'paused_at', now)
  return {'paused', tostring(now), 1}
end
if not since then
  redis.call('HDEL', KEYS[1], 'paused_at')
  return {'resumed', '', tostring(now)}
end
redis.call('HDEL', KEYS[2], 'paused_at')
redis.call('HDEL', KEYS[1], 'paused_at')
local ok, pauses = pcall(cjson.decode, redis.call('HGET', KEYS[1], 'pauses') or '[]')
if not ok or type(pauses) ~= 'table' then
  pauses = {}
end
pauses[#pauses + 1] = {tonumber(since), now}
local keep = tonumber(ARGV[2])
local kept = {}
for i = math.max(1, #pauses - keep + 1), #pauses do
  kept[#kept + 1] = pauses[i]
end
redis.call('HSET', KEYS[1], 'pauses', cjson.encode(kept))
return {'resumed', since, tostring(now)}
