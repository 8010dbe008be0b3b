-- Numbers a message, records it in history and publishes it: one atomic step,
-- so no node can see a message live that history lacks, or the reverse.
--
-- KEYS[1] sequence   KEYS[2] epoch   KEYS[3] age watermark   KEYS[4] publish times (zset)
-- KEYS[5] idempotency key (unused when ARGV[7] ~= '1')   KEYS[6..] history streams
-- ARGV[1] epoch to create if none   ARGV[2] frame head   ARGV[3] frame tail
-- ARGV[4] target ('*' or user ids joined by ',')   ARGV[5] history size   ARGV[6] ttl ms
-- ARGV[7] '1' if the push id is an idempotency key   ARGV[8] channel
-- ARGV[9] index of the first user stream in KEYS (user streams expire with the ttl)
-- Returns {1, cursor} for a new message, {0, cursor of the first} for a duplicate.

local ttl = tonumber(ARGV[6])
if ARGV[7] == '1' then
  local first = redis.call('GET', KEYS[5])
  if first then return {0, first} end
end

local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[1]
  redis.call('SET', KEYS[2], epoch)
end
-- Formatted with '%d': tostring() would print 1e14 and up as '1e+14'.
local seq = string.format('%d', redis.call('INCR', KEYS[1]))
local cursor = epoch .. '-' .. seq
local frame = ARGV[2] .. cursor .. ARGV[3]

-- Age: the newest message published before now - ttl is the watermark.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local cutoff = now_ms - ttl
redis.call('ZADD', KEYS[4], now_ms, seq)
local aged = tonumber(redis.call('GET', KEYS[3]) or '0')
local old = redis.call('ZREVRANGEBYSCORE', KEYS[4], '(' .. cutoff, '-inf', 'LIMIT', 0, 1)
if old[1] then
  aged = math.max(aged, tonumber(old[1]))
  redis.call('SET', KEYS[3], aged)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. cutoff)
end

-- Drops are XDELs, so each stream's max-deleted-entry-id says what it lost.
local function drop(stream, entries)
  for i = 1, #entries, 500 do
    local ids = {}
    for j = i, math.min(i + 499, #entries) do ids[#ids + 1] = entries[j][1] end
    redis.call('XDEL', stream, unpack(ids))
  end
end

local size = tonumber(ARGV[5])
local first_user = tonumber(ARGV[9])
if size > 0 then
  for k = 6, #KEYS do
    local stream = KEYS[k]
    redis.call('XADD', stream, seq .. '-0', 'f', frame)
    local len = redis.call('XLEN', stream)
    if len > size then
      drop(stream, redis.call('XRANGE', stream, '-', '+', 'COUNT', len - size))
    end
    if aged > 0 then
      drop(stream, redis.call('XRANGE', stream, '-', string.format('%d', aged) .. '-0'))
    end
    if k >= first_user then redis.call('PEXPIRE', stream, ttl) end
  end
end

if ARGV[7] == '1' then
  redis.call('SET', KEYS[5], cursor, 'PX', ttl)
end
redis.call('PUBLISH', ARGV[8], seq .. '\n' .. cursor .. '\n' .. ARGV[4] .. '\n' .. frame)
return {1, cursor}
