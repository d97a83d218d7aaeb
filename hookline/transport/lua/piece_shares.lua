-- Piece (included with "--#include piece_shares.lua"; needs piece_leases.lua): fair shares,
-- as consume.lua keeps them. An endpoint's messages beyond its share of the live workers'
-- slots wait in the endpoint's own list instead of taking a slot: one endpoint's backlog, or
-- a slow receiver's, does not decide when another endpoint's event goes. An endpoint's count
-- is its attempts in flight (admit.lua counts them in its hash, settle.lua and release_dead.lua
-- give them back; its leases that ran out are pruned and the count mended first,
-- piece_leases.lua) plus the messages this call took for it. Its share is the slots divided
-- among the endpoints known to have work (those with waiting deliveries, and those met in
-- this call). An endpoint with no competition in sight may use every slot, except that past
-- `dig_above` (more than the workers could be running on CPU: it waits on its receiver) it
-- leaves half the slots to whatever is queued behind it, and the consumer digs on through the
-- queue to find it. An endpoint's hard cap (max_in_flight) holds whatever the competition. A
-- message of an endpoint that has waiting deliveries joins the end of its list (each
-- endpoint's deliveries keep their order); an endpoint under its share takes its oldest
-- waiting one. Waiting deliveries hold no slot and no worker.
-- Each endpoint's keys (`own`): {its hash, its schedule index, its waiting list
-- (hookline:fair:waiting:<ep>), its leases}; its fields (`fields`, as consume.lua reads them
-- once a call): inflight, max_in_flight, waiting (its waiting flag), wake.
-- shares_of(fair, slots, dig_above, waiting_set, clock)  `fair`: whether shares are kept
--   (else nothing waits); `slots`: of all live workers; `waiting_set`: hookline:fair:waiting,
--   the set of endpoints with waiting deliveries; `clock`: Redis time, a function. Returns a
--   table:
--   look_all()               every endpoint with waiting deliveries is known from the start
--   met(endpoint, own, fields)  the endpoint's fields were just read
--   any()                    whether deliveries are known to wait
--   waits(endpoint)          whether the endpoint's deliveries are known to wait
--   over(endpoint, fields, behind)  whether it is at its cap or its share (`behind`: for a
--                            message taken from the queues, which may have others behind it)
--   set_waiting(endpoint, own, fields, key, item)  to the end of its waiting list
--   take_waiting(endpoint, own, fields)  its oldest waiting delivery: the list key it came
--                            from and the message; nil when none is left (then the endpoint
--                            no longer waits)
--   forget(endpoint)         no longer look at its waiting deliveries in this call
--   took(endpoint)           a message was taken for it
--   best_waiting(behind, keys_of, fields_of)  the waiting endpoint (its keys given) under
--                            its share with the fewest in flight, and a waiting endpoint whose
--                            keys were not given, if any
--   one_endpoint_filled(most, taken)  whether the `taken` messages of a batch of `most` all
--                            went to one endpoint: its backlog may hide others behind it
--   ask_wake(keys_of, fields_of)  the caller is about to block while deliveries wait: the
--                            endpoints they wait for ring the doorbell at their next settle
--                            (their 'wake' flag, settle.lua)
local function shares_of(fair, slots, dig_above, waiting_set, clock)
  local shares = {}
  -- Endpoints known to have waiting deliveries, endpoints met in this call, and the messages
  -- this call took per endpoint.
  local waiting = {}
  local known = 0
  local met = {}
  local took = {}

  function shares.look_all()
    for _, endpoint in ipairs(redis.call('SMEMBERS', waiting_set)) do
      waiting[endpoint] = true
      known = known + 1
    end
  end

  function shares.met(endpoint, own, fields)
    if fair and (tonumber(fields.inflight) or 0) > 0 then
      -- counted in flight: only the leases that have not run out hold a slot
      fields.inflight = leases_live(own[4], own[1], clock(), fields.inflight)
    end
    if fields.waiting and not waiting[endpoint] then
      waiting[endpoint] = true
      known = known + 1
    end
  end

  function shares.any()
    return fair and next(waiting) ~= nil
  end

  function shares.over(endpoint, fields, behind)
    local count = (tonumber(fields.inflight) or 0) + (took[endpoint] or 0)
    local cap = tonumber(fields.max_in_flight) or 0
    if cap > 0 and count >= cap then
      return true
    end
    local others = known + (waiting[endpoint] and 0 or 1)
    for other in pairs(met) do
      if not waiting[other] and other ~= endpoint then
        others = others + 1
      end
    end
    if count >= math.max(1, math.floor(slots / others)) then
      return true
    end
    return behind and others == 1 and dig_above > 0 and count >= dig_above
      and count >= math.floor(slots / 2)
  end

  function shares.waits(endpoint)
    return waiting[endpoint] == true
  end

  function shares.set_waiting(endpoint, own, fields, key, item)
    redis.call('LPUSH', own[3], key .. '\n' .. item)
    if not fields.waiting then
      redis.call('HSET', own[1], 'waiting', '1')
      redis.call('SADD', waiting_set, endpoint)
      fields.waiting = '1'
    end
    if not waiting[endpoint] then
      waiting[endpoint] = true
      known = known + 1
    end
  end

  function shares.take_waiting(endpoint, own, fields)
    local entry = redis.call('RPOP', own[3])
    if not entry then
      redis.call('SREM', waiting_set, endpoint)
      redis.call('HDEL', own[1], 'waiting')
      waiting[endpoint] = nil
      known = known - 1
      fields.waiting = false
      return nil
    end
    local split = string.find(entry, '\n', 1, true)
    return string.sub(entry, 1, split - 1), string.sub(entry, split + 1)
  end

  function shares.forget(endpoint)
    waiting[endpoint] = nil
  end

  function shares.took(endpoint)
    took[endpoint] = (took[endpoint] or 0) + 1
    met[endpoint] = true
  end

  function shares.best_waiting(behind, keys_of, fields_of)
    local best, best_count, unknown = nil, nil, nil
    for endpoint in pairs(waiting) do
      local own = keys_of[endpoint]
      if not own then
        unknown = unknown or endpoint
      else
        local fields = fields_of(endpoint, own)
        if not shares.over(endpoint, fields, behind) then
          local count = (tonumber(fields.inflight) or 0) + (took[endpoint] or 0)
          if not best or count < best_count then
            best, best_count = endpoint, count
          end
        end
      end
    end
    return best, unknown
  end

  function shares.one_endpoint_filled(most, taken)
    if most < 2 then
      return false
    end
    local only = nil
    for endpoint in pairs(took) do
      if only then
        return false
      end
      only = endpoint
    end
    return only ~= nil and took[only] == taken
  end

  function shares.ask_wake(keys_of, fields_of)
    for endpoint in pairs(waiting) do
      local own = keys_of[endpoint]
      if own then
        local fields = fields_of(endpoint, own)
        if fields.waiting and not fields.wake then
          redis.call('HSET', own[1], 'wake', '1')
          fields.wake = '1'
        end
      end
    end
  end

  return shares
end
