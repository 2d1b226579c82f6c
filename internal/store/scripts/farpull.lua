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
local far, fmeta, bucket, index, waiting, bodies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local field, readLoc, uuid, b, wake, readOnly = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local loc = redis.call('HGET', index, field)
if loc ~= readLoc then
  return {0}
end
local pos = tonumber(loc) % 16777216 - tonumber(redis.call('HGET', fmeta, 'p:' .. b) or '0')
local e = pos >= 0 and redis.call('LINDEX', bucket, pos)
local body = e and string.sub(e, 9) or ''
-- The element must be the message asked for: its UUID is the index field
-- (version 3: its 16 bytes) or, as text, the UUID given.
local id = nil
local v = string.byte(body, 1)
if v == 3 then
  id = string.sub(body, 2, 17) == field and uuid
elseif v == 1 or v == 2 then
  local n, at = string.byte(body, 2), 3
  if n and n >= 128 then
    n, at = (n - 128) + 128 * (string.byte(body, 3) or 0), 4
  end
  id = n and string.sub(body, at, at + n - 1)
end
if id ~= uuid then
  -- an index entry whose element is gone or another message's (cannot
  -- happen unless data was damaged): drop it rather than act on the wrong
  -- message; the message itself, wherever it is, is still delivered
  redis.call('HDEL', index, field)
  return {0}
end
local score = struct.unpack('>d', e)
if readOnly == '1' then
  return {1, body, score}
end
redis.call('LSET', bucket, pos, '')
redis.call('HDEL', index, field)
if redis.call('HINCRBY', fmeta, 'n', -1) <= 0 then
  redis.call('HDEL', fmeta, 'n')
end
if redis.call('HINCRBY', fmeta, 'l:' .. b, -1) <= 0 then
  redis.call('DEL', bucket)
  redis.call('ZREM', far, b)
  redis.call('HDEL', fmeta, 'p:' .. b, 'l:' .. b)
end
local head = redis.call('ZRANGE', waiting, 0, 0, 'WITHSCORES')[2]
redis.call('ZADD', waiting, score, uuid)
redis.call('HSET', bodies, uuid, body)
if not head or score < tonumber(head) then
  redis.call('PUBLISH', wake, 'd')
end
return {1, body, score}
