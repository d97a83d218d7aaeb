-- Put claimed retries (release.lua 'claim') back in the due set instead of publishing them:
-- their endpoint is held, so they wait in the schedule until it may take them.
-- KEYS[1]     due         hookline:{schedule}:due
-- KEYS[2]     releasing   hookline:{schedule}:releasing
-- ARGV[1...]  *delays     pairs: retry id, delay in milliseconds from now (Redis time)
-- Returns  how many were still claimed (and so were put back); one whose claim ended or that
--          left the schedule meanwhile is left as it is.
--#include piece_clock.lua
local now = redis_now_ms()
local deferred = 0
for i = 1, #ARGV, 2 do
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[i + 1]), ARGV[i])
    deferred = deferred + 1
  end
end
return deferred
