-- include: clock, lookup
--[[
  reschedule: moves a message that is still waiting to a new due time, in
  place: same UUID, body, business key and priority, only its score
  changes. The score takes a new sequence number, as publish gives one, so
  the message goes after those already due in the same millisecond.

  KEYS[1] waiting  zset   message UUID -> score (due ms * 1024 + sequence)
  KEYS[2] bkeys    hash   business key -> UUID of the waiting message holding it
  KEYS[3] seq      string counter that keeps equal due times in publish order
  KEYS[4] dormant  string set while no scheduler loop runs for the partition (idle.lua)
  ARGV[1] "uuid" or "key": what ARGV[2] is
  ARGV[2] the message UUID, or the business key
  ARGV[3] new delay in ms from now (Redis server time, rounded up); 0: due now
  ARGV[4] wake channel, published to when the earliest due time moves earlier
  ARGV[5] optional: the new due time in ms since the epoch, in place of ARGV[3]
          (a bulk reschedule gives every message the same due time)

  Returns the new score when the message was waiting and is moved, 0
  otherwise (unknown, already due and moved on, or cancelled): nothing is
  changed then.
]]
local waiting, bkeys, seq, dormant = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local by, ref, delay, wake, at = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local id = lookup_id(bkeys, by, ref)
if not id then
  return 0
end
if not redis.call('ZSCORE', waiting, id) then
  return 0
end
local head = redis.call('ZRANGE', waiting, '0', '0', 'WITHSCORES')[2]
local seqNo = redis.call('INCR', seq)
local score = (at or now_ceil_ms() + delay) * 1024 + seqNo % 1024
redis.call('ZADD', waiting, 'XX', score, id)
-- the partition has a waiting message, so it is not dormant; should it be
-- marked all the same, a wake-up starts its loop
if score < tonumber(head) or redis.call('DEL', dormant) == 1 then
  redis.call('PUBLISH', wake, 'd')
end
return score
