-- Piece (included with "--#include piece_queues.lua"): the broker's queues as consume.lua
-- takes from them. Each queue is one list per priority (kombu's) and one doorbell: a list of
-- wake-up tokens, one pushed with every message; idle consumers block on their queues'
-- doorbells (one token wakes one consumer).
-- queues_of(lists, bells)  `lists`: the queues' lists, in the order to try them (kombu's
--   priority and fair cycle); `bells`: the doorbell of each one's queue, in the same order (a
--   queue's priority lists share one). Returns a table of functions:
--   take()                the next message off the first list that has one: its list key and
--                         the item, nil when every list is empty (Redis 7 pops in one command,
--                         LMPOP; before that each list is looked at in turn)
--   taken_from(key, tag)  a message with delivery tag `tag` was taken from list `key`: its
--                         queue's doorbell is trimmed to 1,000 on about every 16th (the tag
--                         ends in '0'), since producers push and nobody pops while every
--                         consumer is busy
--   silence()             empty every doorbell (every list is empty), so a token left there
--                         is for a message pushed after this call
local function queues_of(lists, bells)
  local queues = {}
  -- list key -> its queue's doorbell
  local doorbells = {}
  for i, list in ipairs(lists) do
    doorbells[list] = bells[i]
  end
  local lmpop = nil
  if (tonumber(redis.REDIS_VERSION_NUM) or 0) >= 0x070000 then
    lmpop = {'LMPOP', #lists}
    for _, list in ipairs(lists) do
      lmpop[#lmpop + 1] = list
    end
    lmpop[#lmpop + 1] = 'RIGHT'
  end

  function queues.take()
    if lmpop then
      local popped = redis.call(unpack(lmpop))
      if popped then
        return popped[1], popped[2][1]
      end
      return nil
    end
    for _, list in ipairs(lists) do
      local item = redis.call('RPOP', list)
      if item then
        return list, item
      end
    end
    return nil
  end

  function queues.taken_from(key, tag)
    if string.sub(tag, -1) == '0' and doorbells[key] then
      redis.call('LTRIM', doorbells[key], 0, 999)
    end
  end

  function queues.silence()
    redis.call('DEL', unpack(bells))
  end

  return queues
end
