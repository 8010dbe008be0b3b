-- History upkeep shared by both publish scripts: each is built as this file
-- followed by its own (bus/redis/publish.lua on one Redis,
-- bus/cluster/publish.lua per shard of a cluster), so the age rule and the
-- trimming are written once.

-- The server's clock, in ms since the Unix epoch.
local function server_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- A publish that starts after its deadline (on the server's clock, in ms)
-- publishes nothing: the gateway may have given up on it already and
-- answered 503, which says nothing was published, and answers 503 to the
-- refusal too (src/bus/deadline.rs). The refusal names the clock, which
-- the gateway learns from.
local function refusal_if_late(now_ms, deadline)
  if now_ms > deadline then
    return redis.error_reply(string.format('LATE %d past %d', now_ms, deadline))
  end
end

-- The age watermark: the newest message published before now_ms - ttl.
-- Raises the watermark at `aged_key` from the publish times in the zset
-- `times_key` (forgetting the times it passed) and returns it.
local function age_watermark(aged_key, times_key, ttl, now_ms)
  local cutoff = now_ms - ttl
  local aged = tonumber(redis.call('GET', aged_key) or '0')
  local old = redis.call('ZREVRANGEBYSCORE', times_key, '(' .. cutoff, '-inf', 'LIMIT', 0, 1)
  if old[1] then
    aged = math.max(aged, tonumber(old[1]))
    redis.call('SET', aged_key, aged)
    redis.call('ZREMRANGEBYSCORE', times_key, '-inf', '(' .. cutoff)
  end
  return aged
end

-- Drops are XDELs, so each stream's max-deleted-entry-id says what it lost.
local function drop(stream, entries)
  for i = 1, #entries, 500 do
    local ids = {}
    for j = i, math.min(i + 499, #entries) do ids[#ids + 1] = entries[j][1] end
    redis.call('XDEL', stream, unpack(ids))
  end
end

-- Appends `frame` to `stream` as entry `seq`, then drops what is past
-- `size` entries or at or below the watermark `aged`.
local function append_trimmed(stream, seq, frame, size, aged)
  redis.call('XADD', stream, seq .. '-0', 'f', frame)
  local len = redis.call('XLEN', stream)
  if len > size then
    drop(stream, redis.call('XRANGE', stream, '-', '+', 'COUNT', len - size))
  end
  if aged > 0 then
    drop(stream, redis.call('XRANGE', stream, '-', string.format('%d', aged) .. '-0'))
  end
end

