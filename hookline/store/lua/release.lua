-- Release due retries, earliest first, in one atomic step: several releasers never release a
-- retry twice and never lose one.
-- KEYS[1]     due          hookline:{schedule}:due
-- KEYS[2]     messages     hookline:{schedule}:messages
-- KEYS[3]     meta         hookline:{schedule}:meta
-- KEYS[4]     counts       hookline:{schedule}:counts
-- KEYS[5]     release_to   the retry queue's list in the broker (same Redis) when ARGV[3] is
--                          'push'; hookline:{schedule}:releasing (sorted set: retry id ->
--                          lease end) when 'claim'
-- KEYS[6]     doorbell?    ('push' only) the retry queue's doorbell in the broker: a list of
--                          wake-up tokens, one per released message (at most 64): each wakes
--                          one idle consumer
-- KEYS[7...]  *indexes     ('push' only) hookline:{schedule}:by_endpoint:<endpoint id of
--                          ARGV[3+i]>, the i-th of them
-- ARGV[1]     most         most retries to release in this call
-- ARGV[2]     limit        'push': most messages the retry queue may hold (retries wait here,
--                          not in the queue, so first deliveries keep their share of the
--                          workers); 'claim': lease, ms
-- ARGV[3]     mode         'push' (the broker is this Redis: push the messages onto its list)
--                          or 'claim' (the broker is elsewhere: hand the messages to the
--                          caller, who pushes them and confirms)
-- ARGV[4...]  *candidates  ('push' only) the earliest retry ids of the due set as the caller
--                          read them just before (so that their endpoints' index keys come in
--                          KEYS), earliest first. Those still scheduled and due now are
--                          released; one another releaser took meanwhile is skipped and
--                          counted as stale; one due now but not among them waits for the
--                          next call.
-- 'claim' leaves the claimed retries scheduled (in meta, counts and their endpoint's index)
-- until the caller confirms them with confirm.lua; one whose lease ran out is due again.
-- Returns  {released, next_due_ms or -1, now_ms, stale} for 'push';
--          {released, next_due_ms or -1, now_ms, id, message, id, message, ...} for 'claim'
--#include piece_clock.lua
--#include piece_park.lua
local now = redis_now_ms()
local mode = ARGV[3]
local room = tonumber(ARGV[1])
local reply = {0, -1, now}
if mode == 'push' then
  room = math.min(room, tonumber(ARGV[2]) - redis.call('LLEN', KEYS[5]))
  local schedule = {due = KEYS[1], messages = KEYS[2], meta = KEYS[3], counts = KEYS[4]}
  local stale = 0
  for i = 4, #ARGV do
    if reply[1] >= room then
      break
    end
    local id = ARGV[i]
    local due = redis.call('ZSCORE', KEYS[1], id)
    if not due then
      stale = stale + 1
    elseif tonumber(due) <= now then
      local message = redis.call('HGET', KEYS[2], id)
      redis.call('ZREM', KEYS[1], id)
      if message then
        redis.call('LPUSH', KEYS[5], message)
      end
      forget_retry(schedule, KEYS[6 + i - 3], id)
      reply[1] = reply[1] + 1
    end
  end
  reply[4] = stale
  if reply[1] > 0 then
    local tokens = {}
    for t = 1, math.min(reply[1], 64) do
      tokens[t] = '1'
    end
    redis.call('LPUSH', KEYS[6], unpack(tokens))
  end
else
  -- A releaser that claimed retries and died before confirming: they are due again (NX: one
  -- parked again meanwhile keeps its new due time).
  local expired = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
  for _, id in ipairs(expired) do
    redis.call('ZREM', KEYS[5], id)
    redis.call('ZADD', KEYS[1], 'NX', now, id)
  end
  if room > 0 then
    local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, room)
    for _, id in ipairs(ids) do
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), id)
      reply[#reply + 1] = id
      reply[#reply + 1] = redis.call('HGET', KEYS[2], id) or ''
      reply[1] = reply[1] + 1
    end
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head > 0 then
  reply[2] = tonumber(head[2])
end
return reply
