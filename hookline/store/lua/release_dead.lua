-- Release the in-flight lease a dead process's attempt held on one event, so the restored
-- message is sent at once instead of waiting for the lease to run out, and give back the
-- endpoint's in-flight count that attempt took (admit.lua). Only a lease whose token starts
-- with the dead process's prefix is touched: an attempt of a live process keeps its own.
-- KEYS[1]  record    hookline:{ep}:delivery:<event>, the event's delivery record
--                    (piece_record.lua)
-- KEYS[2]  endpoint  hookline:{ep}:endpoint, the endpoint hash (its 'inflight' count)
-- KEYS[3]  leases    hookline:{ep}:leases, the endpoint's leases (piece_leases.lua)
-- ARGV[1]  prefix    the dead process's attempt-token prefix
-- Returns  1 when a lease was released, else 0
--#include piece_record.lua
local text = redis.call('GET', KEYS[1])
local state, rest = read_record(text)
local holder = state['t']
if type(holder) ~= 'string' or string.sub(holder, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
state['t'], state['lu'] = nil, nil
redis.call('SET', KEYS[1], record_text(state, rest), 'KEEPTTL')
-- The count goes down with the lease (one that ran out left the set, and the count, already).
if redis.call('ZREM', KEYS[3], holder) == 1 then
  local inflight = tonumber(redis.call('HGET', KEYS[2], 'inflight')) or 0
  if inflight > 0 then
    redis.call('HINCRBY', KEYS[2], 'inflight', -1)
  end
end
return 1
