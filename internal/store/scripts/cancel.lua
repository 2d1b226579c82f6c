-- include: lookup
--[[
  cancel: removes a message that is still waiting, found by its UUID or by
  the business key it holds, and frees its business key if it holds one.

  KEYS[1] waiting  zset  message UUID -> due score
  KEYS[2] bodies   hash  message UUID -> encoded message
  KEYS[3] bkeys    hash  business key -> UUID of the waiting message holding it
  KEYS[4] bkeyof   hash  UUID of a waiting message -> its business key
  KEYS[5] prio     hash  message UUID -> 1 for high-priority messages
  KEYS[6] grpof    hash  UUID of a waiting grouped message -> its group
  ARGV[1] "uuid" or "key": what ARGV[2] is
  ARGV[2] the message UUID, or the business key

  Returns 1 when the message was waiting and is removed, 0 otherwise
  (unknown, already delivered, or already cancelled).
]]
local waiting, bodies, bkeys, bkeyof, prio, grpof = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local by, ref = ARGV[1], ARGV[2]
local id = lookup_id(bkeys, by, ref)
if not id then
  return 0
end
local removed = redis.call('ZREM', waiting, id)
if removed == 0 and by == 'uuid' then
  return 0
end
-- by key, a holder no longer waiting (none should be) is freed all the same
redis.call('HDEL', bodies, id)
redis.call('HDEL', prio, id)
redis.call('HDEL', grpof, id)
local key = redis.call('HGET', bkeyof, id)
if key then
  redis.call('HDEL', bkeyof, id)
  if redis.call('HGET', bkeys, key) == id then
    redis.call('HDEL', bkeys, key)
  end
end
if by == 'key' then
  redis.call('HDEL', bkeys, ref)
end
return removed
