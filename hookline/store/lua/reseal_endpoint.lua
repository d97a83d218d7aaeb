-- Replace an endpoint's sealed credential fields, only if each still holds what the caller
-- read (hookline secrets reencrypt): a concurrent save or remove wins, and is read again.
-- KEYS[1]     endpoint  hookline:{ep}:endpoint (hash)
-- ARGV[1...]  *changes  field, value read, new value, field, value read, new value, ...
-- Returns  1 if replaced, 0 if the endpoint changed or is gone.
if redis.call('HEXISTS', KEYS[1], 'url') == 0 then return 0 end
for i = 1, #ARGV, 3 do
  if (redis.call('HGET', KEYS[1], ARGV[i]) or '') ~= ARGV[i + 1] then return 0 end
end
for i = 1, #ARGV, 3 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
end
return 1
