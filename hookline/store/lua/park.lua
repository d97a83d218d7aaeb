-- Park a retry in the durable retry schedule, due `countdown` milliseconds from now (Redis time).
-- KEYS[1]  hookline:{schedule}:due       sorted set: retry id -> due time (ms)
-- KEYS[2]  hookline:{schedule}:messages  hash: retry id -> broker message, ready to push
-- KEYS[3]  hookline:{schedule}:meta      hash: retry id -> JSON {endpoint_id, ...}
-- KEYS[4]  hookline:{schedule}:counts    hash: endpoint id -> retries scheduled
-- KEYS[5]  hookline:{schedule}:wake      list: pushed when the earliest due time moves earlier
-- ARGV[1]  retry id (<endpoint id>/<event id>: a second copy of an event replaces the first)
-- ARGV[2]  countdown, milliseconds
-- ARGV[3]  broker message
-- ARGV[4]  meta JSON
-- ARGV[5]  endpoint id
-- ARGV[6]  most retries scheduled in all
-- ARGV[7]  most retries scheduled for one endpoint
-- Returns  {'parked', due_ms} or {'full', 'total'|'endpoint', count}
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local due = now + tonumber(ARGV[2])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local total = redis.call('ZCARD', KEYS[1])
  if total >= tonumber(ARGV[6]) then
    return {'full', 'total', total}
  end
  local count = tonumber(redis.call('HGET', KEYS[4], ARGV[5])) or 0
  if count >= tonumber(ARGV[7]) then
    return {'full', 'endpoint', count}
  end
  redis.call('HINCRBY', KEYS[4], ARGV[5], 1)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[1], due, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
if #head == 0 or due < tonumber(head[2]) then
  -- Due before everything else: wake a sleeping releaser so it does not oversleep.
  redis.call('LPUSH', KEYS[5], due)
  redis.call('LTRIM', KEYS[5], 0, 15)
end
return {'parked', due}
