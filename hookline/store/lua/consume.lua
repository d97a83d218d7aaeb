-- Take the next message off the broker's queues and record it as unacknowledged in the same
-- atomic step. kombu's Redis transport pops with BRPOP and records the message in a second
-- round trip: a worker killed between the two (or a reply lost in flight) loses the message.
-- Here a message is never off its list without being in the unacked records, so a worker that
-- dies at any point leaves it to be restored after the visibility timeout.
--
-- The unacked record is one member of a sorted set, scored with the time taken: the delivery
-- tag as a JSON string, then kombu's record [message, exchange, routing key] (one ZADD; kombu
-- keeps the record in a hash and the tag in an index, two writes and two removals). The
-- caller keeps the member to remove it on the acknowledgement (ZREM); the restore sweep reads
-- the message back out of it (hookline/broker.py, unacked.py).
--
-- Held endpoints (when ARGV[2] is '1': Hookline's state lives in this Redis): a delivery whose
-- endpoint is held (paused, circuit open, half-open probe in flight, Retry-After block: the rule
-- admit.lua applies, piece_held.lua) would only be deferred by a worker. It is parked in the
-- retry schedule here instead (piece_park.lua, as park.lua), due when the endpoint may take it
-- again, without reaching a worker: a dead endpoint's backlog costs the workers nothing and
-- does not slow healthy endpoints. The endpoint and event ids come from the message headers
-- hookline_endpoint and hookline_event (set on publish); a message whose endpoint id is not
-- a valid one goes to a worker, which dead-letters it. Every key comes through KEYS: the
-- caller passes the breaker and schedule-index keys of the endpoints it expects (ARGV[8...]);
-- a message for another endpoint stops the call with 'need', and the caller calls again with
-- that endpoint's keys added. At a schedule cap the message goes to a worker, which
-- dead-letters it as usual.
-- KEYS[1]      the unacked records (sorted set: tag + record -> time taken)
-- KEYS[2..6]   the retry schedule: due, messages, meta, counts, wake (see park.lua)
-- KEYS[7..6+Q] the queues' lists, in the order to try them (kombu's priority and fair cycle);
--              Q = ARGV[6]
-- KEYS[7+Q..6+2Q]  the doorbell of each of those lists' queue, in the same order (a queue's
--              priority lists share one): a list of wake-up tokens, one pushed with every
--              message; idle consumers block on their queues' doorbells (one token wakes one
--              consumer). Emptied here when every queue is empty, so a token left there is
--              for a message pushed after this call; a queue's is trimmed to 1,000 on about
--              every 16th message taken from it (producers push, nobody pops while every
--              consumer is busy).
-- KEYS[7+2Q...] per endpoint of ARGV[8...], in that order: its breaker hash
--              (hookline:{ep}:breaker), then its schedule index
--              (hookline:{schedule}:by_endpoint:<ep>)
-- ARGV[1]      now, in the worker's clock (kombu's restore sweep compares with that clock)
-- ARGV[2]      '1' to park held endpoints' deliveries here, '0' not to
-- ARGV[3]      most retries scheduled in all;  ARGV[4]  most for one endpoint
-- ARGV[5]      most deliveries to park in one call
-- ARGV[6]      Q, how many queue lists follow the schedule keys
-- ARGV[7]      most messages to take in this call (the consumer's free prefetch slots): a
--              consumer behind a backlog takes several per round trip
-- ARGV[8...]   endpoint ids whose keys follow the doorbells (only with ARGV[2] '1')
-- Returns      {'message', n, list key, unacked member, ... (n pairs), parked...} for the n
--                messages taken (each member holds its message: see above);
--              {'last', n, pairs..., parked...} the same, when the queues ran empty after
--                them: the doorbells were emptied in the same step (as for 'empty'), so the
--                caller may block on them at once;
--              {'bad', list key, item, parked...} for an item that is not a kombu message: it
--                stays on its list until the caller has kept it in the dead-letter queue and
--                removed it (only when no message was taken before it: those come first);
--              {'empty', '', parked...} when every list is empty (the doorbells emptied in the
--                same step): the caller blocks on the doorbells, so a push in between is not
--                missed;
--              {'more', '', parked...} when ARGV[5] deliveries were parked: call again;
--              {'need', endpoint id, parked...} when the next message is for an endpoint whose
--                keys were not passed: it stays on its list; call again with them (only
--                when no message was taken before it: those come first).
--              parked: per parked delivery, the JSON array [endpoint id, event id, reason,
--                countdown ms, task id].
--#include piece_clock.lua
--#include piece_held.lua
--#include piece_park.lua
local park_held = ARGV[2] == '1'
local parked = {}
local now_ms = nil
local queues = tonumber(ARGV[6])
local most = math.max(tonumber(ARGV[7]) or 1, 1)
local first_queue = 7
local last_queue = 6 + queues
local schedule = {due = KEYS[2], messages = KEYS[3], meta = KEYS[4], counts = KEYS[5],
                  wake = KEYS[6]}
-- queue list key -> its doorbell
local doorbells = {}
for i = first_queue, last_queue do
  doorbells[KEYS[i]] = KEYS[i + queues]
end
-- endpoint id -> {breaker key, schedule index key}
local endpoint_keys = {}
for j = 8, #ARGV do
  local at = last_queue + queues + 2 * (j - 8) + 1
  endpoint_keys[ARGV[j]] = {KEYS[at], KEYS[at + 1]}
end

-- The messages taken so far: list key, member, list key, member...
local taken = {}

local function reply(kind, a, b)
  local out = {kind, a}
  if b ~= nil then
    out[3] = b
  end
  if kind == 'message' or kind == 'last' then
    out = {kind, #taken / 2}
    for _, value in ipairs(taken) do
      out[#out + 1] = value
    end
  end
  for _, entry in ipairs(parked) do
    out[#out + 1] = entry
  end
  return out
end

-- Redis time, read once and only when needed: a plainly closed breaker needs none.
local function clock()
  if not now_ms then
    now_ms = redis_now_ms()
  end
  return now_ms
end

-- The wait before the endpoint whose breaker is `breaker_key` takes a delivery again (with
-- jitter, so a backlog does not come back at one instant), and why; nil when it takes one now.
local function held(breaker_key)
  local why, wait = endpoint_hold(breaker_key, clock)
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

local budget = tonumber(ARGV[5]) or 0
-- Redis 7 pops from the first non-empty list in one command (LMPOP); before that, each list
-- is looked at in turn.
local lmpop = nil
if (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000 then
  lmpop = {'LMPOP', queues}
  for i = first_queue, last_queue do
    lmpop[#lmpop + 1] = KEYS[i]
  end
  lmpop[#lmpop + 1] = 'RIGHT'
end
local function take()
  if lmpop then
    local popped = redis.call(unpack(lmpop))
    if popped then
      return popped[1], popped[2][1]
    end
    return nil
  end
  for i = first_queue, last_queue do
    local item = redis.call('RPOP', KEYS[i])
    if item then
      return KEYS[i], item
    end
  end
  return nil
end

while true do
  local key, item = take()
  if not key then
    break
  end
  local ok, message = pcall(cjson.decode, item)
  local props = ok and type(message) == 'table' and message['properties']
  local info = type(props) == 'table' and props['delivery_info']
  local tag = type(props) == 'table' and props['delivery_tag']
  if type(info) ~= 'table' or type(tag) ~= 'string' then
    redis.call('RPUSH', key, item)  -- back where it was, until the caller has kept it
    if #taken > 0 then
      return reply('message')
    end
    return reply('bad', key, item)
  end
  local headers = message['headers']
  local endpoint = type(headers) == 'table' and headers['hookline_endpoint']
  local event = type(headers) == 'table' and headers['hookline_event']
  local countdown, why, own = nil, nil, nil
  if park_held and type(endpoint) == 'string' and type(event) == 'string'
      and #endpoint <= 64 and string.find(endpoint, '^[%w][%w_.%-]*$') then
    own = endpoint_keys[endpoint]
    if not own then
      redis.call('RPUSH', key, item)  -- back where it was
      if #taken > 0 then
        return reply('message')
      end
      return reply('need', endpoint)
    end
    countdown, why = held(own[1])
  end
  local meta = countdown and cjson.encode({endpoint_id = endpoint, event_id = event,
    last_error = ''})
  if countdown and not park_retry(schedule, own[2], endpoint .. '/' .. event, endpoint,
                                  now_ms + countdown, item, meta, tonumber(ARGV[3]),
                                  tonumber(ARGV[4])) then
    local task_id = headers['id']
    if type(task_id) ~= 'string' then
      task_id = event
    end
    parked[#parked + 1] = cjson.encode({endpoint, event, why, countdown, task_id})
    if #parked >= budget then
      if #taken > 0 then
        return reply('message')
      end
      return reply('more', '')
    end
  else
    -- Not held, or the schedule is at a cap: a worker takes it.
    -- The tag, then the record kombu's QoS.append writes: [raw message, exchange, routing key].
    local member = cjson.encode(tag) .. '[' .. item .. ',' ..
      cjson.encode(tostring(info['exchange'] or '')) .. ',' ..
      cjson.encode(tostring(info['routing_key'] or '')) .. ']'
    redis.call('ZADD', KEYS[1], ARGV[1], member)
    if string.sub(tag, -1) == '0' then
      redis.call('LTRIM', doorbells[key], 0, 999)
    end
    taken[#taken + 1] = key
    taken[#taken + 1] = member
    if #taken / 2 >= most then
      return reply('message')
    end
  end
end
redis.call('DEL', unpack(KEYS, last_queue + 1, last_queue + queues))
if #taken > 0 then
  return reply('last')
end
return reply('empty', '')
