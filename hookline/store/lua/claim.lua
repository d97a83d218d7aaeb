-- Bind an event id to its content where it is enqueued (send_webhook), in the same round trip
-- as the check that its endpoint exists. admit.lua applies the same rule in the worker.
-- KEYS[1]  hookline:{ep}:endpoint        endpoint hash
-- KEYS[2]  hookline:{ep}:digest:<event>  the content digest the event id is bound to
-- ARGV[1]  this event's content digest (event type + canonical payload)
-- ARGV[2]  lifetime of a new binding, seconds (the done marker's)
-- ARGV[3]  '1' to bind a free id now, '0' only to check (an event enqueued later, on commit)
-- Returns  'missing' (no such endpoint), 'conflict' (bound to another content), 'same' (bound
--          to this content already: a repeated send) or 'new'.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'missing'
end
local bound = redis.call('GET', KEYS[2])
if bound then
  if bound ~= ARGV[1] then
    return 'conflict'
  end
  return 'same'
end
if ARGV[3] == '1' then
  redis.call('SET', KEYS[2], ARGV[1], 'EX', tonumber(ARGV[2]))
end
return 'new'
