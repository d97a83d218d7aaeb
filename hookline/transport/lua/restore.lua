-- Put an unacknowledged message back on its queue(s) and drop its unacked record, in one
-- atomic step, only if the record is still there: an acknowledgement that removed it first
-- (the worker finished just as the sweep saw the message as overdue) wins, and nothing is
-- pushed. The record is a member of the unacked records sorted set (consume.lua writes it;
-- hookline/transport/unacked.py reads it). kombu does the same for its hash records with WATCH on the
-- hash; a WATCH on this set would fail on every consume and acknowledgement meanwhile.
-- KEYS[1]     records  the unacked records (sorted set)
-- KEYS[2...]  *queues  per queue to push onto, in pairs: its list (kombu's priority list for
--                      the message), then its doorbell (a wake-up token for one idle consumer)
-- ARGV[1]     member   the member (tag + record)
-- ARGV[2]     message  the message to push (kombu's JSON envelope, marked redelivered)
-- ARGV[3]     push     'RPUSH' (taken next: kombu's restore) or 'LPUSH' (taken last: kombu's
--                      leftmost, a reject with requeue)
-- Returns        1 when restored, 0 when the record was gone (nothing pushed)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
for i = 2, #KEYS, 2 do
  redis.call(ARGV[3], KEYS[i], ARGV[2])
  redis.call('LPUSH', KEYS[i + 1], '1')
end
return 1
