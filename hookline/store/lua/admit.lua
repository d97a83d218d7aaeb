-- Admit one attempt of one event to one endpoint: every gate in one round trip.
-- KEYS[1]   endpoint    hookline:{ep}:endpoint, the endpoint hash: its configuration (url,
--                       secrets, enabled, rate_interval_ms, rate_burst, ...) and its shared
--                       gates, read with it in one HGETALL: the breaker (state, open_until,
--                       probe_until, probe_token, blocked_until) and the rate limiter (tat,
--                       the GCRA theoretical arrival time, and book, the latest slot booked
--                       by a deferred event; ms)
-- KEYS[2]   record      hookline:{ep}:delivery:<event>, the event's delivery record
--                       (piece_record.lua): content digest, done marker, in-flight lease,
--                       crash counter (attempts started and not yet settled)
-- KEYS[3]   old_done    hookline:{ep}:done:<event>, Hookline 0.2's done marker, honoured
--                       (read with the record in one MGET)
-- KEYS[4]   old_digest  hookline:{ep}:digest:<event>, Hookline 0.2's content binding
-- KEYS[5]   leases      hookline:{ep}:leases, the endpoint's attempts in flight
--                       (piece_leases.lua): this attempt's lease is added, a lease it takes
--                       over removed
-- KEYS[6]   doorbell?   (where the broker is this Redis) the delivery queue's doorbell: a
--                       duplicate that is its ordered key's head lets the next of the line go
-- ARGV[1]   token       token of this attempt
-- ARGV[2]   lease_ms    lease lifetime before the read timeouts (connect timeout + margin),
--                       milliseconds; the lease adds twice the endpoint's read timeout (or
--                       ARGV[6]), as an attempt can take that long
-- ARGV[3]   max_starts  unsettled starts allowed before the event counts as a poison message
-- ARGV[4]   starts_ttl  lifetime of the starts counter, seconds
-- ARGV[5]   rate_slot   rate slot this event booked when it was deferred (ms of Redis time),
--                       or 0
-- ARGV[6]   read_timeout_ms  default read timeout, milliseconds
-- ARGV[7]   digest      this event's content digest (event type + canonical payload), '' to
--                       skip the check
-- ARGV[8]   record_ttl  lifetime of the delivery record from this write, seconds
-- ARGV[9]   ordering_key  the delivery's ordering key (the endpoint id when none was given):
--                       read only for an ordered endpoint (piece_order.lua), as is ARGV[10]
-- ARGV[10]  event_id    the event id
-- Times are Redis server time in milliseconds, so workers' clocks do not matter.
-- Commands: the record (and 0.2's two keys) read with one MGET and written with one SET; the
-- endpoint, its breaker and its limiter read with one HGETALL and written with one HSET.
-- Returns, first element the verdict:
--   {'conflict'}                         the event id is bound to another content: send nothing
--   {'duplicate'}                        already delivered: send nothing
--   {'missing'}                          no such endpoint
--   {'disabled', reason}                 endpoint disabled
--   {'busy', wait_ms}                    another attempt holds the lease
--   {'deferred', why, wait_ms, slot_ms}  not now: why is breaker_open, breaker_probe, blocked
--                                        or rate_limited; slot_ms is the booked rate slot or 0
--   {'poison', starts}                   started too often without settling (workers died on it)
--   {'capped', inflight}                 the endpoint has max_in_flight attempts in flight: the
--                                        delivery waits for one of them (consume.lua's list)
--   {'deferred', 'out_of_turn', wait_ms, 0}  an ordered endpoint's delivery that is not its
--                                        key's head (it was taken before the endpoint was
--                                        ordered): back through the schedule into its line
--   {'admitted', transition, probe, now, f1, v1, ...}
--                                        lease taken; transition is 'half_open' when this
--                                        attempt moved the breaker there, probe is '1' when it
--                                        is the half-open probe, now the Redis time (ms) the
--                                        gates were passed at; the endpoint hash follows
--#include piece_clock.lua
--#include piece_held.lua
--#include piece_record.lua
--#include piece_order.lua
--#include piece_leases.lua
-- The event id is an idempotency key: the first content that reached an existing endpoint
-- with it (here or at enqueue, claim.lua) owns it; another content under it is a conflict.
local strings = redis.call('MGET', KEYS[2], KEYS[3], KEYS[4])
local state, rest = read_record(strings[1])
local bound = state['d'] or strings[3]
if ARGV[7] ~= '' and bound and bound ~= ARGV[7] then
  return {'conflict'}
end
if state['done'] or strings[2] then
  -- A second copy of a delivered event that waited in its key's line: the key goes on.
  if KEYS[6] and redis.call('HGET', KEYS[1], 'ordered') == '1' then
    order_advance(KEYS[1], ARGV[9], ARGV[10], KEYS[6])
  end
  return {'duplicate'}
end
local endpoint = redis.call('HGETALL', KEYS[1])
local config = {}
for i = 1, #endpoint, 2 do
  config[endpoint[i]] = endpoint[i + 1]
end
if not config['url'] then
  return {'missing'}  -- (gate fields alone are no endpoint)
end
local ttl = tonumber(ARGV[8])
local unbound = ARGV[7] ~= '' and not bound
if unbound then
  state['d'] = ARGV[7]
end
-- A verdict that admits nothing still binds a free id (one SET, only then).
local function refuse(verdict)
  if unbound then
    redis.call('SET', KEYS[2], record_text(state, rest), 'EX', ttl)
  end
  return verdict
end
if config['enabled'] == '0' then
  return refuse({'disabled', config['disabled_reason'] or ''})
end
local lease_ms = tonumber(ARGV[2]) + 2 * ((tonumber(config['timeout']) or 0) * 1000 > 0
  and tonumber(config['timeout']) * 1000 or tonumber(ARGV[6]))

local now = redis_now_ms()
local lease_until = tonumber(state['lu']) or 0
if state['t'] and lease_until > now then
  return refuse({'busy', lease_until - now})
end

-- Circuit breaker (open -> wait for the cool-down; then one probe at a time, half-open) and a
-- Retry-After block: the rule consume.lua applies too (piece_held.lua).
local why, wait, probe, breaker_state, breaker = hold_of(
  {config['state'], config['open_until'], config['probe_until'], config['blocked_until'],
   config['tat'], config['book'], config['paused_at']}, now)
if why then
  return refuse({'deferred', why, wait, 0})
end
local transition = (probe and breaker_state == 'open') and 'half_open' or ''

-- An ordered endpoint: only its key's head goes (consume.lua lines up the others).
local order_head = nil
if config['ordered'] == '1' then
  local okey = ARGV[9]
  local heads, seqs = order_keys(KEYS[1])
  order_head = redis.call('HGET', heads, okey)
  if not order_head then
    order_head = ARGV[10] .. '\n' .. order_sequence(seqs, okey, nil)
    redis.call('HSET', heads, okey, order_head)
  elseif not order_is_head(order_head, ARGV[10]) then
    return refuse({'deferred', 'out_of_turn', 1000, 0})
  end
end

-- The endpoint's attempts in flight (given back by settle.lua, or by release_dead.lua for a
-- dead process's), and its hard cap across all workers. At the cap by the count, the leases
-- are counted: those that ran out (a settle lost with a Redis restart) hold no slot.
local inflight = tonumber(config['inflight']) or 0
local cap = tonumber(config['max_in_flight']) or 0
if cap > 0 and inflight >= cap then
  inflight = leases_live(KEYS[5], KEYS[1], now, config['inflight'])
  if inflight >= cap then
    return refuse({'capped', inflight})
  end
end

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
    return refuse({'deferred', 'rate_limited', slot - now, slot})
  end
  local tolerance = interval * ((tonumber(config['rate_burst']) or 1) - 1)
  local tat = math.max(tonumber(breaker[5]) or 0, now)
  local book = tonumber(breaker[6]) or 0
  local queued = slot == 0 and book > now  -- others booked ahead: no jumping the queue
  if queued or tat - now > tolerance then
    if slot > 0 then
      -- at the front already
      return refuse({'deferred', 'rate_limited', tat - tolerance - now, slot})
    end
    local booked = math.max(book + interval, tat - tolerance)
    redis.call('HSET', KEYS[1], 'book', booked)
    return refuse({'deferred', 'rate_limited', booked - now, booked})
  end
  new_tat = tat + interval
end

-- The crash counter: attempts started and not settled, forgotten ARGV[4] seconds after the
-- latest start.
local unsettled = (tonumber(state['su']) or 0) > now and tonumber(state['s']) or 0
local starts = unsettled + 1
state['su'] = now + tonumber(ARGV[4]) * 1000
if starts > tonumber(ARGV[3]) then
  state['s'], state['su'] = nil, nil
  redis.call('SET', KEYS[2], record_text(state, rest), 'EX', ttl)
  return {'poison', starts - 1}
end
state['s'] = starts
-- A lease that ran out is taken over: its member leaves the leases (the count with it).
local taken_over = state['t'] and redis.call('ZREM', KEYS[5], state['t']) or 0
state['t'], state['lu'] = ARGV[1], now + math.ceil(lease_ms)
redis.call('SET', KEYS[2], record_text(state, rest), 'EX', ttl)
redis.call('ZADD', KEYS[5], state['lu'], ARGV[1])

local breaker_fields = {}
if new_tat then
  breaker_fields = {'tat', new_tat}
end
if taken_over == 0 then
  breaker_fields[#breaker_fields + 1] = 'inflight'
  breaker_fields[#breaker_fields + 1] = inflight + 1
end
if probe then
  for _, value in ipairs({'state', 'half_open', 'probe_until', now + math.ceil(lease_ms),
                          'probe_token', ARGV[1]}) do
    breaker_fields[#breaker_fields + 1] = value
  end
end
if #breaker_fields > 0 then
  redis.call('HSET', KEYS[1], unpack(breaker_fields))
end
local reply = {'admitted', transition, probe and '1' or '0', now}
for i = 1, #endpoint do
  reply[#reply + 1] = endpoint[i]
end
if order_head then
  reply[#reply + 1] = 'order_head'
  reply[#reply + 1] = order_head
end
return reply
