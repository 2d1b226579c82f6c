--[[
  cancelkey: removes the waiting message holding a business key, and frees
  the key.

  KEYS[1] waiting  zset  message UUID -> due score
  KEYS[2] bodies   hash  message UUID -> encoded message
  KEYS[3] bkeys    hash  business key -> UUID of the waiting message holding it
  KEYS[4] bkeyof   hash  UUID of a waiting message -> its business key
  KEYS[5] prio     hash  message UUID -> 1 for high-priority messages
  ARGV[1] business key

  Returns the UUID of the message removed, or false when no waiting
  message holds the key (never held, already due, or already cancelled).
]]
local id = redis.call('HGET', KEYS[3], ARGV[1])
if not id then
  return false
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[5], id)
redis.call('ZREM', KEYS[1], id)
return id
