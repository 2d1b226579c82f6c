--[[
  dropgroup: deletes a consumer group from a topic with everything it holds
  (unread and pending positions, retries, redeliveries, dead letters), so
  an abandoned group stops keeping entries in the ready stream.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] groups   set    consumer groups of the topic
  KEYS[3..] the group's own keys: redelivery stream, retry set, retry
          bodies, dead letters, meta, owner, members, owned (the last three
          for ordered subscriptions), paused, rate (partition 0 only), and
          its fair queues: fq, fring, fprio, fwait (see fair.lua)

  ARGV[1] consumer group

  Returns 1 when the group existed, 0 otherwise.
]]
local stream, groups = KEYS[1], KEYS[2]
local group = ARGV[1]
local existed = redis.call('SREM', groups, group)
if redis.call('EXISTS', stream) == 1 then
  existed = math.max(existed, redis.call('XGROUP', 'DESTROY', stream, group))
end
-- UNLINK frees large keys (dead letters) off the main thread
redis.call('UNLINK', unpack(KEYS, 3))
return existed
