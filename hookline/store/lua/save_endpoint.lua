-- Save an endpoint's fields only if the endpoint still exists (a concurrent remove wins).
-- KEYS[1]     endpoint  hookline:{ep}:endpoint (hash)
-- ARGV[1...]  *fields   field, value, field, value, ...
-- Returns  1 if saved, 0 if the endpoint does not exist.
if redis.call('HEXISTS', KEYS[1], 'url') == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
