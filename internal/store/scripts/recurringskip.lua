--[[
  recurringskip: a claimed tick skipped by its schedule's overlap policy (the
  previous tick's message is not finished, see recurringoverlap.lua): drops
  the claim and counts the skip, with the tick, for Inspector.Schedules.

  KEYS[1] claims  zset  "<schedule ID>@<tick ms>" -> claim expiry (Redis ms)
  KEYS[2] skips   hash  schedule ID -> ticks skipped; "<schedule ID>@last" -> the last one (Unix ms)
  ARGV[1] claim member
  ARGV[2] schedule ID
  ARGV[3] the tick (Unix ms)

  Returns how many ticks of the schedule were skipped, this one included.
]]
local claims, skips = KEYS[1], KEYS[2]
local member, id, tick = ARGV[1], ARGV[2], ARGV[3]
redis.call('ZREM', claims, member)
local n = redis.call('HINCRBY', skips, id, '1')
redis.call('HSET', skips, id .. '@last', tick)
return n
