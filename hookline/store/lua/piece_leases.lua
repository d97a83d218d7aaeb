-- Piece (included with "--#include piece_leases.lua"): an endpoint's attempts in flight as
-- leases. The sorted set hookline:{ep}:leases holds one member per attempt in flight (its
-- token), scored with the end of its lease (ms of Redis time); the endpoint hash's 'inflight'
-- field is a count of it that admit and settle keep in step in their own writes. A lease
-- whose settle never came (lost with a Redis restart, its worker gone) runs out and leaves
-- the set when it is next read, and the count is mended then: no count outlives what it
-- counts (docs/internals/counts.md).
-- leases_live(leases, hash, now, mirrored)  prune the leases that ran out by `now`, mend the
--   hash's count (`mirrored`: the value read) when it differs, and return the live count.
local function leases_live(leases, hash, now, mirrored)
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  local count = redis.call('ZCARD', leases)
  if count ~= (tonumber(mirrored) or 0) then
    redis.call('HSET', hash, 'inflight', count)
  end
  return count
end
