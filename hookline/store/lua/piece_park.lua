-- Piece (included with "--#include piece_park.lua"): one retry into and out of the retry
-- schedule, with the caps and the counts. park.lua and consume.lua park with it; release.lua,
-- unpark.lua and confirm.lua take retries out with it.
-- `schedule` is a table of keys, all passed in KEYS (hash tag {schedule}, or one shard's
-- {schedule:<n>} on a Redis Cluster: every key of a call in that one slot):
--   due       sorted set: retry id -> due time (ms)
--   messages  hash: retry id -> broker message, ready to push
--   meta      hash: retry id -> JSON {endpoint_id, event_id, ...}; a retry is scheduled (and
--             counted) exactly while it has a meta entry
--   counts    hash: endpoint id -> retries scheduled
--   wake      list: pushed when the earliest due time moves earlier (park only)
-- `index` is the endpoint's set of scheduled retry ids (hookline:{schedule}:by_endpoint:<ep>,
-- in the endpoint's shard, passed in KEYS), so a 410 or a disable finds them without a scan of
-- the whole schedule. `max_total` is the shard's share of the total cap.
-- Invariant: for every endpoint, counts[endpoint] = SCARD(index) = its entries in meta.

-- park_retry(schedule, index, id, endpoint, due, message, meta, max_total, max_per_endpoint)
--   Schedules `id` due at `due` (ms of Redis time); a retry already scheduled is replaced
--   (never capped, not counted twice). Returns nil when parked, or 'total'|'endpoint', count
--   at a cap (nothing written).
local function park_retry(schedule, index, id, endpoint, due, message, meta, max_total,
                          max_per_endpoint)
  if redis.call('HEXISTS', schedule.meta, id) == 0 then
    local total = redis.call('ZCARD', schedule.due)
    if total >= max_total then
      return 'total', total
    end
    local count = tonumber(redis.call('HGET', schedule.counts, endpoint)) or 0
    if count >= max_per_endpoint then
      return 'endpoint', count
    end
    redis.call('HINCRBY', schedule.counts, endpoint, 1)
  end
  local head = redis.call('ZRANGE', schedule.due, 0, 0, 'WITHSCORES')
  redis.call('ZADD', schedule.due, due, id)
  redis.call('HSET', schedule.messages, id, message)
  redis.call('HSET', schedule.meta, id, meta)
  redis.call('SADD', index, id)
  if #head == 0 or due < tonumber(head[2]) then
    -- Due before everything else: wake a sleeping releaser so it does not oversleep.
    redis.call('LPUSH', schedule.wake, due)
    redis.call('LTRIM', schedule.wake, 0, 15)
  end
  return nil
end

-- forget_retry(schedule, index, id)
--   Takes `id` out of the schedule's message, meta and counts and out of its endpoint's index
--   (the due set and the releasing set are the caller's: release and unpark differ there).
--   Returns true when it was still scheduled.
local function forget_retry(schedule, index, id)
  local meta = redis.call('HGET', schedule.meta, id)
  redis.call('HDEL', schedule.messages, id)
  redis.call('SREM', index, id)
  if not meta then
    return false
  end
  redis.call('HDEL', schedule.meta, id)
  local endpoint = cjson.decode(meta)['endpoint_id']
  if redis.call('HINCRBY', schedule.counts, endpoint, -1) <= 0 then
    redis.call('HDEL', schedule.counts, endpoint)
  end
  return true
end
