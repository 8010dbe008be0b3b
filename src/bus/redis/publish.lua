-- Numbers a push's messages, records them in history and publishes them: one
-- atomic step, so no node can see a message live that history lacks, or the
-- reverse. A broadcast or a personal push is one message (to every stream in
-- KEYS[6..]); a push to channels is one message per channel, each to its own
-- stream and with its own frame.
--
-- KEYS[1] sequence   KEYS[2] epoch   KEYS[3] age watermark   KEYS[4] publish times (zset)
-- KEYS[5] idempotency key (unused when ARGV[7] ~= '1')   KEYS[6..] history streams
-- ARGV[1] epoch to create if none   ARGV[2] frame head   ARGV[3] frame tail
-- ARGV[4] target ('*' or user ids joined by ',')   ARGV[5] history size   ARGV[6] ttl ms
-- ARGV[7] '1' if the push id is an idempotency key   ARGV[8] pub/sub channel
-- ARGV[9] index of the first stream in KEYS that expires with the ttl
-- ARGV[10] number of channel messages (0: one message to every stream)
-- ARGV[11] deadline: the server's clock (ms) past which nothing is published
-- ARGV[12..] for each channel message: its target ('#' .. channel), its frame tail
-- Returns {1, cursor of the last message, the server's clock in ms} for a
-- new push, {0, what the first returned, the clock} for a duplicate; an
-- error `LATE <clock> past <deadline>` when it started too late.

local ttl = tonumber(ARGV[6])
local now_ms = server_ms()
if ARGV[7] == '1' then
  local first = redis.call('GET', KEYS[5])
  if first then return {0, first, now_ms} end
end
local late = refusal_if_late(now_ms, tonumber(ARGV[11]))
if late then return late end

local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[2], epoch)
end

-- Age (history.lua, before this script): the watermark and the clock.
local aged = age_watermark(KEYS[3], KEYS[4], ttl, now_ms)

local size = tonumber(ARGV[5])
local first_expiring = tonumber(ARGV[9])
local function record(k, seq, frame)
  if size == 0 then return end
  local stream = KEYS[k]
  append_trimmed(stream, seq, frame, size, aged)
  if k >= first_expiring then redis.call('PEXPIRE', stream, ttl) end
end

-- Formatted with '%d': tostring() would print 1e14 and up as '1e+14'.
local function next_seq() return string.format('%d', redis.call('INCR', KEYS[1])) end

local seq, cursor
local channels = tonumber(ARGV[10])
if channels == 0 then
  seq = next_seq()
  cursor = epoch .. '-' .. seq
  local frame = ARGV[2] .. cursor .. ARGV[3]
  for k = 6, #KEYS do record(k, seq, frame) end
  redis.call('PUBLISH', ARGV[8], seq .. '\n' .. cursor .. '\n' .. ARGV[4] .. '\n' .. frame)
else
  for i = 1, channels do
    seq = next_seq()
    cursor = epoch .. '-' .. seq
    local frame = ARGV[2] .. cursor .. ARGV[11 + 2 * i]
    record(5 + i, seq, frame)
    redis.call('PUBLISH', ARGV[8], seq .. '\n' .. cursor .. '\n' .. ARGV[10 + 2 * i] .. '\n' .. frame)
  end
end
redis.call('ZADD', KEYS[4], now_ms, seq)

if ARGV[7] == '1' then
  redis.call('SET', KEYS[5], cursor, 'PX', ttl)
end
return {1, cursor, now_ms}
