-- Admit one attempt of one event to one endpoint: every gate in one round trip.
-- KEYS[1]  hookline:{ep}:endpoint        endpoint hash (url, secrets, enabled, rate_interval_ms,
--                                        rate_burst, ...)
-- KEYS[2]  hookline:{ep}:done:<event>    set once the event was delivered
-- KEYS[3]  hookline:{ep}:lease:<event>   in-flight lease, value = the holder's token
-- KEYS[4]  hookline:{ep}:starts:<event>  attempts started and not yet settled (crash counter)
-- KEYS[5]  hookline:{ep}:breaker         state, open_until, probe_until, probe_token,
--                                        blocked_until; and the rate limiter: tat (GCRA
--                                        theoretical arrival time) and book (latest slot booked
--                                        by a deferred event), ms: read with the breaker in one
--                                        HMGET (Hookline 0.2.0 kept it in hookline:{ep}:rate)
-- KEYS[6]  hookline:{ep}:digest:<event>  the content digest the event id is bound to
-- ARGV[1]  token of this attempt
-- ARGV[2]  lease lifetime before the read timeouts (connect timeout + margin), milliseconds;
--          the lease adds twice the endpoint's read timeout (or ARGV[6]), as an attempt can
--          take that long
-- ARGV[3]  unsettled starts allowed before the event counts as a poison message
-- ARGV[4]  lifetime of the starts counter, seconds
-- ARGV[5]  rate slot this event booked when it was deferred (ms of Redis time), or 0
-- ARGV[6]  default read timeout, milliseconds
-- ARGV[7]  this event's content digest (event type + canonical payload), '' to skip the check
-- ARGV[8]  lifetime of a new digest binding, seconds (the done marker's)
-- Times are Redis server time in milliseconds, so workers' clocks do not matter.
-- Commands: the four per-event strings are read with one MGET, the starts counter written
-- with SET EX (not INCR + EXPIRE), the lease's PTTL read only when a lease is there, the
-- breaker and the limiter read with one HMGET and written with one HSET.
-- Returns, first element the verdict:
--   {'conflict'}                         the event id is bound to another content: send nothing
--   {'duplicate'}                        already delivered: send nothing
--   {'missing'}                          no such endpoint
--   {'disabled', reason}                 endpoint disabled
--   {'busy', wait_ms}                    another attempt holds the lease
--   {'deferred', why, wait_ms, slot_ms}  not now: why is breaker_open, breaker_probe, blocked
--                                        or rate_limited; slot_ms is the booked rate slot or 0
--   {'poison', starts}                   started too often without settling (workers died on it)
--   {'admitted', transition, probe, f1, v1, ...}
--                                        lease taken; transition is 'half_open' when this
--                                        attempt moved the breaker there, probe is '1' when it
--                                        is the half-open probe; the endpoint hash follows
--#include piece_clock.lua
--#include piece_held.lua
-- The event id is an idempotency key: the first content that reached an existing endpoint
-- with it (here or at enqueue, claim.lua) owns it; another content under it is a conflict.
local strings = redis.call('MGET', KEYS[6], KEYS[2], KEYS[3], KEYS[4])
local bound, done, holder, unsettled = strings[1], strings[2], strings[3], strings[4]
if ARGV[7] ~= '' and bound and bound ~= ARGV[7] then
  return {'conflict'}
end
if done then
  return {'duplicate'}
end
local endpoint = redis.call('HGETALL', KEYS[1])
if #endpoint == 0 then
  return {'missing'}
end
if ARGV[7] ~= '' and not bound then
  redis.call('SET', KEYS[6], ARGV[7], 'EX', tonumber(ARGV[8]))
end
local config = {}
for i = 1, #endpoint, 2 do
  config[endpoint[i]] = endpoint[i + 1]
end
if config['enabled'] == '0' then
  return {'disabled', config['disabled_reason'] or ''}
end
local lease_ms = tonumber(ARGV[2]) + 2 * ((tonumber(config['timeout']) or 0) * 1000 > 0
  and tonumber(config['timeout']) * 1000 or tonumber(ARGV[6]))
if holder then
  local holder_ttl = redis.call('PTTL', KEYS[3])
  if holder_ttl > 0 then
    return {'busy', holder_ttl}
  end
end

local now = redis_now_ms()

-- Circuit breaker (open -> wait for the cool-down; then one probe at a time, half-open) and a
-- Retry-After block: the rule consume.lua applies too (piece_held.lua).
local why, wait, probe, state, breaker = endpoint_hold(KEYS[5], now)
if why then
  return {'deferred', why, wait, 0}
end
local transition = (probe and state == 'open') and 'half_open' or ''

-- Rate limit: GCRA on the theoretical arrival time (tat), strict for every event, so a
-- window never holds more than the rate plus the burst. An event over budget books the next
-- free slot (book) and is told to come back then: a burst drains in order, one event per slot,
-- instead of every waiting event asking again at every slot. A booked event has no privilege
-- when it returns; it only does not queue again.
local interval = tonumber(config['rate_interval_ms']) or 0
local new_tat = nil
if interval > 0 then
  local slot = tonumber(ARGV[5]) or 0
  if slot > 0 and now < slot then
    return {'deferred', 'rate_limited', slot - now, slot}
  end
  local tolerance = interval * ((tonumber(config['rate_burst']) or 1) - 1)
  local tat = math.max(tonumber(breaker[5]) or 0, now)
  local book = tonumber(breaker[6]) or 0
  local queued = slot == 0 and book > now  -- others booked ahead: no jumping the queue
  if queued or tat - now > tolerance then
    if slot > 0 then
      return {'deferred', 'rate_limited', tat - tolerance - now, slot}  -- at the front already
    end
    local booked = math.max(book + interval, tat - tolerance)
    redis.call('HSET', KEYS[5], 'book', booked)
    return {'deferred', 'rate_limited', booked - now, booked}
  end
  new_tat = tat + interval
end

local starts = (tonumber(unsettled) or 0) + 1
if starts > tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[4])
  return {'poison', starts - 1}
end
redis.call('SET', KEYS[4], starts, 'EX', tonumber(ARGV[4]))

redis.call('SET', KEYS[3], ARGV[1], 'PX', math.ceil(lease_ms))
local breaker_fields = {}
if new_tat then
  breaker_fields = {'tat', new_tat}
end
if probe then
  for _, value in ipairs({'state', 'half_open', 'probe_until', now + math.ceil(lease_ms),
                          'probe_token', ARGV[1]}) do
    breaker_fields[#breaker_fields + 1] = value
  end
end
if #breaker_fields > 0 then
  redis.call('HSET', KEYS[5], unpack(breaker_fields))
end
local reply = {'admitted', transition, probe and '1' or '0'}
for i = 1, #endpoint do
  reply[#reply + 1] = endpoint[i]
end
return reply
