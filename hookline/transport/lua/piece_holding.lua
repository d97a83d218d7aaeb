-- Piece (included with "--#include piece_holding.lua"; needs piece_held.lua and
-- piece_park.lua): a delivery whose endpoint is held (paused, circuit open, half-open probe in
-- flight, Retry-After block: the rule admit.lua applies, piece_held.lua) would only be
-- deferred by a worker. consume.lua parks it in the retry schedule instead (piece_park.lua, as
-- park.lua), due when the endpoint may take it again, without reaching a worker: a dead
-- endpoint's backlog costs the workers nothing and does not slow healthy endpoints.
-- holding_of(schedule, clock, max_total, max_per_endpoint, max_age)  `schedule`: the retry
--   schedule's keys (piece_park.lua); `clock`: Redis time in ms, a function (read once a call,
--   only when needed: a plainly closed breaker needs none); the caps of the schedule, in all
--   and for one endpoint; `max_age`: the default max age, seconds. Returns a table:
--   countdown(endpoint, fields, headers)  the wait (ms) before `endpoint` takes the delivery
--       (`fields`: the endpoint's, consume.lua reads them: hold, the seven piece_held.lua
--       reads, and retry_policy; `headers`: the message's), with jitter so a backlog does not
--       come back at one instant, and why; nil when it takes it now, or when the delivery was
--       held behind a failing endpoint (not a pause) for longer than the endpoint's max age
--       (its retry_policy's, else `max_age`; hookline_since in the headers: first attempted,
--       else published, Unix seconds): a worker dead-letters it as expired
--   park(index, endpoint, event, headers, item, countdown, why)  park the delivery in the
--       schedule (`index`: the endpoint's schedule index), due `countdown` ms from now; false
--       at a schedule cap (then it goes to a worker, which dead-letters it as usual)
--   parked  per parked delivery, the JSON array [endpoint id, event id, reason, countdown ms,
--       task id]
local function holding_of(schedule, clock, max_total, max_per_endpoint, max_age)
  local holding = {parked = {}}
  local parked = holding.parked
  -- endpoint id -> its max age, seconds, read once a call
  local max_age_of = {}

  local function endpoint_max_age(endpoint, fields)
    local found = max_age_of[endpoint]
    if not found then
      found = max_age
      if fields.retry_policy then
        local ok, policy = pcall(cjson.decode, fields.retry_policy)
        if ok and type(policy) == 'table' and tonumber(policy['max_age']) then
          found = tonumber(policy['max_age'])
        end
      end
      max_age_of[endpoint] = found
    end
    return found
  end

  local function held_too_long(endpoint, headers, fields)
    local since = tonumber(headers['hookline_since'])
    if not since then
      return false
    end
    local limit = endpoint_max_age(endpoint, fields)
    return limit > 0 and clock() / 1000 - since > limit
  end

  local function held(fields)
    local why, wait = hold_of(fields.hold, clock)
    if not why then
      return nil
    end
    if why == 'paused' then
      -- No jitter, and 1 ms apart within one call: resume restores the order they came in.
      return wait + #parked, why
    end
    if why == 'breaker_probe' then
      return math.min(wait, 2000) + math.random(100, 1000), why
    end
    return wait + math.random(0, math.floor(math.min(1000 + wait / 10, 5000))), why
  end

  function holding.countdown(endpoint, fields, headers)
    local countdown, why = held(fields)
    if countdown and why ~= 'paused' and held_too_long(endpoint, headers, fields) then
      return nil  -- to a worker, which dead-letters it as expired
    end
    return countdown, why
  end

  function holding.park(index, endpoint, event, headers, item, countdown, why)
    local meta = cjson.encode({endpoint_id = endpoint, event_id = event, last_error = ''})
    if park_retry(schedule, index, endpoint .. '/' .. event, endpoint, clock() + countdown,
                  item, meta, max_total, max_per_endpoint) then
      return false
    end
    local task_id = headers['id']
    if type(task_id) ~= 'string' then
      task_id = event
    end
    parked[#parked + 1] = cjson.encode({endpoint, event, why, countdown, task_id})
    return true
  end

  return holding
end
