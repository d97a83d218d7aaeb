-- Park a retry in the durable retry schedule, due `countdown` milliseconds from now (Redis time).
-- KEYS[1]  hookline:{schedule}:due       sorted set: retry id -> due time (ms)
-- KEYS[2]  hookline:{schedule}:messages  hash: retry id -> broker message, ready to push
-- KEYS[3]  hookline:{schedule}:meta      hash: retry id -> JSON {endpoint_id, ...}
-- KEYS[4]  hookline:{schedule}:counts    hash: endpoint id -> retries scheduled
-- KEYS[5]  hookline:{schedule}:wake      list: pushed when the earliest due time moves earlier
-- KEYS[6]  hookline:{schedule}:by_endpoint:<endpoint id>  set: the endpoint's retry ids
-- ARGV[1]  retry id (<endpoint id>/<event id>: a second copy of an event replaces the first)
-- ARGV[2]  countdown, milliseconds
-- ARGV[3]  broker message
-- ARGV[4]  meta JSON
-- ARGV[5]  endpoint id
-- ARGV[6]  most retries scheduled in all
-- ARGV[7]  most retries scheduled for one endpoint
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
