-- Record the outcome of an admitted attempt: one round trip.
-- KEYS[1]  hookline:{ep}:endpoint        endpoint hash
-- KEYS[2]  hookline:{ep}:done:<event>
-- KEYS[3]  hookline:{ep}:lease:<event>
-- KEYS[4]  hookline:{ep}:starts:<event>
-- ARGV[1]  token of the attempt
-- ARGV[2]  outcome: 'delivered', 'failed' or 'gone'
-- ARGV[3]  lifetime of the done marker, seconds
-- ARGV[4]  reason stored on the endpoint when the outcome is 'gone'
-- Returns  1 if this attempt still held the lease, 0 if it had expired or passed to another.
local outcome = ARGV[2]
if outcome == 'delivered' then
  redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[3]))
elseif outcome == 'gone' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'enabled', '0', 'disabled_reason', ARGV[4])
end
redis.call('DEL', KEYS[4])
if redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  return 1
end
return 0
