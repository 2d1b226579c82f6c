--[[
  cancel: removes a message that is still waiting.

  KEYS[1] waiting  zset  message UUID -> due score
  KEYS[2] bodies   hash  message UUID -> encoded message
  KEYS[3] prio     hash  message UUID -> 1 for high-priority messages
  ARGV[1] message UUID

  Returns 1 when the message was waiting and is removed, 0 otherwise
  (unknown, already delivered, or already cancelled).
]]
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
