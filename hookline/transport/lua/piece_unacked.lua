-- Piece (included with "--#include piece_unacked.lua"): the unacknowledged records consume.lua
-- writes. A message taken is one member of a sorted set, scored with the time taken: the
-- consuming process's liveness token and a space (nothing without one), the delivery tag as a
-- JSON string, then kombu's record [message, exchange, routing key] (one ZADD; kombu keeps
-- the record in a hash and the tag in an index, two writes and two removals). The caller keeps
-- the member to remove it on the acknowledgement (ZREM); the restore sweep reads the message
-- back out of it (hookline/transport/records.py, unacked.py).
-- unacked_of(records, now, owner)  `records`: the sorted set; `now`: the time taken, in the
--   worker's clock (kombu's restore sweep compares with that clock); `owner`: the liveness
--   token ('' for none). Returns a table:
--   record(key, item, tag, info)  record `item`, taken from list `key` (its delivery tag and
--                                 delivery info given), scored a step after the one before
--                                 in this call, so the records keep the order they were
--                                 taken in
--   taken                         list key, member, list key, member, ... of those recorded
--   count()                       how many were recorded
local function unacked_of(records, now, owner)
  local unacked = {taken = {}}
  local taken = unacked.taken
  if owner ~= '' then
    owner = owner .. ' '
  end

  function unacked.record(key, item, tag, info)
    local member = owner .. cjson.encode(tag) .. '[' .. item .. ',' ..
      cjson.encode(tostring(info['exchange'] or '')) .. ',' ..
      cjson.encode(tostring(info['routing_key'] or '')) .. ']'
    redis.call('ZADD', records, now + #taken * 0.00005, member)
    taken[#taken + 1] = key
    taken[#taken + 1] = member
  end

  function unacked.count()
    return #taken / 2
  end

  return unacked
end
