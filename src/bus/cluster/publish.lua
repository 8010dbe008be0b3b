-- Numbers the messages of a batch of pushes that fall in one shard of the
-- sequence, records them in their streams' history and SPUBLISHes each to
-- its stream's sharded channel: one atomic step on one hash slot (every
-- key and channel here carries the shard's hash tag), so no node sees a
-- message live that history lacks, or the reverse. The batch is what
-- queued for the shard while its previous script ran (`commit.rs`): the
-- work around the messages (the failover guard, the clock, the age
-- watermark) is done once for all of them.
--
-- KEYS[1] sequence   KEYS[2] epoch   KEYS[3] age watermark   KEYS[4] publish times (zset)
-- KEYS[5] the shard's writer (hash: replid, node, lost)
-- KEYS[6] the batch's own key: its answers, kept ARGV[6] ms
-- then per push: its idempotency key (unused unless the push is idempotent),
--   then one history stream per (channel, target) pair of its messages, in order.
-- ARGV[1] epoch to create if none   ARGV[2] history size   ARGV[3] ttl ms
-- ARGV[4] number of pushes   ARGV[5] deadline: the server's clock (ms) past
--   which nothing is published   ARGV[6] how long the batch's key lives (ms)
-- then per push: its frame head, '1' if its id is
--   an idempotency key, '1' if its streams expire with the ttl (all but the
--   broadcast stream), its number of messages; then per message: its frame
--   tail, its number of streams N, and N pairs (sharded channel, target).
--   A personal push is one message to each user's stream; a push to
--   channels is one message per channel.
-- Payload published: '<seq>\n<epoch>-<seq>\n<target>\n<frame>'.
-- Returns {the server's clock in ms, answers}, the answers per push in
-- order: {1, cursor of its last message} for a new push, {0, what the first
-- returned} for a duplicate. Or an error `LATE <clock> past <deadline>`
-- when it started too late.

local size = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local now_ms = server_ms()

-- The client sends a script again when its connection drops before the
-- answer came (or the answer is slow), and the first may have run: a batch
-- that ran answers what it answered then, and publishes nothing again.
local done = redis.call('GET', KEYS[6])
if done then return {now_ms, cjson.decode(done)} end
local late = refusal_if_late(now_ms, tonumber(ARGV[5]))
if late then return late end

local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[2], epoch)
end

-- A failover can lose writes: a replica promoted before it got its
-- master's last writes would give new messages the numbers of the lost
-- ones, and a node or client that saw a lost message would take the new
-- one at that number for it. So the shard remembers which master wrote
-- it last: its replication id and its cluster node id. When another
-- master writes it, the shard came one of two ways:
-- - by a slot migration (`redis-cli --cluster reshard`): the keys moved
--   whole from a master that is still up and still a master, and that is
--   not this one. Nothing was lost: the shard is adopted as it is.
-- - by replication, over one failover or several (the last writer is
--   this master's replid2, or failed, or a replica now; or it is this
--   very node, restarted or demoted and promoted again, whose data came
--   back from another). Writes may have been lost: the sequence moves
--   past anything the old writer can have numbered (LOST_GAP), and the
--   new start is recorded as 'lost': a position below it may have missed
--   messages (resume.lua says not complete).
-- Anything not proven a migration counts as a failover: a false alarm
-- costs a client a refetch, a missed one a message.
local LOST_GAP = 4294967296
local info = redis.call('INFO', 'replication')
local replid = string.match(info, 'master_replid:(%x+)')
local writer = redis.call('HMGET', KEYS[5], 'replid', 'node')
if replid and writer[1] ~= replid then
  local me = redis.call('CLUSTER', 'MYID')
  local migrated = false
  if writer[1] and writer[2] and writer[2] ~= me
      and writer[1] ~= string.match(info, 'master_replid2:(%x+)') then
    -- `<id> <addr> <flags> ...`, one line a node.
    local flags = string.match('\n' .. redis.call('CLUSTER', 'NODES'),
      '\n' .. writer[2] .. ' %S+ (%S+)')
    migrated = flags ~= nil and string.find(flags, 'master', 1, true) ~= nil
      and string.find(flags, 'fail', 1, true) == nil
  end
  if writer[1] and not migrated then
    local from = redis.call('INCRBY', KEYS[1], LOST_GAP)
    redis.call('HSET', KEYS[5], 'replid', replid, 'node', me, 'lost', string.format('%d', from))
  else
    redis.call('HSET', KEYS[5], 'replid', replid, 'node', me)
  end
end

-- Age (history.lua, before this script): the watermark and the clock.
local aged = age_watermark(KEYS[3], KEYS[4], ttl, now_ms)

local function record(stream, seq, frame, expires)
  if size == 0 then return end
  append_trimmed(stream, seq, frame, size, aged)
  if expires then redis.call('PEXPIRE', stream, ttl) end
end

-- Skips a duplicate push's arguments and history keys.
local function skip(a, k, messages)
  for _ = 1, messages do
    local streams = tonumber(ARGV[a + 1])
    a = a + 2 + 2 * streams
    k = k + streams
  end
  return a, k
end

local answers = {}
local seq
local k = 7
local a = 7
for p = 1, tonumber(ARGV[4]) do
  local head, idempotent, expires = ARGV[a], ARGV[a + 1] == '1', ARGV[a + 2] == '1'
  local messages = tonumber(ARGV[a + 3])
  local id_key = KEYS[k]
  a = a + 4
  k = k + 1
  local first = idempotent and redis.call('GET', id_key)
  if first then
    answers[p] = {0, first}
    a, k = skip(a, k, messages)
  else
    local cursor
    for _ = 1, messages do
      -- Formatted with '%d': tostring() would print 1e14 and up as '1e+14'.
      seq = string.format('%d', redis.call('INCR', KEYS[1]))
      cursor = epoch .. '-' .. seq
      local frame = head .. cursor .. ARGV[a]
      local streams = tonumber(ARGV[a + 1])
      a = a + 2
      for _ = 1, streams do
        record(KEYS[k], seq, frame, expires)
        redis.call('SPUBLISH', ARGV[a], seq .. '\n' .. cursor .. '\n' .. ARGV[a + 1] .. '\n' .. frame)
        k = k + 1
        a = a + 2
      end
    end
    if idempotent then
      redis.call('SET', id_key, cursor, 'PX', ttl)
    end
    answers[p] = {1, cursor}
  end
end
if seq then
  redis.call('ZADD', KEYS[4], now_ms, seq)
end
redis.call('SET', KEYS[6], cjson.encode(answers), 'PX', ARGV[6])
return {now_ms, answers}
