-- One fetch of one partition for one consumer (doorbell system), one EVALSHA.
-- KEYS: 1 stream, 2 waiting zset, 3 bodies hash, 4 group doorbell zset, 5 group timers zset
-- ARGV: 1 group, 2 consumer, 3 count, 4 now (ms), 5 promote ('0' no, '1' bodies in the hash, '2' bodies inline), 6 partition member,
--       7 number of ack ids, 8.. ack ids (piggybacked acks of the previous batch)
local count = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local member = ARGV[6]
local nacks = tonumber(ARGV[7])
if nacks > 0 then
  redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 8, 7 + nacks))
end
local nextdue = -1
if ARGV[5] ~= '0' then
  -- only the due ids: a range that also returned the next ones would copy up to its LIMIT
  -- entries into Lua on every fetch (measured: 2x the Redis CPU at 1k/s delayed)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 500)
  if #ids > 0 and ARGV[5] == '2' then
    for i = 1, #ids do
      local sep = string.find(ids[i], '|', 1, true)
      redis.call('XADD', KEYS[1], '*', 'd', string.sub(ids[i], sep + 1))
    end
    redis.call('ZREM', KEYS[2], unpack(ids))
  elseif #ids > 0 then
    local bodies = redis.call('HMGET', KEYS[3], unpack(ids))
    for i = 1, #ids do
      if bodies[i] then redis.call('XADD', KEYS[1], '*', 'd', bodies[i]) end
    end
    redis.call('ZREM', KEYS[2], unpack(ids))
    redis.call('HDEL', KEYS[3], unpack(ids))
  end
  local nx = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #nx > 0 then
    nextdue = tonumber(nx[2])
    -- durable record of the partition's next due time (recovered by a sweep if we die)
    redis.call('ZADD', KEYS[5], nextdue, member)
    if nextdue <= now then
      redis.call('ZADD', KEYS[4], 'LT', now, member) -- more than one promote batch due
    end
  else
    redis.call('ZREM', KEYS[5], member)
  end
end
-- non-blocking read inside the script (BLOCK is refused in scripts)
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', count, 'STREAMS', KEYS[1], '>')
local entries = {}
if r then entries = r[1][2] end
if #entries >= count then
  -- more work: ring again (another process or our next round)
  redis.call('ZADD', KEYS[4], 'LT', now, member)
elseif ARGV[5] == '0' then
  -- drained: drop a stale due ring left by publishes we have just read (saves an empty round);
  -- a future ring stays. (Not after a promote: publishes of delayed messages ring in the future.)
  local s = redis.call('ZSCORE', KEYS[4], member)
  if s and tonumber(s) <= now then redis.call('ZREM', KEYS[4], member) end
end
return {tostring(nextdue), entries}
