--[[
  cancel: removes a message that is still waiting, and frees its business
  key if it holds one.

  KEYS[1] waiting  zset  message UUID -> due score
  KEYS[2] bodies   hash  message UUID -> encoded message
  KEYS[3] bkeys    hash  business key -> UUID of the waiting message holding it
  KEYS[4] bkeyof   hash  UUID of a waiting message -> its business key
  KEYS[5] prio     hash  message UUID -> 1 for high-priority messages
  ARGV[1] message UUID

  Returns 1 when the message was waiting and is removed, 0 otherwise
  (unknown, already delivered, or already cancelled).
]]
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
local key = redis.call('HGET', KEYS[4], ARGV[1])
if key then
  redis.call('HDEL', KEYS[4], ARGV[1])
  if redis.call('HGET', KEYS[3], key) == ARGV[1] then
    redis.call('HDEL', KEYS[3], key)
  end
end
return 1
