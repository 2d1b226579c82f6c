--[[
  publish: stores the messages of one Publish call, atomically.
  Due messages are appended to the ready stream; delayed ones go into the
  waiting set, their encoded bodies into the hash beside it.

  KEYS[1] waiting  zset   message UUID -> score (due ms * 1024 + sequence)
  KEYS[2] bodies   hash   message UUID -> encoded message
  KEYS[3] stream   stream ready messages, field m = encoded message
  KEYS[4] seq      string counter that keeps equal due times in publish order
  ARGV[1]          wake channel, published to when the earliest due time moves earlier
  ARGV[2+3i]       message UUID
  ARGV[3+3i]       delay in ms from now (Redis server time); <= 0 means ready now
  ARGV[4+3i]       encoded message

  Returns 0, or the UUID of a message already waiting in the topic with a
  different body (then nothing is written). Re-publishing a byte-identical
  waiting message is a no-op, so a retried Publish does not duplicate it.
]]
local now = redis.call('TIME')
-- rounded up: a due time is never earlier than now + delay
now = tonumber(now[1]) * 1000 + math.ceil(tonumber(now[2]) / 1000)

for i = 2, #ARGV, 3 do
  if tonumber(ARGV[i + 1]) > 0 then
    local old = redis.call('HGET', KEYS[2], ARGV[i])
    if old and old ~= ARGV[i + 2] then
      return ARGV[i]
    end
  end
end

local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
local earliest = nil
for i = 2, #ARGV, 3 do
  local delay = tonumber(ARGV[i + 1])
  if delay <= 0 then
    redis.call('XADD', KEYS[3], '*', 'm', ARGV[i + 2])
  elseif redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 2]) == 1 then
    local seq = redis.call('INCR', KEYS[4]) % 1024
    local score = (now + delay) * 1024 + seq
    redis.call('ZADD', KEYS[1], score, ARGV[i])
    if earliest == nil or score < earliest then
      earliest = score
    end
  end
end

if earliest and (head == nil or earliest < tonumber(head)) then
  redis.call('PUBLISH', ARGV[1], 'd')
end
return 0
