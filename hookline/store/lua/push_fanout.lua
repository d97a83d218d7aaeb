-- Enqueue one batch of a fan-out's deliveries and move its cursor, in one atomic step, when
-- the broker is this Redis (the default set-up): a batch is either on the queue and counted,
-- or neither, so a crash enqueues no delivery twice. A fan-out task that finds the cursor
-- moved since it read it (a redelivered twin ran meanwhile) pushes nothing.
-- KEYS[1]     published  hookline:{app:<id>}:published:<event>, the published event's record
-- KEYS[2]     queue      the delivery queue's list in the broker
-- KEYS[3]     doorbell   the delivery queue's doorbell: wake-up tokens, one per message (at
--                        most 64)
-- ARGV[1]     cursor     the cursor the messages start at
-- ARGV[2]     total      the total (receivers)
-- ARGV[3]     now        now, Unix seconds
-- ARGV[4...]  *messages  the messages, in receiver order
-- Returns  the cursor now recorded (0 when the record is gone: expired); equal to ARGV[1]
--          plus the number of messages when they were pushed.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local cursor = tonumber(redis.call('HGET', KEYS[1], 'cursor') or '0')
if cursor ~= tonumber(ARGV[1]) then
  return cursor
end
local count = #ARGV - 3
for i = 4, #ARGV, 500 do
  redis.call('LPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
local tokens = {}
for i = 1, math.min(count, 64) do
  tokens[i] = '1'
end
if count > 0 then
  redis.call('LPUSH', KEYS[3], unpack(tokens))
end
cursor = cursor + count
redis.call('HSET', KEYS[1], 'cursor', cursor)
if cursor >= tonumber(ARGV[2]) then
  redis.call('HDEL', KEYS[1], 'payload')
  redis.call('HSET', KEYS[1], 'finished_at', ARGV[3])
end
return cursor
