-- Release due retries, earliest first, in one atomic step: several releasers never release a
-- retry twice and never lose one.
-- KEYS[1]  hookline:{schedule}:due
-- KEYS[2]  hookline:{schedule}:messages
-- KEYS[3]  hookline:{schedule}:meta
-- KEYS[4]  hookline:{schedule}:counts
-- KEYS[5]  the retry queue's list in the broker (same Redis) when ARGV[3] is 'push';
--          hookline:{schedule}:releasing (sorted set: retry id -> lease end) when 'claim'
-- KEYS[6]  the broker's doorbell stream ('push' only): idle consumers wake when it grows
-- ARGV[1]  most retries to release in this call
-- ARGV[2]  'push': most messages the retry queue may hold (retries wait here, not in the
--          queue, so first deliveries keep their share of the workers); 'claim': lease, ms
-- ARGV[3]  'push' (the broker is this Redis: push the messages onto its list) or 'claim' (the
--          broker is elsewhere: hand the messages to the caller, who pushes them and confirms)
-- Returns  {released, next_due_ms or -1, now_ms, message, message, ...}; messages only for 'claim'
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local mode = ARGV[3]
local room = tonumber(ARGV[1])
if mode == 'push' then
  room = math.min(room, tonumber(ARGV[2]) - redis.call('LLEN', KEYS[5]))
end
if mode == 'claim' then
  -- A releaser that claimed retries and died before confirming: they are due again.
  local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for _, id in ipairs(expired) do
    redis.call('ZREM', KEYS[5], id)
    redis.call('ZADD', KEYS[1], now, id)
  end
end
local reply = {0, -1, now}
if room > 0 then
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, room)
  for _, id in ipairs(ids) do
    local message = redis.call('HGET', KEYS[2], id)
    local meta = redis.call('HGET', KEYS[3], id)
    redis.call('ZREM', KEYS[1], id)
    if mode == 'push' then
      if message then
        redis.call('LPUSH', KEYS[5], message)
      end
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
      if meta then
        local endpoint = cjson.decode(meta)['endpoint_id']
        if redis.call('HINCRBY', KEYS[4], endpoint, -1) <= 0 then
          redis.call('HDEL', KEYS[4], endpoint)
        end
      end
    else
      redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), id)
      reply[#reply + 1] = id
      reply[#reply + 1] = message or ''
    end
    reply[1] = reply[1] + 1
  end
end
if mode == 'push' and reply[1] > 0 then
  redis.call('XADD', KEYS[6], 'MAXLEN', 1, '*', 'n', '1')
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head > 0 then
  reply[2] = tonumber(head[2])
end
return reply
