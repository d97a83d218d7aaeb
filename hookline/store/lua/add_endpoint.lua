-- Register an endpoint only if it does not exist yet, all its fields at once (so no reader
-- ever sees a half-written endpoint).
-- KEYS[1]     endpoint  hookline:{ep}:endpoint (hash)
-- ARGV[1...]  *fields   field, value, field, value, ...
-- Returns  1 if added, 0 if the endpoint exists already.
-- The hash holds the endpoint's gate state too: without a url it is no endpoint, and whatever
-- gate fields were left there (written after a remove) are not the new endpoint's.
if redis.call('HEXISTS', KEYS[1], 'url') == 1 then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
