-- Park a retry in the durable retry schedule, due `countdown` milliseconds from now (Redis time).
-- KEYS[1]  due        hookline:{schedule}:due, sorted set: retry id -> due time (ms)
-- KEYS[2]  messages   hookline:{schedule}:messages, hash: retry id -> broker message, ready to
--                     push
-- KEYS[3]  meta       hookline:{schedule}:meta, hash: retry id -> JSON {endpoint_id, ...}
-- KEYS[4]  counts     hookline:{schedule}:counts, hash: endpoint id -> retries scheduled
-- KEYS[5]  wake       hookline:{schedule}:wake, list: pushed when the earliest due time moves
--                     earlier
-- KEYS[6]  index      hookline:{schedule}:by_endpoint:<endpoint id>, set: the endpoint's retry
--                     ids
-- ARGV[1]  retry_id   <endpoint id>/<event id>: a second copy of an event replaces the first
-- ARGV[2]  countdown_ms  countdown, milliseconds
-- ARGV[3]  message    broker message
-- ARGV[4]  meta_json  meta JSON
-- ARGV[5]  endpoint_id  endpoint id
-- ARGV[6]  max_total  most retries scheduled in all
-- ARGV[7]  max_per_endpoint  most retries scheduled for one endpoint
-- Returns  {'parked', due_ms} or {'full', 'total'|'endpoint', count}
--#include piece_clock.lua
--#include piece_park.lua
local schedule = {due = KEYS[1], messages = KEYS[2], meta = KEYS[3], counts = KEYS[4],
                  wake = KEYS[5]}
local due = redis_now_ms() + tonumber(ARGV[2])
local full, count = park_retry(schedule, KEYS[6], ARGV[1], ARGV[5], due, ARGV[3], ARGV[4],
                               tonumber(ARGV[6]), tonumber(ARGV[7]))
if full then
  return {'full', full, count}
end
return {'parked', due}
