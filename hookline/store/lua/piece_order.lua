-- An ordered endpoint's lines (hookline/core/ordering.py), shared by consume.lua, settle.lua,
-- admit.lua and order.lua. Per endpoint, beside its hash and in its slot (the keys are named
-- from the hash's key: hookline:{ep}:endpoint -> hookline:{ep}:order_heads, ...):
--   order_heads        hash: ordering key -> '<event id>\n<sequence>' of the key's head, the
--                      one delivery of the key that may be out (on a queue, in flight, in
--                      the retry schedule, or dead-lettered and blocking the key)
--   order_seq          hash: ordering key -> the last sequence number given in that key
--   order_line:<key>   list, oldest first: the key's deliveries waiting behind its head, each
--                      '<event id>\n<sequence>\n<queue list>\n<message>'; they hold no slot
--   the hash's order_waiting field counts the deliveries in all its lines
local function order_keys(endpoint_hash)
  local prefix = string.sub(endpoint_hash, 1, #endpoint_hash - #'endpoint')
  return prefix .. 'order_heads', prefix .. 'order_seq', prefix .. 'order_line:'
end

-- Whether `head` (an order_heads value) is event `event`'s.
local function order_is_head(head, event)
  return head ~= nil and head ~= false and string.sub(head, 1, #event + 1) == event .. '\n'
end

-- The sequence number of a delivery entering its key's line: the one it carries (a replay
-- keeps its own), else the key's next.
local function order_sequence(seqs, okey, carried)
  local given = tonumber(carried)
  if given and given > 0 then
    return given
  end
  return redis.call('HINCRBY', seqs, okey, 1)
end

-- Key `okey`'s head `event` has gone for good (delivered, skipped, discarded): the next
-- delivery of its line becomes the head and goes to the consuming end of its queue (the next
-- one taken), with a wake-up token on `doorbell`; with none left the key has no head. Nothing
-- happens unless `event` is the head. Returns 1 when the head moved on, else 0.
local function order_advance(endpoint_hash, okey, event, doorbell)
  local heads, _, lines = order_keys(endpoint_hash)
  if not order_is_head(redis.call('HGET', heads, okey), event) then
    return 0
  end
  local entry = redis.call('LPOP', lines .. okey)
  if not entry then
    redis.call('HDEL', heads, okey)
    return 1
  end
  local a = string.find(entry, '\n', 1, true)
  local b = string.find(entry, '\n', a + 1, true)
  local c = string.find(entry, '\n', b + 1, true)
  redis.call('HSET', heads, okey, string.sub(entry, 1, b - 1))
  redis.call('RPUSH', string.sub(entry, b + 1, c - 1), string.sub(entry, c + 1))
  redis.call('LPUSH', doorbell, '1')
  redis.call('HINCRBY', endpoint_hash, 'order_waiting', -1)
  return 1
end
