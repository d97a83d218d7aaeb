-- Piece (included with "--#include piece_clock.lua"): Redis server time, so workers' clocks
-- do not matter.
-- redis_now_ms()  now in milliseconds of Redis time.
local function redis_now_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
