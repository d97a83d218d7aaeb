-- Make one endpoint's in-flight count agree with what is really held (hookline/store/leases.py):
-- the leases that ran out leave, so do the ones the caller found no live process holds, and
-- the count is mended (piece_leases.lua). When deliveries wait for the endpoint's share or cap
-- and it has room now, a consumer is woken to take them ('w' on the doorbell, as settle.lua
-- rings), so a count mended here moves what waited behind it at once.
-- KEYS[1]     leases     hookline:{ep}:leases, the endpoint's leases
-- KEYS[2]     endpoint   hookline:{ep}:endpoint, the endpoint hash (inflight, max_in_flight,
--                        waiting)
-- KEYS[3]     doorbell?  (where the broker is this Redis) the delivery queue's doorbell
-- ARGV[1...]  *tokens    attempt tokens no live process holds: their leases leave
-- Returns  {the count before, the count after}
--#include piece_clock.lua
--#include piece_leases.lua
local state = redis.call('HMGET', KEYS[2], 'inflight', 'max_in_flight', 'waiting')
if #ARGV > 0 then
  redis.call('ZREM', KEYS[1], unpack(ARGV))
end
local before = tonumber(state[1]) or 0
local count = leases_live(KEYS[1], KEYS[2], redis_now_ms(), state[1])
local cap = tonumber(state[2]) or 0
if KEYS[3] and state[3] and (cap == 0 or count < cap) then
  redis.call('LPUSH', KEYS[3], 'w')
end
return {before, count}
