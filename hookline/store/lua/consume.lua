-- Take the next message off the broker's queues and record it as unacknowledged in the same
-- atomic step. kombu's Redis transport pops with BRPOP and records the message in a second
-- round trip: a worker killed between the two (or a reply lost in flight) loses the message.
-- Here a message is never off its list without being in the unacked hash, so a worker that
-- dies at any point leaves it to be restored after the visibility timeout.
--
-- Held endpoints (when ARGV[2] is '1': Hookline's state lives in this Redis): a delivery whose
-- endpoint's circuit is open, whose half-open probe is in flight, or which a Retry-After
-- blocks, would only be deferred by a worker. It is parked in the retry schedule here instead,
-- due when the endpoint may take it again, without reaching a worker: a dead endpoint's
-- backlog costs the workers nothing and does not slow healthy endpoints. The endpoint and
-- event ids come from the message headers hookline_endpoint and hookline_event (set on
-- publish); the breaker hash is read by name (one Redis, not Cluster: the broker cannot be
-- one). At a schedule cap the message goes to a worker, which dead-letters it as usual.
-- KEYS[1]      the unacked hash (delivery tag -> [message, exchange, routing key])
-- KEYS[2]      the unacked index (sorted set: delivery tag -> time taken)
-- KEYS[3]      the doorbell stream publishers add to after every push
-- KEYS[4..8]   the retry schedule: due, messages, meta, counts, wake (see park.lua)
-- KEYS[9...]   the queues' lists, in the order to try them (kombu's priority and fair cycle)
-- ARGV[1]      now, in the worker's clock (kombu's restore sweep compares with that clock)
-- ARGV[2]      '1' to park held endpoints' deliveries here, '0' not to
-- ARGV[3]      most retries scheduled in all;  ARGV[4]  most for one endpoint
-- ARGV[5]      most deliveries to park in one call
-- Returns      {'message', list key, message, parked...} on success;
--              {'bad', list key, item, parked...} for an item that is not a kombu message: it
--                stays on its list until the caller has kept it in the dead-letter queue and
--                removed it;
--              {'empty', last doorbell id, parked...} when every list is empty: the caller
--                blocks on the doorbell from that id, so a push in between is not missed;
--              {'more', '', parked...} when ARGV[5] deliveries were parked: call again.
--              parked: "endpoint id \t event id \t reason \t countdown ms" per parked delivery.
local park_held = ARGV[2] == '1'
local parked = {}
local clock = nil
local now_ms = 0

local function reply(kind, a, b)
  local out = {kind, a}
  if b ~= nil then
    out[3] = b
  end
  for _, entry in ipairs(parked) do
    out[#out + 1] = entry
  end
  return out
end

-- The wait before `endpoint` takes a delivery again, and why; nil when it takes one now.
local function held(endpoint)
  local breaker = redis.call('HMGET', 'hookline:{' .. endpoint .. '}:breaker',
    'state', 'open_until', 'probe_until', 'blocked_until')
  if not clock then
    clock = redis.call('TIME')
    now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  end
  local state = breaker[1]
  if state == 'open' then
    local wait = (tonumber(breaker[2]) or 0) - now_ms
    if wait > 0 then
      return wait + math.random(0, math.floor(math.min(1000 + wait / 10, 5000))), 'breaker_open'
    end
    return nil  -- cool-down over: a worker takes it, as the half-open probe
  elseif state == 'half_open' then
    local wait = (tonumber(breaker[3]) or 0) - now_ms
    if wait > 0 then
      return math.min(wait, 2000) + math.random(100, 1000), 'breaker_probe'
    end
    return nil
  end
  local blocked = (tonumber(breaker[4]) or 0) - now_ms
  if blocked > 0 then
    return blocked + math.random(0, math.floor(math.min(1000 + blocked / 10, 5000))), 'blocked'
  end
  return nil
end

-- Park `item` like park.lua; false at a cap (a worker then handles it).
local function park(endpoint, event, countdown, item)
  local id = endpoint .. '/' .. event
  if not redis.call('ZSCORE', KEYS[4], id) then
    if redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[3]) then
      return false
    end
    if (tonumber(redis.call('HGET', KEYS[7], endpoint)) or 0) >= tonumber(ARGV[4]) then
      return false
    end
    redis.call('HINCRBY', KEYS[7], endpoint, 1)
  end
  local due = now_ms + countdown
  local head = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  redis.call('ZADD', KEYS[4], due, id)
  redis.call('HSET', KEYS[5], id, item)
  redis.call('HSET', KEYS[6], id, cjson.encode({endpoint_id = endpoint, event_id = event,
    last_error = ''}))
  if #head == 0 or due < tonumber(head[2]) then
    redis.call('LPUSH', KEYS[8], due)
    redis.call('LTRIM', KEYS[8], 0, 15)
  end
  return true
end

local budget = tonumber(ARGV[5]) or 0
local i = 9
while i <= #KEYS do
  local item = redis.call('LINDEX', KEYS[i], -1)
  if not item then
    i = i + 1
  else
    local ok, message = pcall(cjson.decode, item)
    local props = ok and type(message) == 'table' and message['properties']
    local info = type(props) == 'table' and props['delivery_info']
    local tag = type(props) == 'table' and props['delivery_tag']
    if type(info) ~= 'table' or type(tag) ~= 'string' then
      return reply('bad', KEYS[i], item)
    end
    local headers = message['headers']
    local endpoint = type(headers) == 'table' and headers['hookline_endpoint']
    local event = type(headers) == 'table' and headers['hookline_event']
    local countdown, why = nil, nil
    if park_held and type(endpoint) == 'string' and type(event) == 'string' then
      countdown, why = held(endpoint)
    end
    if countdown and park(endpoint, event, countdown, item) then
      redis.call('RPOP', KEYS[i])
      parked[#parked + 1] = endpoint .. '\t' .. event .. '\t' .. why .. '\t' .. countdown
      if #parked >= budget then
        return reply('more', '')
      end
    else
      redis.call('RPOP', KEYS[i])
      -- The same record kombu's QoS.append writes: [raw message, exchange, routing key].
      local record = '[' .. item .. ',' .. cjson.encode(tostring(info['exchange'] or '')) ..
        ',' .. cjson.encode(tostring(info['routing_key'] or '')) .. ']'
      redis.call('HSET', KEYS[1], tag, record)
      redis.call('ZADD', KEYS[2], ARGV[1], tag)
      return reply('message', KEYS[i], item)
    end
  end
end
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if #last > 0 then
  return reply('empty', last[1][1])
end
return reply('empty', '0-0')
