-- Piece (included with "--#include piece_lines.lua"; needs piece_order.lua): an ordered
-- endpoint's delivery, as consume.lua meets it, goes on only as its key's head. Before the
-- holds (piece_holding.lua): a paused or open endpoint's line keeps its order, and only its
-- head waits in the schedule.
-- in_line(hash, headers, event, key, item)  `hash`: the endpoint hash's key (its order_*
--   keys are named from it); `headers`: the message's (hookline_okey, the ordering key,
--   else the endpoint's own; hookline_seq, a sequence it carries); `event`: its event id;
--   `key`, `item`: the list it came from and the message. Returns true when it is its key's
--   head (or becomes it: the key had none), false when it joined the end of its key's line
--   instead, to go when the deliveries before it have gone.
local function in_line(hash, headers, event, key, item)
  local okey = headers['hookline_okey']
  if type(okey) ~= 'string' or okey == '' then
    okey = headers['hookline_endpoint']  -- the default key: the endpoint itself
  end
  local heads, seqs, lines = order_keys(hash)
  local head = redis.call('HGET', heads, okey)
  if order_is_head(head, event) then
    return true
  end
  local seq = order_sequence(seqs, okey, headers['hookline_seq'])
  if not head then
    redis.call('HSET', heads, okey, event .. '\n' .. seq)
    return true
  end
  redis.call('RPUSH', lines .. okey, event .. '\n' .. seq .. '\n' .. key .. '\n' .. item)
  redis.call('HINCRBY', hash, 'order_waiting', 1)
  return false
end
