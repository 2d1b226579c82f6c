-- include: lookup
--[[
  find: reads a waiting message, found by its UUID or by the business key
  it holds, without changing anything.

  KEYS[1] waiting  zset  message UUID -> due score
  KEYS[2] bodies   hash  message UUID -> encoded message
  KEYS[3] bkeys    hash  business key -> UUID of the waiting message holding it
  ARGV[1] "uuid" or "key": what ARGV[2] is
  ARGV[2] the message UUID, or the business key

  Returns {UUID, due score, encoded message} when the message is waiting,
  false otherwise (unknown, already due, or cancelled).
]]
local waiting, bodies, bkeys = KEYS[1], KEYS[2], KEYS[3]
local by, ref = ARGV[1], ARGV[2]
local id = lookup_id(bkeys, by, ref)
if not id then
  return false
end
local score = redis.call('ZSCORE', waiting, id)
if not score then
  return false
end
local body = redis.call('HGET', bodies, id)
if not body then
  return false
end
return {id, score, body}
