-- Take the next message off the broker's queues and record it as unacknowledged in the same
-- atomic step. kombu's Redis transport pops with BRPOP and records the message in a second
-- round trip: a worker killed between the two (or a reply lost in flight) loses the message.
-- Here a message is never off its list without being in the unacked records, so a worker that
-- dies at any point leaves it to be restored after the visibility timeout.
--
-- One script, one EVALSHA, in pieces, one per concern:
--   piece_queues.lua   the queues' lists and their doorbells: taking, trimming, emptying
--   piece_unacked.lua  the unacked record each message taken is written as
--   piece_lines.lua    an ordered endpoint's delivery goes only as its key's head
--   piece_holding.lua  held endpoints (when ARGV[2] is '1': Hookline's state lives in this
--                      Redis): their deliveries parked in the retry schedule, not sent to a
--                      worker to be deferred
--   piece_shares.lua   fair shares (when ARGV[2] is '1' and ARGV[9] > 0): an endpoint's
--                      messages beyond its share of the live workers' slots, or its cap, wait
--                      in its own list
-- and this file decides on each message in turn (consider, below) and answers.
-- The endpoint and event ids come from the message headers hookline_endpoint and
-- hookline_event (set on publish); a message whose endpoint id is not a valid one goes to a
-- worker, which dead-letters it. Every key comes through KEYS: the caller passes the keys of
-- the endpoints it expects (ARGV[13...]); a message for another endpoint stops the call with
-- 'need', and the caller calls again with that endpoint's keys added. A call that leaves
-- deliveries waiting for their shares and lets its caller block sets the endpoints' 'wake'
-- flag; settle.lua then rings the doorbell ('w') when such an endpoint finishes an attempt, so
-- they go as soon as it is back under its share.
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
--                messages taken (each member holds its message: piece_unacked.lua);
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
--#include piece_queues.lua
--#include piece_unacked.lua
--#include piece_lines.lua
--#include piece_holding.lua
--#include piece_shares.lua
local park_held = ARGV[2] == '1'
local queue_count = tonumber(ARGV[6])
local most = math.max(tonumber(ARGV[7]) or 1, 1)
local slots = tonumber(ARGV[9]) or 0
local fair = park_held and slots > 0
local schedule = {due = KEYS[2], messages = KEYS[3], meta = KEYS[4], counts = KEYS[5],
                  wake = KEYS[6]}
local lists, bells = {}, {}
for i = 1, queue_count do
  lists[i] = KEYS[7 + i]
  bells[i] = KEYS[7 + queue_count + i]
end
-- endpoint id -> {hash key, schedule index key, waiting list key, leases key}
local endpoint_keys = {}
for j = 13, #ARGV do
  local at = 7 + 2 * queue_count + 4 * (j - 13) + 1
  endpoint_keys[ARGV[j]] = {KEYS[at], KEYS[at + 1], KEYS[at + 2], KEYS[at + 3]}
end

-- Redis time, read once and only when needed: a plainly closed breaker needs none.
local now_ms = nil
local function clock()
  if not now_ms then
    now_ms = redis_now_ms()
  end
  return now_ms
end

local queues = queues_of(lists, bells)
local unacked = unacked_of(KEYS[1], tonumber(ARGV[1]), ARGV[8] or '')
local holding = holding_of(schedule, clock, tonumber(ARGV[3]), tonumber(ARGV[4]),
                           tonumber(ARGV[12]) or 0)
local shares = shares_of(fair, slots, tonumber(ARGV[10]) or 0, KEYS[7], clock)
if fair and ARGV[11] == '1' then
  shares.look_all()
end

local function reply(kind, a, b)
  local out = {kind, shares.any() and '1' or '0', a}
  if b ~= nil then
    out[4] = b
  end
  if kind == 'message' or kind == 'last' then
    out = {kind, out[2], unacked.count()}
    for _, value in ipairs(unacked.taken) do
      out[#out + 1] = value
    end
  end
  for _, entry in ipairs(holding.parked) do
    out[#out + 1] = entry
  end
  return out
end

-- An endpoint's hash fields, read once a call: hold (the seven piece_held.lua reads, then the
-- rest as read), inflight, max_in_flight, waiting, wake, ordered and retry_policy.
local fields_of = {}
local function fields(endpoint, own)
  local found = fields_of[endpoint]
  if not found then
    local values = redis.call('HMGET', own[1], 'state', 'open_until', 'probe_until',
                              'blocked_until', 'tat', 'book', 'paused_at', 'inflight',
                              'max_in_flight', 'waiting', 'wake', 'ordered', 'retry_policy')
    found = {hold = values, inflight = values[8], max_in_flight = values[9],
             waiting = values[10], wake = values[11], ordered = values[12],
             retry_policy = values[13]}
    fields_of[endpoint] = found
    shares.met(endpoint, own, found)
  end
  return found
end

-- Decide on one item: 'taken', 'parked', 'waiting' or 'lined' and its endpoint (nil when it
-- has none Hookline can read), or nil and a reply to return at once. `from_waiting`: the
-- endpoint whose waiting list it came from (nil: from a queue); `aside`: digging (below).
local function consider(key, item, from_waiting, aside)
  local ok, message = pcall(cjson.decode, item)
  local props = ok and type(message) == 'table' and message['properties']
  local info = type(props) == 'table' and props['delivery_info']
  local tag = type(props) == 'table' and props['delivery_tag']
  if type(info) ~= 'table' or type(tag) ~= 'string' then
    redis.call('RPUSH', key, item)  -- back on its queue, until the caller has kept it
    if unacked.count() > 0 then
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
      if unacked.count() > 0 then
        return nil, reply('message')
      end
      return nil, reply('need', endpoint)
    end
    f = fields(endpoint, own)
    if f.ordered == '1' and not in_line(own[1], headers, event, key, item) then
      return 'lined', endpoint
    end
    countdown, why = holding.countdown(endpoint, f, headers)
  else
    endpoint = nil
  end
  if aside and not endpoint then
    redis.call('RPUSH', key, item)  -- not Hookline's to set aside: taken next, as it was
    return nil, reply('message')
  end
  if countdown and holding.park(own[2], endpoint, event, headers, item, countdown, why) then
    return 'parked', endpoint
  end
  if fair and endpoint and not from_waiting
      and (aside or shares.waits(endpoint) or shares.over(endpoint, f, true)) then
    -- Past its share (or its cap), or others of its deliveries wait already: to the end of
    -- its list.
    shares.set_waiting(endpoint, own, f, key, item)
    return 'waiting', endpoint
  end
  unacked.record(key, item, tag, info)
  queues.taken_from(key, tag)
  if endpoint then
    shares.took(endpoint)
  end
  return 'taken', endpoint
end

-- Take the oldest waiting delivery of `endpoint` if it is under its share (`behind`: the
-- queues still hold messages, see shares.over): nil, or a reply.
local function serve(endpoint, behind)
  local own = endpoint_keys[endpoint]
  local f = fields(endpoint, own)
  if shares.over(endpoint, f, behind) then
    return nil, false
  end
  local key, item = shares.take_waiting(endpoint, own, f)
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
    if unacked.count() > 0 then
      return reply('message')
    end
    return reply('more', '')
  end
  return nil
end

-- Digging: once a batch is filled from one endpoint, up to ARGV[5] more messages are set
-- aside into their endpoints' waiting lists (each endpoint's in its order), so that the next
-- calls find whoever was queued behind that backlog and serve the endpoints by their counts.
local digging = false
while true do
  if unacked.count() >= most and not digging then
    if not (fair and shares.one_endpoint_filled(most, unacked.count())) then
      return reply('message')
    end
    digging = true
  end
  local key, item = queues.take()
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
    local best = shares.best_waiting(true, endpoint_keys, fields)
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
while shares.any() and unacked.count() < most do
  local best, unknown = shares.best_waiting(false, endpoint_keys, fields)
  if not best then
    if unknown and unacked.count() == 0 then
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
    shares.forget(best)
  end
  local stop = spent()
  if stop then
    return stop
  end
end
if unacked.count() >= most and shares.any() then
  return reply('message')  -- the batch is full and more may wait their turn: call again
end
-- The caller is about to block on the doorbells while deliveries wait for their endpoints'
-- shares or caps: ask those endpoints' next settles to ring ('wake', settle.lua).
shares.ask_wake(endpoint_keys, fields)
queues.silence()
if unacked.count() > 0 then
  return reply('last')
end
return reply('empty', '')
