-- Set a delivery waiting for its endpoint's cap (admit.lua said 'capped'): its message leaves
-- the consuming worker's unacked records and joins the front of the endpoint's waiting list
-- (consume.lua takes it when the endpoint is back under its cap), holding no slot meanwhile.
-- KEYS[1]  records      the broker's unacked records
-- KEYS[2]  waiting      hookline:fair:waiting:<ep>, the endpoint's waiting list
-- KEYS[3]  waiting_set  hookline:fair:waiting, the set of endpoints with waiting deliveries
-- KEYS[4]  endpoint     hookline:{ep}:endpoint, the endpoint hash (inflight, max_in_flight,
--                       waiting)
-- KEYS[5]  doorbell     the delivery queue's doorbell
-- KEYS[6]  leases       hookline:{ep}:leases, the endpoint's attempts in flight
--                       (piece_leases.lua)
-- ARGV[1]  member       the message's member in KEYS[1]
-- ARGV[2]  entry        the waiting entry: the broker list it came from, a newline, the
--                       message
-- ARGV[3]  endpoint_id  the endpoint id
-- Returns  1 when set waiting; 0 when the member was gone (restored to another worker: the
--          fence), and nothing was written
--#include piece_clock.lua
--#include piece_leases.lua
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[4], 'waiting', '1', 'wake', '1')
redis.call('SADD', KEYS[3], ARGV[3])
local state = redis.call('HMGET', KEYS[4], 'inflight', 'max_in_flight')
local cap = tonumber(state[2]) or 0
if cap == 0 or leases_live(KEYS[6], KEYS[4], redis_now_ms(), state[1]) < cap then
  redis.call('LPUSH', KEYS[5], 'w')  -- an attempt ended meanwhile: take it now
end
return 1
