#!lua flags=allow-oom
-- include: clock
--[[
  members: the heartbeat of a member in a member list: the ordered
  subscriptions of a consumer group for a topic, or the schedulers of a
  topic. Members read it to share the topic's partitions evenly: none owns
  more than partitions / members (rounded up), and one owning two more
  than another member gives a partition up. Members that stopped beating
  expire.

  KEYS[1] members  zset   member name -> expiry, ms (Redis clock)
  KEYS[2] owned    hash   member name -> partitions it owns
  ARGV[1] member name
  ARGV[2] time to live in ms; 0 removes the member
  ARGV[3] partitions the member owns

  Returns {live, fewest}: the number of live members, and the fewest
  partitions another live member owns (-1 when there is no other).
]]
local members, owned = KEYS[1], KEYS[2]
local member, ttl, owns = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
if ttl > 0 then
  redis.call('ZADD', members, now + ttl, member)
  redis.call('HSET', owned, member, owns)
else
  redis.call('ZREM', members, member)
  redis.call('HDEL', owned, member)
end
local expired = redis.call('ZRANGEBYSCORE', members, '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', members, '-inf', now)
  redis.call('HDEL', owned, unpack(expired))
end
local live = redis.call('ZRANGE', members, '0', '-1')
local fewest = -1
if #live > 0 then
  local counts = redis.call('HMGET', owned, unpack(live))
  for k, name in ipairs(live) do
    local n = tonumber(counts[k]) or 0
    if name ~= member and (fewest < 0 or n < fewest) then fewest = n end
  end
end
return {#live, fewest}
