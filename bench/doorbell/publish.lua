-- Publish one message (doorbell system), one EVALSHA.
-- KEYS: 1 stream, 2 waiting zset, 3 bodies hash, 4 group doorbell zset, 5 group timers zset
-- ARGV: 1 mode ('i' immediate, 'd' delayed, 'D' delayed with the body inline), 2 score (ms; now or due), 3 partition member, 4 body, 5 id (delayed)
local score = tonumber(ARGV[2])
if ARGV[1] == 'i' then
  redis.call('XADD', KEYS[1], '*', 'd', ARGV[4])
  -- ring: a score only ever lowered; a no-op while already rung lower
  redis.call('ZADD', KEYS[4], 'LT', score, ARGV[3])
  return 1
end
-- delayed ('d': body in the hash; 'D': body inline in the waiting zset's member, id|body)
-- ring only when this message becomes the partition's earliest waiting one;
-- otherwise whoever handles the earlier one re-arms for the next (see fetch.lua).
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if ARGV[1] == 'D' then
  redis.call('ZADD', KEYS[2], score, ARGV[5] .. '|' .. ARGV[4])
else
  redis.call('ZADD', KEYS[2], score, ARGV[5])
  redis.call('HSET', KEYS[3], ARGV[5], ARGV[4])
end
if #first == 0 or score < tonumber(first[2]) then
  -- durable record first (survives the death of the process that pops the ring) ...
  redis.call('ZADD', KEYS[5], 'LT', score, ARGV[3])
  -- ... then the wake-up
  redis.call('ZADD', KEYS[4], 'LT', score, ARGV[3])
end
return 1
