-- Bind an event id to its content where it is enqueued (send_webhook), in the same round trip
-- as the check that its endpoint exists. admit.lua applies the same rule in the worker.
-- KEYS[1]  hookline:{ep}:endpoint          endpoint hash
-- KEYS[2]  hookline:{ep}:delivery:<event>  the event's delivery record (piece_record.lua)
-- KEYS[3]  hookline:{ep}:digest:<event>    Hookline 0.2's binding, honoured
-- ARGV[1]  this event's content digest (event type + canonical payload)
-- ARGV[2]  lifetime of a new delivery record, seconds
-- ARGV[3]  '1' to bind a free id now, '0' only to check (an event enqueued later, on commit)
-- Returns  'missing' (no such endpoint), 'conflict' (bound to another content), 'same' (bound
--          to this content already: a repeated send) or 'new'.
--#include piece_record.lua
if redis.call('HEXISTS', KEYS[1], 'url') == 0 then
  return 'missing'
end
local strings = redis.call('MGET', KEYS[2], KEYS[3])
local state, rest = read_record(strings[1])
local bound = state['d'] or strings[2]
if bound then
  if bound ~= ARGV[1] then
    return 'conflict'
  end
  return 'same'
end
if ARGV[3] == '1' then
  state['d'] = ARGV[1]
  redis.call('SET', KEYS[2], record_text(state, rest), 'EX', tonumber(ARGV[2]))
end
return 'new'
