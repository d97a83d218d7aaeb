-- Piece (included with "--#include piece_claim.lua"; needs piece_record.lua): binding an event
-- id to its content at enqueue, the rule claim.lua and claim_push.lua share (admit.lua applies
-- it in the worker).
-- claim_event(endpoint_key, record_key, old_digest_key, digest, ttl, bind)
--   endpoint_key    hookline:{ep}:endpoint (its url field says the endpoint exists)
--   record_key      hookline:{ep}:delivery:<event>, the event's delivery record
--   old_digest_key  hookline:{ep}:digest:<event>, Hookline 0.2's binding, honoured
--   digest          this event's content digest; ttl: the record's lifetime, seconds
--   bind            true to bind a free id now, false only to check
--   Returns 'missing' (no such endpoint), 'conflict' (bound to another content), 'same'
--   (bound to this content already: a repeated send) or 'new'.
local function claim_event(endpoint_key, record_key, old_digest_key, digest, ttl, bind)
  if redis.call('HEXISTS', endpoint_key, 'url') == 0 then
    return 'missing'
  end
  local strings = redis.call('MGET', record_key, old_digest_key)
  local state, rest = read_record(strings[1])
  local bound = state['d'] or strings[2]
  if bound then
    if bound ~= digest then
      return 'conflict'
    end
    return 'same'
  end
  if bind then
    state['d'] = digest
    redis.call('SET', record_key, record_text(state, rest), 'EX', ttl)
  end
  return 'new'
end
