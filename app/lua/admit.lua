-- Admit one attempt of one event to one endpoint: the gate every send passes, one round trip.
-- KEYS[1]  hookline:{ep}:endpoint        endpoint hash
-- KEYS[2]  hookline:{ep}:done:<event>    set once the event was delivered
-- KEYS[3]  hookline:{ep}:lease:<event>   in-flight lease, value = the holder's token
-- KEYS[4]  hookline:{ep}:starts:<event>  attempts started and not yet settled (crash counter)
-- ARGV[1]  token of this attempt
-- ARGV[2]  lease lifetime, milliseconds
-- ARGV[3]  unsettled starts allowed before the event counts as a poison message
-- ARGV[4]  lifetime of the starts counter, seconds
-- Returns, first element the verdict:
--   {'duplicate'}                  already delivered: send nothing
--   {'missing'}                    no such endpoint
--   {'disabled', reason}           endpoint disabled
--   {'busy', pttl_ms}              another attempt holds the lease
--   {'poison', starts}             started too often without settling (workers died on it)
--   {'admitted', f1, v1, ...}      lease taken; the endpoint hash follows
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'duplicate'}
end
local endpoint = redis.call('HGETALL', KEYS[1])
if #endpoint == 0 then
  return {'missing'}
end
if redis.call('HGET', KEYS[1], 'enabled') == '0' then
  return {'disabled', redis.call('HGET', KEYS[1], 'disabled_reason') or ''}
end
local holder_ttl = redis.call('PTTL', KEYS[3])
if holder_ttl > 0 then
  return {'busy', holder_ttl}
end
local starts = redis.call('INCR', KEYS[4])
redis.call('EXPIRE', KEYS[4], tonumber(ARGV[4]))
if starts > tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[4])
  return {'poison', starts - 1}
end
redis.call('SET', KEYS[3], ARGV[1], 'PX', tonumber(ARGV[2]))
local reply = {'admitted'}
for i = 1, #endpoint do
  reply[#reply + 1] = endpoint[i]
end
return reply
