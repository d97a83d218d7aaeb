-- Record a published event and its fan-out, once: the event (type, payload, channels,
-- deadline), the receivers fixed now, and the fan-out's cursor (how many receivers have had
-- their delivery enqueued). All of an application's keys share its hash tag: one slot.
-- KEYS[1]     app        hookline:{app:<id>}:app, the application (must exist)
-- KEYS[2]     published  hookline:{app:<id>}:published:<event>, the published event's
--                        record (a hash)
-- ARGV[1]     digest     the event's content digest (type, payload, channels)
-- ARGV[2]     ttl        lifetime of the record, seconds
-- ARGV[3...]  *fields    field, value, ... of a new record (cursor '0' among them)
-- Returns  {'missing'} (no such application), {'conflict'} (the id was published with other
--          content), {'same', cursor, total} (published already: nothing new is recorded) or
--          {'new', '0', total}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'missing'}
end
local found = redis.call('HMGET', KEYS[2], 'digest', 'cursor', 'total')
if found[1] then
  if found[1] ~= ARGV[1] then
    return {'conflict'}
  end
  return {'same', found[2], found[3]}
end
redis.call('HSET', KEYS[2], 'digest', ARGV[1], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return {'new', '0', redis.call('HGET', KEYS[2], 'total')}
