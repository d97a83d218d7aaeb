-- Record the outcome of an admitted attempt: idempotency, breaker, Retry-After and the attempt
-- history in one trip.
-- KEYS[1]  hookline:{ep}:endpoint
-- KEYS[2]  hookline:{ep}:done:<event>
-- KEYS[3]  hookline:{ep}:lease:<event>
-- KEYS[4]  hookline:{ep}:starts:<event>
-- KEYS[5]  hookline:{ep}:breaker
-- KEYS[6]  hookline:{ep}:history:<event>  list of the event's attempt records (JSON)
-- KEYS[7]  hookline:{ep}:recent           hash: outcomes (one letter per attempt, newest last),
--                                         last_error, last_error_at, last_error_event,
--                                         last_success_at (ms of Redis time); exp (Unix
--                                         seconds when the key expires: its TTL is pushed out
--                                         about once a day, not on every attempt)
-- KEYS[8]  hookline:{ep}:digest:<event>  the content digest the event id is bound to
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
-- ARGV[9]  this attempt's record (JSON), '' to record nothing in KEYS[6] and KEYS[7]
-- ARGV[10] event id
-- ARGV[11] this attempt's letter in the recent outcomes
-- ARGV[12] the attempt's error as the endpoint's last error ('' when delivered)
-- ARGV[13] attempt records kept per event (the latest)
-- ARGV[14] lifetime of the event's history after this attempt, seconds (0: keep none)
-- ARGV[15] outcomes kept in the recent record
-- ARGV[16] lifetime of the recent record after this attempt, seconds
-- ARGV[17] the event's content digest, '' for none: kept as long as the done marker
-- Returns  {held, transition}: held is 1 if this attempt still held its lease; transition is
--          'opened' or 'closed' when this outcome changed the breaker's state, else ''.
-- Commands: one HSET per hash written, the history trimmed only when over its length, the
-- recent record's TTL pushed out once a day, the lease and starts counter in one DEL; a
-- Retry-After block that has passed is dropped here, so consume.lua needs no clock for a
-- plainly closed breaker.
local outcome = ARGV[2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local transition = ''

if outcome == 'delivered' then
  redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[3]))
  if ARGV[17] ~= '' then
    redis.call('SET', KEYS[8], ARGV[17], 'EX', tonumber(ARGV[3]))
  end
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
elseif breaker[5] and (tonumber(breaker[5]) or 0) <= now then
  redis.call('HDEL', KEYS[5], 'blocked_until')  -- over: nothing to compare with any more
end

if ARGV[9] ~= '' then
  local retention = tonumber(ARGV[14])
  if retention > 0 then
    if redis.call('RPUSH', KEYS[6], ARGV[9]) > tonumber(ARGV[13]) then
      redis.call('LTRIM', KEYS[6], -tonumber(ARGV[13]), -1)
    end
    redis.call('EXPIRE', KEYS[6], retention)
  end
  local recent = redis.call('HMGET', KEYS[7], 'outcomes', 'exp')
  local record = {'outcomes', string.sub((recent[1] or '') .. ARGV[11], -tonumber(ARGV[15]))}
  if outcome == 'delivered' then
    record[3], record[4] = 'last_success_at', now
  else
    record[3], record[4] = 'last_error', ARGV[12]
    record[5], record[6] = 'last_error_at', now
    record[7], record[8] = 'last_error_event', ARGV[10]
  end
  local lifetime = tonumber(ARGV[16])
  local seconds = math.floor(now / 1000)
  local refresh = (tonumber(recent[2]) or 0) < seconds + lifetime - math.min(86400, lifetime / 2)
  if refresh then
    record[#record + 1] = 'exp'
    record[#record + 1] = seconds + lifetime
  end
  redis.call('HSET', KEYS[7], unpack(record))
  if refresh then
    redis.call('EXPIRE', KEYS[7], lifetime)
  end
end

local held = 0
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3], KEYS[4])
  held = 1
else
  redis.call('DEL', KEYS[4])
end
return {held, transition}
