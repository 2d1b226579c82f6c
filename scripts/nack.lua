--[[
  nack: takes a delivered message away from its consumer group's pending
  list and queues it for redelivery to that group only: into the group's
  redelivery stream now, or into its retry set until the delay has passed.

  KEYS[1] source   stream the entry was read from (ready or redelivery stream)
  KEYS[2] retry    zset   the group's retry set
  KEYS[3] rbodies  hash   the group's retry bodies
  KEYS[4] rstream  stream the group's redelivery stream
  ARGV[1] consumer group
  ARGV[2] entry id in the source stream
  ARGV[3] source tag: "m" for the ready stream, "r" for the redelivery stream
          (redelivery entries are deleted once handled)
  ARGV[4] attempt number of the next delivery
  ARGV[5] delay in ms (<= 0: redeliver now)
  ARGV[6] encoded message (with the metadata the handler left on it)
  ARGV[7] wake channel

  Returns 1 when queued, 0 when the entry was no longer pending for the group
  (already acknowledged or handed back): nothing is queued twice.
]]
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
if ARGV[3] == 'r' then
  redis.call('XDEL', KEYS[1], ARGV[2])
end

local delay = tonumber(ARGV[5])
if delay <= 0 then
  redis.call('XADD', KEYS[4], '*', 'm', ARGV[6], 'a', ARGV[4])
  return 1
end

local now = redis.call('TIME')
-- rounded up: a due time is never earlier than now + delay
now = tonumber(now[1]) * 1000 + math.ceil(tonumber(now[2]) / 1000)
local score = (now + delay) * 1024
local member = ARGV[4] .. ':' .. ARGV[3] .. ARGV[2]
local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')[2]
redis.call('HSET', KEYS[3], member, ARGV[6])
redis.call('ZADD', KEYS[2], score, member)
if head == nil or score < tonumber(head) then
  redis.call('PUBLISH', ARGV[7], 'r')
end
return 1
