-- Register an endpoint only if it does not exist yet, all its fields at once (so no reader
-- ever sees a half-written endpoint).
-- KEYS[1]  hookline:{ep}:endpoint (hash)
-- ARGV     field, value, field, value, ...
-- Returns  1 if added, 0 if the endpoint exists already.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
