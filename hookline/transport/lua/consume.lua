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
-- the message back out of it (hookline/transport/redis.py, unacked.py).
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
-- Fair shares (when ARGV[2] is '1' and ARGV[9] > 0): an endpoint's messages beyond its share of
-- the live workers' slots wait in the endpoint's own list (KEYS per endpoint, below) instead of
-- taking a slot: one endpoint's backlog, or a slow receiver's, does not decide when another
-- endpoint's event goes. An endpoint's count is its attempts in flight (admit.lua counts them
-- in its hash, settle.lua and release_dead.lua give them back) plus the messages this call took
-- for it. Its share is the slots divided among the endpoints known to have work (those with
-- waiting deliveries, and those met in this call). An endpoint with no competition in sight
-- may use every slot, except that past ARGV[10] (more than the workers could be running on
-- CPU: it waits on its receiver) it leaves half the slots to whatever is queued behind it, and
-- the consumer digs on through the queue to find it. An endpoint's hard cap (max_in_flight in
-- its hash) holds whatever the competition. A message of an endpoint that has waiting
-- deliveries joins the end of its list (each endpoint's deliveries keep their order); an
-- endpoint under its share takes its oldest waiting one. Waiting deliveries hold no slot and
-- no worker. A call that leaves deliveries waiting for their shares and lets its caller block
-- sets the endpoints' 'wake' flag; settle.lua then rings the doorbell ('w') when such an
-- endpoint finishes an attempt, so they go as soon as it is back under its share.
-- KEYS[1]        records           the unacked records (sorted set: owner + tag + record ->
--                                   time taken, piece_unacked.lua)
-- KEYS[2]        due               the retry schedule (see park.lua): due
-- KEYS[3]        messages          its messages
-- KEYS[4]        meta              its meta
-- KEYS[5]        counts            its counts
-- KEYS[6]        wake              its wake list
-- KEYS[7]        waiting_set       hookline:fair:waiting, the set of endpoints with waiting
--                                   deliveries
-- KEYS[8...]     *queues           the queues' lists, in the order to try them (kombu's
--                                   priority and fair cycle): Q = ARGV[6] of them
-- KEYS[8+Q...]   *doorbells        the doorbell of each of those lists' queue, in the same
--                                   order (a queue's priority lists share one): emptied here
--                                   when every queue is empty, trimmed to 1,000 now and then
--                                   (piece_queues.lua)
-- KEYS[8+2Q...]  *endpoint_keys    per endpoint of ARGV[13...], in that order: its hash
--                                   (hookline:{ep}:endpoint: breaker, pause, inflight,
--                                   max_in_flight, waiting), its schedule index
--                                   (hookline:{schedule}:by_endpoint:<ep>), its waiting list
--                                   (hookline:fair:waiting:<ep>) and its leases
--                                   (hookline:{ep}:leases: an endpoint counted in flight has
--                                   its leases that ran out pruned and its count mended,
--                                   piece_leases.lua)
-- ARGV[1]        now               now, in the worker's clock (kombu's restore sweep compares
--                                   with that clock)
-- ARGV[2]        park_held         '1' to park held endpoints' deliveries here (and share the
--                                   slots), '0' not to
-- ARGV[3]        max_total         most retries scheduled in all
-- ARGV[4]        max_per_endpoint  most retries scheduled for one endpoint
-- ARGV[5]        budget            most deliveries to park or to set waiting in one call
-- ARGV[6]        queue_count       Q, how many queue lists follow the schedule keys
-- ARGV[7]        most              most messages to take in this call (the consumer's free
--                                   prefetch slots): a consumer behind a backlog takes several
--                                   per round trip
-- ARGV[8]        owner             the consuming process's liveness token, written at the
--                                   head of each record ('' for none:
--                                   hookline/transport/liveness.py)
-- ARGV[9]        slots             slots of all live workers (0: no fair shares)
-- ARGV[10]       dig_above         an endpoint holding more than this many leaves half the
--                                   slots to the queue behind it (0: never)
-- ARGV[11]       look_all          '1' to look for waiting deliveries of every endpoint (the
--                                   consumer was told of some), '0' to look only at the
--                                   endpoints met
-- ARGV[12]       max_age           the default max age, seconds: a delivery held behind a
--                                   failing endpoint (open breaker, probe, Retry-After block;
--                                   not a pause) since longer than its endpoint's max age
--                                   (retry_policy, else this) is not parked but taken, and the
--                                   worker dead-letters it as expired (its header
--                                   hookline_since: first attempted, else published, Unix
--                                   seconds)
-- ARGV[13...]    *endpoints        endpoint ids whose keys follow the doorbells (only with
--                                   ARGV[2] '1')
-- Returns      {kind, waiting, ...}: waiting is '1' when deliveries wait for their share
--              after this call, else '0'; then by kind:
--              {'message', w, n, list key, unacked member, ... (n pairs), parked...} for the n
--                messages taken (each member holds its message: see above);
--              {'last', w, n, pairs..., parked...} the same, when the queues ran empty after
--                them: the doorbells were emptied in the same step (as for 'empty'), so the
--                caller may block on them at once;
--              {'bad', w, list key, item, parked...} for an item that is not a kombu message:
--                it stays on its list until the caller has kept it in the dead-letter queue
--                and removed it (only when no message was taken before it: those come first);
--              {'empty', w, '', parked...} when every list is empty (the doorbells emptied in
--                the same step): the caller blocks on the doorbells, so a push in between is
--                not missed;
--              {'more', w, '', parked...} when ARGV[5] deliveries were parked or set waiting:
--                call again;
--              {'need', w, endpoint id, parked...} when the next message is for an endpoint
--                whose keys were not passed: it stays where it was; call again with them
--                (only when no message was taken before it: those come first).
--              parked: per parked delivery, the JSON array [endpoint id, event id, reason,
--                countdown ms, task id].
--#include piece_clock.lua
--#include piece_held.lua
--#include piece_park.lua
--#include piece_order.lua
--#include piece_leases.lua
local park_held = ARGV[2] == '1'
local parked = {}
local now_ms = nil
local queues = tonumber(ARGV[6])
local most = math.max(tonumber(ARGV[7]) or 1, 1)
local owner = ARGV[8] or ''
if owner ~= '' then
  owner = owner .. ' '
end
local slots = tonumber(ARGV[9]) or 0
local fair = park_held and slots > 0
local dig_above = tonumber(ARGV[10]) or 0
local first_queue = 8
local last_queue = 7 + queues
local waiting_set = KEYS[7]
local schedule = {due = KEYS[2], messages = KEYS[3], meta = KEYS[4], counts = KEYS[5],
                  wake = KEYS[6]}
-- queue list key -> its doorbell
local doorbells = {}
for i = first_queue, last_queue do
  doorbells[KEYS[i]] = KEYS[i + queues]
end
-- endpoint id -> {hash key, schedule index key, waiting list key, leases key}
local endpoint_keys = {}
for j = 13, #ARGV do
  local at = last_queue + queues + 4 * (j - 13) + 1
  endpoint_keys[ARGV[j]] = {KEYS[at], KEYS[at + 1], KEYS[at + 2], KEYS[at + 3]}
end

-- The messages taken so far: list key, member, list key, member...
local taken = {}
-- Fair shares: endpoints known to have waiting deliveries, endpoints met in this call, the
-- messages this call took per endpoint, and each endpoint's hash fields (read once a call).
local waiting = {}
local known = 0
local met = {}
local took = {}
local fields_of = {}
if fair and ARGV[11] == '1' then
  for _, endpoint in ipairs(redis.call('SMEMBERS', waiting_set)) do
    waiting[endpoint] = true
    known = known + 1
  end
end
-- Whether deliveries are known to wait (the caller then looks at all waiting endpoints in its
-- next call); a consumer not told otherwise learns of others' from a 'w' doorbell token or
-- from an endpoint's 'waiting' flag.
local function any_waiting()
  return (fair and next(waiting) ~= nil) and '1' or '0'
end

local function reply(kind, a, b)
  local out = {kind, any_waiting(), a}
  if b ~= nil then
    out[4] = b
  end
  if kind == 'message' or kind == 'last' then
    out = {kind, out[2], #taken / 2}
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

-- The wait before the endpoint whose hash fields are `fields` takes a delivery again (with
-- jitter, so a backlog does not come back at one instant), and why; nil when it takes one now.
local function held(fields)
  local why, wait = hold_of(fields, clock)
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

local function fields(endpoint, own)
  local found = fields_of[endpoint]
  if not found then
    found = redis.call('HMGET', own[1], 'state', 'open_until', 'probe_until', 'blocked_until',
                       'tat', 'book', 'paused_at', 'inflight', 'max_in_flight', 'waiting',
                       'wake', 'ordered', 'retry_policy')
    fields_of[endpoint] = found
    if fair and (tonumber(found[8]) or 0) > 0 then
      -- counted in flight: only the leases that have not run out hold a slot
      found[8] = leases_live(own[4], own[1], clock(), found[8])
    end
    if found[10] and not waiting[endpoint] then
      waiting[endpoint] = true
      known = known + 1
    end
  end
  return found
end

-- endpoint id -> its max age, seconds (its retry_policy's, else ARGV[12]), read once a call
local max_age_of = {}
local function max_age(endpoint, f)
  local found = max_age_of[endpoint]
  if not found then
    found = tonumber(ARGV[12]) or 0
    if f[13] then
      local ok, policy = pcall(cjson.decode, f[13])
      if ok and type(policy) == 'table' and tonumber(policy['max_age']) then
        found = tonumber(policy['max_age'])
      end
    end
    max_age_of[endpoint] = found
  end
  return found
end

-- Whether a delivery (its `headers`) held behind its endpoint (hash fields `f`) has waited
-- past the endpoint's max age.
local function held_too_long(endpoint, headers, f)
  local since = tonumber(headers['hookline_since'])
  if not since then
    return false
  end
  local limit = max_age(endpoint, f)
  return limit > 0 and clock() / 1000 - since > limit
end

-- Whether `endpoint` (hash fields `f`) is at its cap or its share; `behind`: a message taken
-- from the queues, which may have other endpoints' messages behind it.
local function over(endpoint, f, behind)
  local count = (tonumber(f[8]) or 0) + (took[endpoint] or 0)
  local cap = tonumber(f[9]) or 0
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

-- The oldest waiting delivery of `endpoint` (its list key and message), nil when none is left
-- (then the endpoint no longer waits).
local function take_waiting(endpoint, own)
  local entry = redis.call('RPOP', own[3])
  if not entry then
    redis.call('SREM', waiting_set, endpoint)
    redis.call('HDEL', own[1], 'waiting')
    waiting[endpoint] = nil
    known = known - 1
    fields_of[endpoint][10] = false
    return nil
  end
  local split = string.find(entry, '\n', 1, true)
  return string.sub(entry, 1, split - 1), string.sub(entry, split + 1)
end

-- Record `item` (from list `key`, tag and delivery info given) as taken by this consumer.
local function record(key, item, tag, info, endpoint)
  -- The owner, the tag, then the record kombu's QoS.append writes: [raw message, exchange,
  -- routing key]. Scored with the time taken, a step apart within this call, so the records
  -- keep the order they were taken in.
  local member = owner .. cjson.encode(tag) .. '[' .. item .. ',' ..
    cjson.encode(tostring(info['exchange'] or '')) .. ',' ..
    cjson.encode(tostring(info['routing_key'] or '')) .. ']'
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + #taken * 0.00005, member)
  if string.sub(tag, -1) == '0' and doorbells[key] then
    redis.call('LTRIM', doorbells[key], 0, 999)
  end
  taken[#taken + 1] = key
  taken[#taken + 1] = member
  if endpoint then
    took[endpoint] = (took[endpoint] or 0) + 1
    met[endpoint] = true
  end
end

-- An ordered endpoint's delivery (piece_order.lua) goes on only as its key's head: true when
-- it is the head (or becomes it: the key had none), false when it joined the end of its
-- key's line instead, to go when the deliveries before it have gone. Before the holds: a
-- paused or open endpoint's line keeps its order, and only its head waits in the schedule.
local function in_line(own, headers, event, key, item)
  local okey = headers['hookline_okey']
  if type(okey) ~= 'string' or okey == '' then
    okey = headers['hookline_endpoint']  -- the default key: the endpoint itself
  end
  local heads, seqs, lines = order_keys(own[1])
  local head = redis.call('HGET', heads, okey)
  if order_is_head(head, event) then
    return true
  end
  local seq = order_sequence(seqs, okey, headers['hookline_seq'])
  if not head then
    redis.call('HSET', heads, okey, event .. '\n' .. seq)
    return true
  end
  redis.call('RPUSH', lines .. okey, event .. '\n' .. seq .. '\n' .. key .. '\n' .. item)
  redis.call('HINCRBY', own[1], 'order_waiting', 1)
  return false
end

-- Decide on one item: 'taken', 'parked', 'waiting' or 'lined' and its endpoint (nil when it has none
-- Hookline can read), or nil and a reply to return at once. `from_waiting`: the endpoint whose
-- waiting list it came from (nil: from a queue).
local function consider(key, item, from_waiting, aside)
  local ok, message = pcall(cjson.decode, item)
  local props = ok and type(message) == 'table' and message['properties']
  local info = type(props) == 'table' and props['delivery_info']
  local tag = type(props) == 'table' and props['delivery_tag']
  if type(info) ~= 'table' or type(tag) ~= 'string' then
    redis.call('RPUSH', key, item)  -- back on its queue, until the caller has kept it
    if #taken > 0 then
      return nil, reply('message')
    end
    return nil, reply('bad', key, item)
  end
  local headers = message['headers']
  local endpoint = type(headers) == 'table' and headers['hookline_endpoint']
  local event = type(headers) == 'table' and headers['hookline_event']
  local countdown, why, own, f = nil, nil, nil, nil
  if park_held and type(endpoint) == 'string' and type(event) == 'string'
      and #endpoint <= 64 and string.find(endpoint, '^[%w][%w_.%-]*$') then
    own = endpoint_keys[endpoint]
    if not own then
      redis.call('RPUSH', key, item)  -- back where it was (a waiting one's keys are passed)
      if #taken > 0 then
        return nil, reply('message')
      end
      return nil, reply('need', endpoint)
    end
    f = fields(endpoint, own)
    if f[12] == '1' and not in_line(own, headers, event, key, item) then
      return 'lined', endpoint
    end
    countdown, why = held(f)
    if countdown and why ~= 'paused' and held_too_long(endpoint, headers, f) then
      countdown = nil  -- to a worker, which dead-letters it as expired
    end
  else
    endpoint = nil
  end
  if aside and not endpoint then
    redis.call('RPUSH', key, item)  -- not Hookline's to set aside: taken next, as it was
    return nil, reply('message')
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
    return 'parked', endpoint
  end
  if fair and endpoint and not from_waiting
      and (aside or waiting[endpoint] or over(endpoint, f, true)) then
    -- Past its share (or its cap), or others of its deliveries wait already: to the end of
    -- its list.
    redis.call('LPUSH', own[3], key .. '\n' .. item)
    if not f[10] then
      redis.call('HSET', own[1], 'waiting', '1')
      redis.call('SADD', waiting_set, endpoint)
      f[10] = '1'
    end
    if not waiting[endpoint] then
      waiting[endpoint] = true
      known = known + 1
    end
    return 'waiting', endpoint
  end
  record(key, item, tag, info, endpoint)
  return 'taken', endpoint
end

-- Take the oldest waiting delivery of `endpoint` if it is under its share (`behind`: the
-- queues still hold messages, see over): nil, or a reply.
local function serve(endpoint, behind)
  local own = endpoint_keys[endpoint]
  if over(endpoint, fields(endpoint, own), behind) then
    return nil, false
  end
  local key, item = take_waiting(endpoint, own)
  if not key then
    return nil, false
  end
  local outcome, early = consider(key, item, endpoint)
  if not outcome then
    return early, true
  end
  return nil, true
end

local budget = tonumber(ARGV[5]) or 0
local progress = 0
local function spent()
  progress = progress + 1
  if progress >= budget then
    if #taken > 0 then
      return reply('message')
    end
    return reply('more', '')
  end
  return nil
end

-- The waiting endpoint (keys passed) under its share with the fewest in flight, and an
-- endpoint whose keys were not passed, if any.
local function best_waiting(behind)
  local best, best_count, unknown = nil, nil, nil
  for endpoint in pairs(waiting) do
    local own = endpoint_keys[endpoint]
    if not own then
      unknown = unknown or endpoint
    else
      local f = fields(endpoint, own)
      if not over(endpoint, f, behind) then
        local count = (tonumber(f[8]) or 0) + (took[endpoint] or 0)
        if not best or count < best_count then
          best, best_count = endpoint, count
        end
      end
    end
  end
  return best, unknown
end

-- Whether this call filled its batch from one endpoint alone: a backlog of one endpoint may
-- hide others behind it.
local function one_endpoint_filled()
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
  return only ~= nil and took[only] == #taken / 2
end

-- Digging: once a batch is filled from one endpoint, up to ARGV[5] more messages are set
-- aside into their endpoints' waiting lists (each endpoint's in its order), so that the next
-- calls find whoever was queued behind that backlog and serve the endpoints by their counts.
local digging = false
while true do
  if #taken / 2 >= most and not digging then
    if not (fair and one_endpoint_filled()) then
      return reply('message')
    end
    digging = true
  end
  local key, item = take()
  if not key then
    break
  end
  local outcome, early = consider(key, item, nil, digging)
  if not outcome then
    return early
  end
  if outcome == 'waiting' and not digging then
    -- The waiting endpoint with the fewest in flight goes instead, if one is under its share
    -- (this one's oldest, most often).
    local best = best_waiting(true)
    if best then
      local late = serve(best, true)
      if late then
        return late
      end
    end
  end
  if outcome ~= 'taken' then
    local stop = spent()
    if stop then
      return stop
    end
  end
end
-- The queues are empty: waiting deliveries of endpoints under their share, the endpoint with
-- the fewest in flight first.
while fair and next(waiting) ~= nil and #taken / 2 < most do
  local best, unknown = best_waiting(false)
  if not best then
    if unknown and #taken == 0 then
      return reply('need', unknown)
    end
    break
  end
  local early, served = serve(best, false)
  if early then
    return early
  end
  if not served then
    -- its list ran empty (take_waiting forgot it)
    waiting[best] = nil
  end
  local stop = spent()
  if stop then
    return stop
  end
end
if #taken / 2 >= most and fair and next(waiting) ~= nil then
  return reply('message')  -- the batch is full and more may wait their turn: call again
end
-- The caller is about to block on the doorbells while deliveries wait for their endpoints'
-- shares or caps: ask those endpoints' next settles to ring ('wake', settle.lua).
for endpoint in pairs(waiting) do
  local own = endpoint_keys[endpoint]
  if own then
    local f = fields(endpoint, own)
    if f[10] and not f[11] then
      redis.call('HSET', own[1], 'wake', '1')
      f[11] = '1'
    end
  end
end
redis.call('DEL', unpack(KEYS, last_queue + 1, last_queue + queues))
if #taken > 0 then
  return reply('last')
end
return reply('empty', '')
