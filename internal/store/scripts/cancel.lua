-- include: lookup
--[[
  cancel: removes a message that is still waiting, found by its UUID or by
  the business key it holds, and frees its business key if it holds one.

  KEYS[1] waiting  zset  message UUID -> due score
  KEYS[2] bodies   hash  message UUID -> encoded message
  KEYS[3] bkeys    hash  business key -> UUID of the waiting message holding it
  KEYS[4] bkeyof   hash  UUID of a waiting message -> its business key
  KEYS[5] prio     hash  message UUID -> 1 for high-priority messages
  ARGV[1] "uuid" or "key": what ARGV[2] is
  ARGV[2] the message UUID, or the business key

  Returns 1 when the message was waiting and is removed, 0 otherwise
  (unknown, already delivered, or already cancelled).
]]
local id = lookup_id(KEYS[3], ARGV[1], ARGV[2])
if not id then
  return 0
end
local removed = redis.call('ZREM', KEYS[1], id)
if removed == 0 and ARGV[1] == 'uuid' then
  return 0
end
-- by key, a holder no longer waiting (none should be) is freed all the same
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[5], id)
local key = redis.call('HGET', KEYS[4], id)
if key then
  redis.call('HDEL', KEYS[4], id)
  if redis.call('HGET', KEYS[3], key) == id then
    redis.call('HDEL', KEYS[3], key)
  end
end
if ARGV[1] == 'key' then
  redis.call('HDEL', KEYS[3], ARGV[2])
end
return removed
