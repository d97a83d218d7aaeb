-- Whether an endpoint takes a delivery now, by the rule admit.lua applies (piece_held.lua):
-- read by a releaser before it publishes claimed retries to a broker apart from this Redis,
-- so that a held endpoint's retries stay in the schedule instead of travelling to a worker.
-- KEYS[1]  breaker  hookline:{ep}:endpoint, the hash holding the endpoint's breaker
-- Returns  {why, wait_ms, probe}: why is '' (not held), 'paused', 'breaker_open', 'breaker_probe' or
--          'blocked'; probe is '1' when the next attempt would be the half-open probe.
--#include piece_clock.lua
--#include piece_held.lua
local why, wait, probe = endpoint_hold(KEYS[1], redis_now_ms())
return {why or '', wait, probe and '1' or '0'}
