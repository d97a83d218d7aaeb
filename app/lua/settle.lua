-- Record the outcome of an admitted attempt: idempotency, breaker and Retry-After in one trip.
-- KEYS[1]  hookline:{ep}:endpoint
-- KEYS[2]  hookline:{ep}:done:<event>
-- KEYS[3]  hookline:{ep}:lease:<event>
-- KEYS[4]  hookline:{ep}:starts:<event>
-- KEYS[5]  hookline:{ep}:breaker
-- ARGV[1]  token of the attempt
-- ARGV[2]  outcome: 'delivered', 'rejected' (the receiver answered, no retry), 'failed'
--          (retryable: counts toward the breaker), 'throttled' (429: retryable, but the
--          receiver is up, so not a breaker failure) or 'gone' (410: disable the endpoint)
-- ARGV[3]  lifetime of the done marker, seconds
-- ARGV[4]  reason stored on the endpoint when the outcome is 'gone'
-- ARGV[5]  Retry-After in milliseconds (capped by the caller), 0 for none
-- ARGV[6]  consecutive failures that open the breaker
-- ARGV[7]  first cool-down, milliseconds
-- ARGV[8]  longest cool-down, milliseconds
-- Returns  {held, transition}: held is 1 if this attempt still held its lease; transition is
--          'opened' or 'closed' when this outcome changed the breaker's state, else ''.
local outcome = ARGV[2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local transition = ''

if outcome == 'delivered' then
  redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[3]))
elseif outcome == 'gone' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'enabled', '0', 'disabled_reason', ARGV[4])
end

local breaker = redis.call('HMGET', KEYS[5], 'state', 'failures', 'cooldown_ms', 'probe_token',
                           'blocked_until')
local state = breaker[1] or 'closed'
if outcome == 'failed' then
  local failures = (tonumber(breaker[2]) or 0) + 1
  if state == 'half_open' and breaker[4] == ARGV[1] then
    local cooldown = math.min(math.max((tonumber(breaker[3]) or 0) * 2, tonumber(ARGV[7])),
                              tonumber(ARGV[8]))
    redis.call('HSET', KEYS[5], 'state', 'open', 'failures', failures, 'cooldown_ms', cooldown,
               'open_until', now + cooldown, 'opened_at', now)
    redis.call('HDEL', KEYS[5], 'probe_until', 'probe_token')
    transition = 'opened'
  elseif state == 'closed' and failures >= tonumber(ARGV[6]) then
    redis.call('HSET', KEYS[5], 'state', 'open', 'failures', failures, 'cooldown_ms', ARGV[7],
               'open_until', now + tonumber(ARGV[7]), 'opened_at', now)
    transition = 'opened'
  else
    redis.call('HSET', KEYS[5], 'failures', failures)
  end
elseif outcome == 'delivered' or outcome == 'rejected' or outcome == 'throttled' then
  -- The receiver answered: it is up. A half-open breaker closes; a closed one forgets.
  if state == 'half_open' then
    redis.call('HSET', KEYS[5], 'state', 'closed', 'failures', 0, 'cooldown_ms', 0)
    redis.call('HDEL', KEYS[5], 'open_until', 'probe_until', 'probe_token', 'opened_at')
    transition = 'closed'
  elseif state == 'closed' and (tonumber(breaker[2]) or 0) > 0 then
    redis.call('HSET', KEYS[5], 'failures', 0)
  end
end

local retry_after = tonumber(ARGV[5]) or 0
if retry_after > 0 and now + retry_after > (tonumber(breaker[5]) or 0) then
  redis.call('HSET', KEYS[5], 'blocked_until', now + retry_after)
end

redis.call('DEL', KEYS[4])
local held = 0
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  held = 1
end
return {held, transition}
