-- One heartbeat of a consuming process (hookline/transport/liveness.py), and the declaration of the
-- processes that stopped beating: one round trip per process every HOOKLINE_HEARTBEAT_INTERVAL, on Redis
-- time (about eight commands).
-- KEYS[1]  live         hookline:workers:live, sorted set: registration token -> latest
--                       heartbeat (ms)
-- KEYS[2]  dead         hookline:workers:dead, sorted set: token declared dead -> when (ms);
--                       a token stays here until its messages are all restored
-- KEYS[3]  slots        hookline:workers:slots, hash: live token -> slots (messages it may
--                       hold)
-- KEYS[4]  info         hookline:workers:info, hash: token -> what the process says of itself
--                       (JSON)
-- KEYS[5]  clock        hookline:workers:clock, hash: beat (latest heartbeat of anyone, ms),
--                       resumed (when heartbeats came back after a gap), declared, restored
-- ARGV[1]  token        this process's token
-- ARGV[2]  window_ms    the liveness window, ms: a process whose latest heartbeat is older is
--                       dead
-- ARGV[3]  own_slots    this process's slots ('' when unchanged since its last beat)
-- ARGV[4]  description  this process's description (JSON), written when it registers
-- ARGV[5]  register     '1': register (the first beat of a token); '0': an ordinary beat
-- ARGV[6]  most_dead    most processes declared dead in one call
-- Returns  {'fenced'} when this token is no longer live (it was declared dead: its messages
--          were given to others; the caller must register anew), else
--          {'ok', total slots of live processes, live processes, token of a dead process whose
--          messages are still to be restored, ...}.
-- A gap: when nobody beat for half a window (Redis was unreachable, or every process paused),
-- nobody is declared dead until a whole window after the beats came back: every process gets
-- the chance to beat again first, so an outage of Redis is never taken for the death of all.
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local window = tonumber(ARGV[2])
local token = ARGV[1]
local clock = redis.call('HMGET', KEYS[5], 'beat', 'resumed')
local last = tonumber(clock[1])
local resumed = tonumber(clock[2]) or 0
if not last or now - last > window / 2 then
  resumed = now
  redis.call('HSET', KEYS[5], 'beat', now, 'resumed', now)
else
  redis.call('HSET', KEYS[5], 'beat', now)
end
if ARGV[5] == '1' then
  redis.call('ZADD', KEYS[1], now, token)
  redis.call('HSET', KEYS[3], token, ARGV[3])
  redis.call('HSET', KEYS[4], token, ARGV[4])
elseif redis.call('ZADD', KEYS[1], 'XX', 'CH', now, token) == 0
    and not redis.call('ZSCORE', KEYS[1], token) then
  return {'fenced'}
elseif ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], token, ARGV[3])  -- its slots changed (Celery set its prefetch)
end
if now - resumed >= window then
  local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window, 'LIMIT', 0,
                            tonumber(ARGV[6]))
  for _, dead in ipairs(silent) do
    redis.call('ZREM', KEYS[1], dead)
    redis.call('HDEL', KEYS[3], dead)
    redis.call('ZADD', KEYS[2], now, dead)
    redis.call('HINCRBY', KEYS[5], 'declared', 1)
  end
end
local total, live = 0, 0
for _, slots in ipairs(redis.call('HVALS', KEYS[3])) do
  total = total + (tonumber(slots) or 0)
  live = live + 1
end
local reply = {'ok', total, live}
for _, dead in ipairs(redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[6]) - 1)) do
  reply[#reply + 1] = dead
end
return reply
