-- An ordered endpoint's line, moved from outside a delivery (hookline/store/ordering.py):
-- KEYS[1]  endpoint       hookline:{ep}:endpoint (its order_* keys are named from it:
--                          piece_order.lua)
-- KEYS[2]  doorbell       the delivery queue's doorbell
-- ARGV[1]  action         'advance': key ARGV[2]'s head, event ARGV[3], has gone for good
--                          (skipped by the 'skip' policy, or its dead letter discarded): the
--                          next of the line goes. Returns 1 when the head moved on, else 0.
--                          'release': key ARGV[2]'s line goes back onto its queues as it is,
--                          oldest at the consuming end, and the key has no head (the endpoint
--                          is no longer ordered, is disabled or removed: its workers deliver
--                          or dead-letter them as any other). Returns how many went back.
-- ARGV[2]  ordering_key   the ordering key
-- ARGV[3]  event_id?      ('advance' only) the head's event id
--#include piece_order.lua
local heads, _, lines = order_keys(KEYS[1])
local okey = ARGV[2]
if ARGV[1] == 'advance' then
  return order_advance(KEYS[1], okey, ARGV[3], KEYS[2])
end
local moved = 0
while true do
  local entry = redis.call('LPOP', lines .. okey)
  if not entry then
    break
  end
  local a = string.find(entry, '\n', 1, true)
  local b = string.find(entry, '\n', a + 1, true)
  local c = string.find(entry, '\n', b + 1, true)
  redis.call('LPUSH', string.sub(entry, b + 1, c - 1), string.sub(entry, c + 1))
  redis.call('LPUSH', KEYS[2], '1')
  moved = moved + 1
end
redis.call('HDEL', heads, okey)
if moved > 0 then
  redis.call('HINCRBY', KEYS[1], 'order_waiting', -moved)
end
return moved
