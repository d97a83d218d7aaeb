-- Piece (included with "--#include piece_log.lua"): the event log (hookline/store/event_log.py),
-- one row per event per endpoint, its latest status. Per endpoint (its hash tag, ep_prefix is
-- 'hookline:{<ep>}:'): ep_prefix..'log', a sorted set (event id -> ms of Redis time of the
-- latest change), and ep_prefix..'log_rows', a hash (event id -> JSON row
-- [status letter, attempts, last HTTP status or 0, event type, first seen ms, latest ms]).
-- Per shard (shard_prefix 'hookline:{log}:' or 'hookline:{log:<n>}:', the endpoint's shard):
-- shard_prefix..'ix:<letter>:<type>', sorted sets of '<endpoint>/<event>' by the latest change,
-- one per status and event type, and shard_prefix..'types', the set of types indexed. A shard is
-- in another slot than the endpoint: shard_prefix is given only where one script may touch both
-- (a single Redis); on a Redis Cluster it is '' and the caller indexes the row in the shard
-- (event_log.py), and the reader skips index entries that no longer match their row.
-- Letters: d delivered, r retrying, h held, x dead.
-- log_write(ep_prefix, shard_prefix, endpoint, event, letter, event_type, attempts, code, now,
--           age_ms, most)
--   event_type '' keeps the row's; attempts or code below 0 keep the row's (0 for a new row).
--   Retention: the endpoint's rows past `most` (the oldest changed) go at every write, a
--   bounded number per call. Rows older than `age_ms` go at an upkeep, which runs at most once
--   per `log_upkeep_every(age_ms)` per endpoint (the rows' hash field ' upkeep' holds when the
--   next is due, in the writes' clock, read with the row in one HMGET): the age
--   trim, the shard index's age trim, and the two keys' expiry, `age_ms` plus that interval
--   after the upkeep, so a quiet endpoint's log still expires, never before its rows' retention.
--   Readers skip rows past the retention, so a row an upkeep has not trimmed yet is never shown.
--   Amortized, a write costs 6 commands instead of 11 (tests/scale/test_redis_cost.py).
--   Returns the row's event type, and the letter and type it had when either changed ('', ''
--   otherwise): the index entry a caller indexing elsewhere (a cluster) removes.
local LOG_TRIM = 100
local LOG_UPKEEP = ' upkeep'  -- a field of the rows' hash no event id can be (ids are visible)

local function log_upkeep_every(age_ms)
  return math.max(1, math.min(math.floor(age_ms / 10), 10000))
end

local function log_row(text)
  if not text then
    return nil
  end
  local ok, row = pcall(cjson.decode, text)
  if ok and type(row) == 'table' and type(row[1]) == 'string' and type(row[4]) == 'string'
      and tonumber(row[2]) and tonumber(row[3]) then
    return row
  end
  return nil  -- unreadable: written anew (a bad row never fails the script it is part of)
end

local function log_forget(ep_prefix, shard_prefix, endpoint, events)
  if #events == 0 then
    return
  end
  if shard_prefix ~= '' then
    local rows = redis.call('HMGET', ep_prefix .. 'log_rows', unpack(events))
    for i = 1, #events do
      local row = log_row(rows[i])
      if row then
        redis.call('ZREM', shard_prefix .. 'ix:' .. row[1] .. ':' .. row[4],
                   endpoint .. '/' .. events[i])
      end
    end
  end
  redis.call('HDEL', ep_prefix .. 'log_rows', unpack(events))
  redis.call('ZREM', ep_prefix .. 'log', unpack(events))
end

local function log_write(ep_prefix, shard_prefix, endpoint, event, letter, event_type, attempts,
                         code, now, age_ms, most)
  local rows_key, log_key = ep_prefix .. 'log_rows', ep_prefix .. 'log'
  local member = endpoint .. '/' .. event
  local read = redis.call('HMGET', rows_key, event, LOG_UPKEEP)
  local row, due = log_row(read[1]), tonumber(read[2])
  local first = now
  if row then
    if event_type == '' then
      event_type = row[4]
    end
    if attempts < 0 then
      attempts = row[2]
    end
    if code < 0 then
      code = row[3]
    end
    first = tonumber(row[5]) or now
    if shard_prefix ~= '' and (row[1] ~= letter or row[4] ~= event_type) then
      redis.call('ZREM', shard_prefix .. 'ix:' .. row[1] .. ':' .. row[4], member)
    end
  end
  if attempts < 0 then
    attempts = 0
  end
  if code < 0 then
    code = 0
  end
  redis.call('HSET', rows_key, event,
             cjson.encode({letter, attempts, code, event_type, first, now}))
  redis.call('ZADD', log_key, now, event)
  if shard_prefix ~= '' then
    local index = shard_prefix .. 'ix:' .. letter .. ':' .. event_type
    redis.call('ZADD', index, now, member)
    redis.call('SADD', shard_prefix .. 'types', event_type)
  end
  local over = redis.call('ZCARD', log_key) - most
  if over > 0 then
    log_forget(ep_prefix, shard_prefix, endpoint,
               redis.call('ZRANGE', log_key, 0, math.min(over, LOG_TRIM) - 1))
  end
  if not due or now >= due then
    local every = log_upkeep_every(age_ms)
    log_forget(ep_prefix, shard_prefix, endpoint,
               redis.call('ZRANGEBYSCORE', log_key, '-inf', '(' .. (now - age_ms),
                          'LIMIT', 0, LOG_TRIM))
    if shard_prefix ~= '' then
      redis.call('ZREMRANGEBYSCORE', shard_prefix .. 'ix:' .. letter .. ':' .. event_type,
                 '-inf', '(' .. (now - age_ms))
    end
    redis.call('HSET', rows_key, LOG_UPKEEP, now + every)
    redis.call('PEXPIRE', log_key, age_ms + every)
    redis.call('PEXPIRE', rows_key, age_ms + every)
  end
  if row and (row[1] ~= letter or row[4] ~= event_type) then
    return event_type, row[1], row[4]
  end
  return event_type, '', ''
end
