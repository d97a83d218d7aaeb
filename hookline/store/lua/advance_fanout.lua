-- Move a fan-out's cursor forward after a batch of its deliveries was enqueued; never back
-- (two fan-out tasks of one event, after a redelivery, may both run: the further one counts).
-- At the end the payload is dropped (every delivery carries its own copy): the record keeps
-- what 'hookline event show' and a republish need.
-- KEYS[1]  published  hookline:{app:<id>}:published:<event>
-- ARGV[1]  cursor     the new cursor
-- ARGV[2]  total      the total (receivers)
-- ARGV[3]  now        now, Unix seconds
-- Returns  the cursor now recorded (0 when the record is gone: expired).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local cursor = tonumber(redis.call('HGET', KEYS[1], 'cursor') or '0')
local moved = tonumber(ARGV[1])
if moved > cursor then
  cursor = moved
  redis.call('HSET', KEYS[1], 'cursor', cursor)
end
if cursor >= tonumber(ARGV[2]) and redis.call('HEXISTS', KEYS[1], 'payload') == 1 then
  redis.call('HDEL', KEYS[1], 'payload')
  redis.call('HSET', KEYS[1], 'finished_at', ARGV[3])
end
return cursor
