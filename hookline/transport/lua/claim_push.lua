-- send_webhook's enqueue in one round trip when the broker is Hookline's own Redis: bind the
-- event id to its content (piece_claim.lua, as claim.lua) and, unless the endpoint is unknown
-- or the id is bound to another content, push the task message onto its queue and a wake-up
-- token onto the queue's doorbell (hookline/transport/push.py's publish). Nothing is pushed otherwise.
-- KEYS[1]  endpoint    hookline:{ep}:endpoint, the endpoint hash
-- KEYS[2]  record      hookline:{ep}:delivery:<event>, the event's delivery record
--                      (piece_record.lua)
-- KEYS[3]  old_digest  hookline:{ep}:digest:<event>, Hookline 0.2's binding, honoured
-- KEYS[4]  queue       the queue's list
-- KEYS[5]  doorbell    the queue's doorbell
-- ARGV[1]  digest      this event's content digest
-- ARGV[2]  record_ttl  lifetime of a new delivery record, seconds
-- ARGV[3]  message     the message (kombu's JSON envelope)
-- Returns  'missing', 'conflict' (nothing pushed), 'same' or 'new' (pushed).
--#include piece_record.lua
--#include piece_claim.lua
local verdict = claim_event(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), true)
if verdict == 'missing' or verdict == 'conflict' then
  return verdict
end
redis.call('LPUSH', KEYS[4], ARGV[3])
redis.call('LPUSH', KEYS[5], '1')
return verdict
