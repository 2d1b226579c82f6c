-- include: lib
--[[
  append: stores the messages of one or more Publish calls to a partition
  that are all plain and due now (no delay, business key, priority or
  group) when the ready stream has no bound: appends them to the ready
  stream and rings the partition's bell, as publish.lua does with such
  messages, at a fraction of its cost (at a steady rate every message is a
  call of its own). Such a call cannot be refused, so every call of a run
  is stored.

  KEYS[1] stream   stream ready messages, field m = encoded message
  KEYS[2] bell     string the partition's bell (see lib.lua's ring)
  KEYS[3] dormant  string set while no scheduler loop runs for the
                          partition (idle.lua): its scheduler trims and
                          reclaims what is appended
  KEYS[4] reg      string set by the first publish: gone, Redis lost the
                          topic registry too
  ARGV[1] wake channel, published to when the partition was dormant
  ARGV[2..] the encoded messages, in publish order

  Returns 1 when KEYS[4] was missing (the caller registers the topic
  again), else 0.

  No allow-oom flag, as publish.lua.
]]
local stream, bell, dormant, reg = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local wake = ARGV[1]
for i = 2, #ARGV do
  redis.call('XADD', stream, '*', 'm', ARGV[i])
end
ring(bell)
-- EXISTS counts a key named twice twice: 2 for reg, 1 for dormant, in
-- one command where a DEL and an EXISTS were two (callgrind: 42.5k ->
-- 40.6k instructions a publish); dormant is seldom set. (Naming the bell
-- too, 4 times, saves its DEL while unarmed but costs more than the DEL
-- while armed, as it mostly is below 2k/s.)
local flags = redis.call('EXISTS', reg, reg, dormant)
if flags % 2 == 1 then
  redis.call('DEL', dormant)
  redis.call('PUBLISH', wake, 'd')
end
if flags < 2 then
  redis.call('SET', reg, '1')
  return 1
end
return 0
