#!lua flags=allow-oom
--[[
  farpull: moves one far message (see far.go), found by its UUID's far
  index entry, into the waiting set with its due time, so Cancel,
  Reschedule and a retried Publish handle it there like any waiting
  message; or, with ARGV[6] = "1", only reads it. Its bucket element becomes
  "" (the bucket's unpacking skips it); a bucket left with no live element
  is deleted. Flagged allow-oom: it frees more than it adds.

  KEYS[1] far      zset   far bucket number -> when to unpack it (ms)
  KEYS[2] fmeta    hash   far counters: n, p:<bucket> (popped), l:<bucket> (live)
  KEYS[3] bucket   list   the message's far bucket
  KEYS[4] index    hash   the far index shard of the UUID
  KEYS[5] waiting  zset   message UUID -> due score
  KEYS[6] bodies   hash   message UUID -> encoded message
  ARGV[1] the UUID's far index field
  ARGV[2] the location the caller read for it (bucket * 2^24 + position)
  ARGV[3] the message UUID
  ARGV[4] the bucket's number
  ARGV[5] wake channel, published to when the message becomes the earliest
  ARGV[6] "1": only read the message

  Returns {1, body, due score} when the message was there (and, unless read
  only, is moved), {0} when the index no longer holds that location (moved
  or unpacked meanwhile: the caller looks again).
]]
local loc = redis.call('HGET', KEYS[4], ARGV[1])
if loc ~= ARGV[2] then
  return {0}
end
local b = ARGV[4]
local pos = tonumber(loc) % 16777216 - tonumber(redis.call('HGET', KEYS[2], 'p:' .. b) or '0')
local e = pos >= 0 and redis.call('LINDEX', KEYS[3], pos)
local body = e and string.sub(e, 9) or ''
-- The element must be the message asked for: its UUID is the index field
-- (version 3: its 16 bytes) or, as text, the UUID given.
local id = nil
local v = string.byte(body, 1)
if v == 3 then
  id = string.sub(body, 2, 17) == ARGV[1] and ARGV[3]
elseif v == 1 or v == 2 then
  local n, at = string.byte(body, 2), 3
  if n and n >= 128 then
    n, at = (n - 128) + 128 * (string.byte(body, 3) or 0), 4
  end
  id = n and string.sub(body, at, at + n - 1)
end
if id ~= ARGV[3] then
  -- an index entry whose element is gone or another message's (cannot
  -- happen unless data was damaged): drop it rather than act on the wrong
  -- message; the message itself, wherever it is, is still delivered
  redis.call('HDEL', KEYS[4], ARGV[1])
  return {0}
end
local score = struct.unpack('>d', e)
if ARGV[6] == '1' then
  return {1, body, score}
end
redis.call('LSET', KEYS[3], pos, '')
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('HINCRBY', KEYS[2], 'n', -1) <= 0 then
  redis.call('HDEL', KEYS[2], 'n')
end
if redis.call('HINCRBY', KEYS[2], 'l:' .. b, -1) <= 0 then
  redis.call('DEL', KEYS[3])
  redis.call('ZREM', KEYS[1], b)
  redis.call('HDEL', KEYS[2], 'p:' .. b, 'l:' .. b)
end
local head = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]
redis.call('ZADD', KEYS[5], score, ARGV[3])
redis.call('HSET', KEYS[6], ARGV[3], body)
if not head or score < tonumber(head) then
  redis.call('PUBLISH', ARGV[5], 'd')
end
return {1, body, score}
