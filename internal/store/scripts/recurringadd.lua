--[[
  recurringadd: stores a recurring schedule, keeping its next tick when its
  timing (spec and time zone) is unchanged, so that every process may
  register the same schedule at start without losing or repeating a tick.

  KEYS[1] defs  hash  schedule ID -> JSON definition (fields spec, timezone, ...)
  KEYS[2] next  zset  schedule ID -> next tick not yet published (Unix ms)
  KEYS[3] paused hash schedule ID -> when it was paused (see recurringpause.lua):
                      a paused schedule keeps its parked next tick
  ARGV[1] schedule ID
  ARGV[2] JSON definition
  ARGV[3] spec
  ARGV[4] time zone
  ARGV[5] first tick (Unix ms) for a new schedule or a changed timing
  ARGV[6] the schedulers' wake channel for schedules: told when the next
          tick was set, so their tick loops read it (they otherwise sleep
          until the next tick they know of, a minute at most); a user the
          ACL refuses the channel still registers (the loops find the
          schedule within that minute)

  Returns 1 when the next tick was set to ARGV[5], 0 when it was kept.
]]
local defs, next, paused = KEYS[1], KEYS[2], KEYS[3]
local id, def, spec, timezone, first, wake = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local old = redis.call('HGET', defs, id)
redis.call('HSET', defs, id, def)
if old and redis.call('HEXISTS', paused, id) == 1 then
  return 0
end
if old and redis.call('ZSCORE', next, id) then
  local ok, stored = pcall(cjson.decode, old)
  if ok and type(stored) == 'table' and stored.spec == spec and (stored.timezone or '') == timezone then
    return 0
  end
end
redis.call('ZADD', next, first, id)
redis.pcall('PUBLISH', wake, id)
return 1
