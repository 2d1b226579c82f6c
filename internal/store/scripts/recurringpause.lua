-- include: clock
--[[
  recurringpause: pauses or resumes a recurring schedule. A paused schedule's
  next tick is parked at the end of time, so no tick loop finds it due;
  resuming sets it to the first tick after now (the ticks missed while
  paused are not published) and wakes the tick loops.

  KEYS[1] defs    hash  schedule ID -> JSON definition
  KEYS[2] next    zset  schedule ID -> next tick not yet published (Unix ms)
  KEYS[3] paused  hash  schedule ID -> when it was paused (Unix ms)
  ARGV[1] schedule ID
  ARGV[2] "pause" or "resume"
  ARGV[3] resume: the next tick (Unix ms); pause: unused (the pause is
          recorded at Redis's now, so a tick claimed before it is due
          no later than the pause)
  ARGV[4] the parked tick (Unix ms, year 9999)
  ARGV[5] the schedulers' wake channel for schedules

  Returns -1 when no such schedule exists, 0 when it already was in the
  state asked for, 1 when it changed.
]]
local defs, next, paused = KEYS[1], KEYS[2], KEYS[3]
local id, op, at, parked, wake = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HEXISTS', defs, id) == 0 then
  return -1
end
if op == 'pause' then
  if redis.call('HSETNX', paused, id, now_ms()) == 0 then
    return 0
  end
  redis.call('ZADD', next, parked, id)
  return 1
end
if redis.call('HDEL', paused, id) == 0 then
  return 0
end
redis.call('ZADD', next, at, id)
redis.pcall('PUBLISH', wake, id)
return 1
