-- Reads what a client missed after its cursor: the broadcast stream, its own
-- and its channels'.
--
-- KEYS[1] epoch   KEYS[2] sequence   KEYS[3] age watermark
-- KEYS[4] the writer (hash; its 'lost': positions below it may have missed
--   writes a failover lost, see bus/cluster/publish.lua; absent on one Redis)
-- KEYS[5..] the streams: broadcast, the user's, then each channel's
-- ARGV[1] the cursor's epoch   ARGV[2] the cursor's sequence number
-- On a Redis Cluster (one shard of the sequence; bus/cluster): ARGV[3] the
-- node's barrier channel in the shard, ARGV[4] the barrier's payload. The
-- barrier is SPUBLISHed in the same atomic step: it reaches the node after
-- every message of the shard published before this read. There a cursor
-- past the sequence means the shard lost writes (a failover before they
-- were replicated): not complete.
-- Returns {complete (0/1), epoch, current sequence, entries of KEYS[5], of KEYS[6], ...};
-- entries are {id, {'f', frame}}.
--
-- Lua numbers are doubles, and tostring() prints 1e14 and up as '1e+14',
-- which XRANGE refuses: ids are formatted with '%d', and a cursor past the
-- sequence asks for what the sequence holds (nothing after it), as on the
-- memory broker. Sequence numbers stay below 2^53, where doubles are exact.

local epoch = redis.call('GET', KEYS[1]) or ''
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
local sharded = ARGV[3] ~= nil
if sharded then
  redis.call('SPUBLISH', ARGV[3], ARGV[4] .. '\n' .. epoch .. '-' .. string.format('%d', current))
end
if epoch ~= ARGV[1] then
  return {0, epoch, current}
end
local after = tonumber(ARGV[2]) or 0
local lost = false
if after > current then
  after = current
  lost = sharded
end
local aged = tonumber(redis.call('GET', KEYS[3]) or '0')

-- A stream covers the cursor if nothing after it was dropped. A stream that
-- no longer exists aged out whole: the watermark answers for it.
local function covers(stream)
  if redis.call('EXISTS', stream) == 0 then return after >= aged end
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'max-deleted-entry-id' then
      local deleted = tonumber(string.match(info[i + 1], '^(%d+)'))
      return deleted <= after
    end
  end
  return true
end

local complete = 1
if lost then complete = 0 end
if after < tonumber(redis.call('HGET', KEYS[4], 'lost') or '0') then complete = 0 end
local from = '(' .. string.format('%d', after) .. '-0'
local reply = {0, epoch, current}
for k = 5, #KEYS do
  if not covers(KEYS[k]) then complete = 0 end
  reply[#reply + 1] = redis.call('XRANGE', KEYS[k], from, '+')
end
reply[1] = complete
return reply
