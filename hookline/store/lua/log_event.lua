-- Record an event's latest status in the event log (piece_log.lua), where no other script of the
-- step already does (settle.lua does at every attempt): held, dead-lettered, and a row's index
-- entry on a Redis Cluster's shard.
-- KEYS[1]   slot             a key of the slot written: hookline:{ep}:log, or on a cluster
--                             a shard's index (see ARGV[1]); the keys are named from the
--                             prefixes below
-- ARGV[1]   mode             'row': write the endpoint's row (and the shard's index when
--                             ARGV[3] is given); 'index': only the shard's index entry of a
--                             row written elsewhere (a cluster's second step), ARGV[3] the
--                             shard's prefix
-- ARGV[2]   endpoint_prefix  the endpoint's prefix, hookline:{ep}:
-- ARGV[3]   shard_prefix     the shard's prefix (hookline:{log}:), '' for none
-- ARGV[4]   endpoint_id      endpoint id
-- ARGV[5]   event_id         event id
-- ARGV[6]   letter           status letter (d, r, h, x)
-- ARGV[7]   event_type       event type ('' keeps the row's)
-- ARGV[8]   attempts         attempts (-1 keeps the row's)
-- ARGV[9]   status           last HTTP status (0 none, -1 keeps the row's)
-- ARGV[10]  now              now, ms of Redis time (0: read TIME here)
-- ARGV[11]  age_ms           retention, ms
-- ARGV[12]  most_rows        most rows per endpoint
-- ARGV[13]  was_letter?      ('index' only) the letter of the row's previous index entry, to
--                             remove ('' for none)
-- ARGV[14]  was_type?        ('index' only) and its type
-- Returns  {event type, now, previous letter, previous type} (see piece_log.lua)
--#include piece_clock.lua
--#include piece_log.lua
local now = tonumber(ARGV[10]) or 0
if now <= 0 then
  now = redis_now_ms()
end
if ARGV[1] == 'index' then
  local index = ARGV[3] .. 'ix:' .. ARGV[6] .. ':' .. ARGV[7]
  redis.call('ZADD', index, now, ARGV[4] .. '/' .. ARGV[5])
  redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. (now - tonumber(ARGV[11])))
  redis.call('SADD', ARGV[3] .. 'types', ARGV[7])
  if ARGV[13] and ARGV[13] ~= '' then
    redis.call('ZREM', ARGV[3] .. 'ix:' .. ARGV[13] .. ':' .. ARGV[14], ARGV[4] .. '/' .. ARGV[5])
  end
  return {ARGV[7], now, '', ''}
end
local event_type, was, was_type = log_write(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7],
                             tonumber(ARGV[8]), tonumber(ARGV[9]), now, tonumber(ARGV[11]),
                             tonumber(ARGV[12]))
return {event_type, now, was, was_type}
