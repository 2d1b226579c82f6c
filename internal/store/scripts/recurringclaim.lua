-- include: clock
--[[
  recurringclaim: claims one due tick of a schedule, by compare-and-set on its
  next tick, so that one process only, however many run, publishes it.

  KEYS[1] next    zset  schedule ID -> next tick not yet published (Unix ms)
  KEYS[2] claims  zset  "<schedule ID>@<tick ms>" -> claim expiry (Redis ms)
  ARGV[1] schedule ID
  ARGV[2] the tick the caller read as next (Unix ms)
  ARGV[3] the tick after it (Unix ms)
  ARGV[4] claim lifetime (ms); "0": skip the tick (too late) without a claim

  Returns {status, expiry}: status 1 claimed (the caller publishes the
  tick, then removes the claim; expiry is the claim's), 0 another process
  moved the next tick first or the schedule is gone, -1 the tick is not
  due yet by Redis's clock (expiry is then Redis's time, ms).
]]
local next, claims = KEYS[1], KEYS[2]
local id, tick, after, ttl = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local cur = redis.call('ZSCORE', next, id)
if not cur or tonumber(cur) ~= tonumber(tick) then
  return {0, 0}
end
if tonumber(tick) > now then
  return {-1, now}
end
redis.call('ZADD', next, after, id)
if ttl == 0 then
  return {1, 0}
end
redis.call('ZADD', claims, now + ttl, id .. '@' .. tick)
return {1, now + ttl}
