-- Piece (included with "--#include piece_record.lua"): one event's delivery record at one
-- endpoint (hookline:{ep}:delivery:<event>, hookline/store/delivery.py), a string read with
-- one GET and written with one SET ... EX: a JSON object on its first line, then the kept
-- attempt records, one JSON record per line, oldest first (when the history lives here).
-- Fields of the object, each absent when unset:
--   d      the content digest the event id is bound to
--   done   1 once delivered
--   t, lu  the in-flight lease: the holder's token and until when (ms of Redis time)
--   s, su  attempts started and not settled (the crash counter), counted until su (ms)
--   hn     how many attempt records follow
-- read_record(text)  -> state (a table, {} for none or an unreadable one), rest (the attempt
--                       lines, each after a '\n'; '' for none)
-- record_text(state, rest) -> the string to store
local function read_record(text)
  if not text then
    return {}, ''
  end
  local newline = string.find(text, '\n', 1, true)
  local head = newline and string.sub(text, 1, newline - 1) or text
  local ok, state = pcall(cjson.decode, head)
  if not ok or type(state) ~= 'table' then
    state = {}
  end
  return state, newline and string.sub(text, newline) or ''
end

local function record_text(state, rest)
  return cjson.encode(state) .. rest
end
