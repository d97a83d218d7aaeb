-- Piece (included with "--#include piece_held.lua"): whether an endpoint takes an attempt now.
-- The one rule admit.lua (a worker's attempt is deferred) and consume.lua (the delivery is
-- parked before it reaches a worker) both apply.
-- endpoint_hold(breaker_key, now)
--   breaker_key  the hash holding the endpoint's breaker (its own hash, hookline:{ep}:endpoint,
--                passed in KEYS): state, open_until, probe_until, blocked_until, paused_at
--   now          Redis time, milliseconds, or a function returning it: called only when
--                the breaker is not plainly closed (consume.lua saves TIME on most messages)
--   Returns why, wait_ms when the endpoint is held: why is 'paused' (an operator paused it:
--   wait_ms is PAUSE_PARK_MS, a month, so a paused delivery is parked once and waits for
--   'hookline endpoint resume', which makes it due again; never jittered, so the schedule
--   keeps the deliveries' order), 'breaker_open' (circuit open, the
--   cool-down not over), 'breaker_probe' (half-open, another attempt is the probe) or
--   'blocked' (a Retry-After from an earlier response holds back the whole endpoint);
--   otherwise nil, 0, probe, state, breaker: probe is true when an attempt now is the
--   half-open probe (the cool-down is over, or the previous prober died: its probe lease ran
--   out); breaker is the hash's state, open_until, probe_until, blocked_until, tat and book
--   (the rate limiter's, admit.lua) and paused_at (set by 'hookline endpoint pause'), false
--   where missing.
-- hold_of(breaker, now): the same rule on fields already read: breaker is the array of the
--   seven fields above (state, open_until, probe_until, blocked_until, tat, book, paused_at;
--   false or nil where missing).
-- Keep PAUSE_PARK_MS equal to hookline.store.endpoints.PAUSE_PARK (seconds).
local PAUSE_PARK_MS = 30 * 86400 * 1000
local function hold_of(breaker, now)
  local state = breaker[1] or 'closed'
  local probe = false
  if breaker[7] then
    if type(now) == 'function' then
      now()  -- the caller parks from now (consume.lua reads its clock this way)
    end
    return 'paused', PAUSE_PARK_MS
  end
  if state == 'closed' and not breaker[4] then
    return nil, 0, probe, state, breaker
  end
  if type(now) == 'function' then
    now = now()
  end
  if state == 'open' then
    local open_until = tonumber(breaker[2]) or 0
    if now < open_until then
      return 'breaker_open', open_until - now
    end
    probe = true
  elseif state == 'half_open' then
    local probe_until = tonumber(breaker[3]) or 0
    if probe_until > now then
      return 'breaker_probe', probe_until - now
    end
    probe = true
  end
  local blocked_until = tonumber(breaker[4]) or 0
  if blocked_until > now then
    return 'blocked', blocked_until - now
  end
  return nil, 0, probe, state, breaker
end

local function endpoint_hold(breaker_key, now)
  return hold_of(redis.call('HMGET', breaker_key, 'state', 'open_until', 'probe_until',
    'blocked_until', 'tat', 'book', 'paused_at'), now)
end
