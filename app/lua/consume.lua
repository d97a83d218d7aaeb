-- Take the next message off the broker's queues and record it as unacknowledged in the same
-- atomic step. kombu's Redis transport pops with BRPOP and records the message in a second
-- round trip: a worker killed between the two (or a reply lost in flight) loses the message.
-- Here a message is never off its list without being in the unacked hash, so a worker that
-- dies at any point leaves it to be restored after the visibility timeout.
-- KEYS[1]      the unacked hash (delivery tag -> [message, exchange, routing key])
-- KEYS[2]      the unacked index (sorted set: delivery tag -> time taken)
-- KEYS[3]      the doorbell stream publishers add to after every push
-- KEYS[4...]   the queues' lists, in the order to try them (kombu's priority and fair cycle)
-- ARGV[1]      now, in the worker's clock (kombu's restore sweep compares with that clock)
-- Returns      {'message', list key, message} on success;
--              {'bad', list key, item} for an item that is not a kombu message: it stays on
--                its list until the caller has kept it in the dead-letter queue and removed it;
--              {'empty', last doorbell id} when every list is empty: the caller blocks on the
--                doorbell from that id, so a push between this call and the block is not missed.
for i = 4, #KEYS do
  local item = redis.call('LINDEX', KEYS[i], -1)
  if item then
    local ok, message = pcall(cjson.decode, item)
    local props = ok and type(message) == 'table' and message['properties']
    local info = type(props) == 'table' and props['delivery_info']
    local tag = type(props) == 'table' and props['delivery_tag']
    if type(info) ~= 'table' or type(tag) ~= 'string' then
      return {'bad', KEYS[i], item}
    end
    redis.call('RPOP', KEYS[i])
    -- The same record kombu's QoS.append writes: [raw message, exchange, routing key].
    local record = '[' .. item .. ',' .. cjson.encode(tostring(info['exchange'] or '')) ..
      ',' .. cjson.encode(tostring(info['routing_key'] or '')) .. ']'
    redis.call('HSET', KEYS[1], tag, record)
    redis.call('ZADD', KEYS[2], ARGV[1], tag)
    return {'message', KEYS[i], item}
  end
end
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
if #last > 0 then
  return {'empty', last[1][1]}
end
return {'empty', '0-0'}
