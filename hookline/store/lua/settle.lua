-- Record the outcome of an admitted attempt: idempotency, breaker, Retry-After and the attempt
-- history in one trip.
-- KEYS[1]   endpoint           hookline:{ep}:endpoint, the endpoint hash, with its breaker
--                              (see admit.lua) and its recent record: outcomes (one letter
--                              per attempt, newest last), last_error, last_error_at,
--                              last_error_event, last_success_at (ms of Redis time); nothing
--                              is written there once the endpoint is removed
-- KEYS[2]   record             hookline:{ep}:delivery:<event>, the event's delivery record
--                              (piece_record.lua)
-- KEYS[3]   history            hookline:{ep}:history:<event>, list of the event's attempt
--                              records (JSON), when they are not kept in the delivery record
--                              (ARGV[18])
-- KEYS[4]   leases             hookline:{ep}:leases: this attempt's lease leaves it
--                              (piece_leases.lua)
-- KEYS[5]   doorbell           the doorbell of the delivery queue: a 'w' token is pushed when
--                              this attempt gave back an in-flight slot of an endpoint whose
--                              deliveries wait for their share while a consumer blocked (its
--                              'wake' flag, consume.lua), so one takes the next at once
-- KEYS[6]   records?           the broker's unacked records (only where the broker is this
--                              Redis and the transport folds the acknowledgement in here)
-- ARGV[1]   token              token of the attempt
-- ARGV[2]   outcome            'delivered', 'rejected' (the receiver answered, no retry),
--                              'failed' (retryable: counts toward the breaker), 'throttled'
--                              (429: retryable, but the receiver is up, so not a breaker
--                              failure) or 'gone' (410: disable the endpoint)
-- ARGV[3]   record_ttl         lifetime of the delivery record from this write, seconds
-- ARGV[4]   reason             reason stored on the endpoint when the outcome is 'gone' (with
--                              disabled_at, now in Unix seconds, and disabled_by '': the worker)
-- ARGV[5]   retry_after_ms     Retry-After in milliseconds (capped by the caller), 0 for none
-- ARGV[6]   breaker_threshold  consecutive failures that open the breaker
-- ARGV[7]   cooldown_ms        first cool-down, milliseconds
-- ARGV[8]   max_cooldown_ms    longest cool-down, milliseconds
-- ARGV[9]   attempt_record     this attempt's record (JSON), '' to record nothing in the
--                              history or the recent record
-- ARGV[10]  event_id           event id
-- ARGV[11]  letter             this attempt's letter in the recent outcomes
-- ARGV[12]  last_error         the attempt's error as the endpoint's last error ('' when
--                              delivered)
-- ARGV[13]  history_attempts   attempt records kept per event (the latest)
-- ARGV[14]  history_ttl        lifetime of the event's history list after this attempt,
--                              seconds (0: keep none)
-- ARGV[15]  recent_attempts    outcomes kept in the recent record
-- ARGV[16]  digest             the event's content digest, '' for none
-- ARGV[17]  now_ms             now, ms of Redis time (the admit's time plus the attempt's
--                              duration, as the worker measured it); '' or 0 to read TIME here
-- ARGV[18]  history_in_record  '1': the history lives in the delivery record (its lifetime,
--                              ARGV[3], is the history's); '0': in KEYS[3]
-- ARGV[19]  member             the message's member in KEYS[6], '' for none. The fence: when
--                              it is no longer there, the message was restored to another
--                              worker (this process was declared dead,
--                              hookline/transport/liveness.py) and nothing of this outcome is
--                              written. When ARGV[20] is '1' (the outcome is 'delivered') it is
--                              removed here, so the message is acknowledged in the step that
--                              marks the event done (a round trip less per delivery;
--                              hookline/transport/unacked.py)
-- ARGV[20]  acknowledge        '1' to remove the member (above), '' or '0' only to check it
-- ARGV[21]  ordering_key       the delivery's ordering key, for an ordered endpoint ('' for
--                              none): a delivered head lets the next delivery of its key's
--                              line go (piece_order.lua), in this step
-- ARGV[22]  log_prefix         the event log (piece_log.lua): the endpoint's prefix
--                              hookline:{ep}:, '' to log nothing
-- ARGV[23]  log_shard_prefix   the log shard's prefix (hookline:{log}:) where this script may
--                              touch it, else ''
-- ARGV[24]  endpoint_id        endpoint id
-- ARGV[25]  event_type         event type
-- ARGV[26]  attempt_number     the attempt's number
-- ARGV[27]  status             its HTTP status (0: none)
-- ARGV[28]  log_age_ms         the log's retention, ms
-- ARGV[29]  log_rows           most log rows per endpoint
--                              The row's status: delivered, else retrying (a dead letter's
--                              write follows, dead)
-- Returns  {held, transition, fenced, now, was, was_type}: held is 1 if this attempt still held its lease;
--          transition is 'opened' or 'closed' when this outcome changed the breaker's state,
--          else ''; fenced is 1 when a fence refused the outcome (nothing written): the
--          record gone (above), or the lease now held by another attempt (below); now is the
--          Redis time written; was, was_type: the log row's previous index entry when this
--          changed it (a cluster's caller removes it from its shard, piece_log.lua)
-- The endpoint's in-flight count (admit.lua) goes down by one when the attempt's lease was
-- still among the endpoint's leases (one that ran out and was pruned was counted out then;
-- one taken over went with the takeover).
-- Commands: the delivery record read with one GET and written with one SET; the endpoint's
-- breaker and recent record read with one HMGET and written with one HSET (an HDEL when a
-- state ends);
-- a Retry-After block that has passed is dropped here, so consume.lua needs no clock for a
-- plainly closed breaker.
--#include piece_clock.lua
--#include piece_record.lua
--#include piece_order.lua
--#include piece_log.lua
local outcome = ARGV[2]
if ARGV[19] and ARGV[19] ~= '' then
  if ARGV[20] == '1' then
    if redis.call('ZREM', KEYS[6], ARGV[19]) == 0 then
      return {0, '', 1}
    end
  elseif not redis.call('ZSCORE', KEYS[6], ARGV[19]) then
    return {0, '', 1}
  end
end
local now = tonumber(ARGV[17]) or 0
if now <= 0 then
  now = redis_now_ms()
end
local transition = ''

local state, rest = read_record(redis.call('GET', KEYS[2]))
if state['t'] and state['t'] ~= ARGV[1] then
  -- The fence on any broker: another attempt took this one's lease over (it ran out while
  -- this worker was paused or cut off, and the message went to another worker): that
  -- attempt's outcome is the one that counts. Nothing is written.
  return {0, '', 1}
end
local held = 0
if state['t'] == ARGV[1] then
  state['t'], state['lu'] = nil, nil
  held = 1
end
state['s'], state['su'] = nil, nil
if outcome == 'delivered' then
  state['done'] = 1
  if ARGV[16] ~= '' then
    state['d'] = ARGV[16]
  end
end

local breaker = redis.call('HMGET', KEYS[1], 'state', 'failures', 'cooldown_ms', 'probe_token',
                           'blocked_until', 'outcomes', 'url', 'inflight', 'wake')
local set = {}
local function put(field, value)
  set[#set + 1] = field
  set[#set + 1] = value
end
if outcome == 'gone' then
  put('enabled', '0'); put('disabled_reason', ARGV[4])
  put('disabled_at', string.format('%.3f', now / 1000)); put('disabled_by', '')
end
local drop = {}
local breaker_state = breaker[1] or 'closed'
if outcome == 'failed' then
  local failures = (tonumber(breaker[2]) or 0) + 1
  if breaker_state == 'half_open' and breaker[4] == ARGV[1] then
    local cooldown = math.min(math.max((tonumber(breaker[3]) or 0) * 2, tonumber(ARGV[7])),
                              tonumber(ARGV[8]))
    put('state', 'open'); put('failures', failures); put('cooldown_ms', cooldown)
    put('open_until', now + cooldown); put('opened_at', now)
    drop = {'probe_until', 'probe_token'}
    transition = 'opened'
  elseif breaker_state == 'closed' and failures >= tonumber(ARGV[6]) then
    put('state', 'open'); put('failures', failures); put('cooldown_ms', ARGV[7])
    put('open_until', now + tonumber(ARGV[7])); put('opened_at', now)
    transition = 'opened'
  else
    put('failures', failures)
  end
elseif outcome == 'delivered' or outcome == 'rejected' or outcome == 'throttled' then
  -- The receiver answered: it is up. A half-open breaker closes; a closed one forgets.
  if breaker_state == 'half_open' then
    put('state', 'closed'); put('failures', 0); put('cooldown_ms', 0)
    drop = {'open_until', 'probe_until', 'probe_token', 'opened_at'}
    transition = 'closed'
  elseif breaker_state == 'closed' and (tonumber(breaker[2]) or 0) > 0 then
    put('failures', 0)
  end
end

if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 and breaker[8] then
  put('inflight', math.max(0, (tonumber(breaker[8]) or 0) - 1))
  if breaker[9] then
    -- deliveries wait for this endpoint's share and a consumer blocked (consume.lua's wake)
    redis.call('LPUSH', KEYS[5], 'w')
    drop[#drop + 1] = 'wake'
  end
end

local retry_after = tonumber(ARGV[5]) or 0
if retry_after > 0 and now + retry_after > (tonumber(breaker[5]) or 0) then
  put('blocked_until', now + retry_after)
elseif breaker[5] and (tonumber(breaker[5]) or 0) <= now then
  drop[#drop + 1] = 'blocked_until'  -- over: nothing to compare with any more
end

if ARGV[9] ~= '' then
  local retention = tonumber(ARGV[14])
  local kept = tonumber(ARGV[13])
  if ARGV[18] == '1' then
    rest = rest .. '\n' .. ARGV[9]
    local lines = (tonumber(state['hn']) or 0) + 1
    while lines > kept do
      rest = string.sub(rest, (string.find(rest, '\n', 2, true) or (#rest + 1)))
      lines = lines - 1
    end
    state['hn'] = lines
  elseif retention > 0 then
    if redis.call('RPUSH', KEYS[3], ARGV[9]) > kept then
      redis.call('LTRIM', KEYS[3], -kept, -1)
    end
    redis.call('EXPIRE', KEYS[3], retention)
  end
  put('outcomes', string.sub((breaker[6] or '') .. ARGV[11], -tonumber(ARGV[15])))
  if outcome == 'delivered' then
    put('last_success_at', now)
  else
    put('last_error', ARGV[12]); put('last_error_at', now); put('last_error_event', ARGV[10])
  end
end

redis.call('SET', KEYS[2], record_text(state, rest), 'EX', tonumber(ARGV[3]))
local logged = {'', '', ''}
if ARGV[22] and ARGV[22] ~= '' then
  logged = {log_write(ARGV[22], ARGV[23], ARGV[24], ARGV[10], outcome == 'delivered' and 'd' or 'r',
            ARGV[25], tonumber(ARGV[26]), tonumber(ARGV[27]), now, tonumber(ARGV[28]),
            tonumber(ARGV[29]))}
end
if outcome == 'delivered' and ARGV[21] and ARGV[21] ~= '' then
  order_advance(KEYS[1], ARGV[21], ARGV[10], KEYS[5])
end
if not breaker[7] then
  -- the endpoint was removed meanwhile: nothing to record there
  return {held, transition, 0, now, logged[2], logged[3]}
end
if #set > 0 then
  redis.call('HSET', KEYS[1], unpack(set))
end
if #drop > 0 then
  redis.call('HDEL', KEYS[1], unpack(drop))
end
return {held, transition, 0, now, logged[2], logged[3]}
