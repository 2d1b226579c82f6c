#!lua flags=allow-oom
-- include: clock, fair
--[[
  pick: moves up to count of a consumer group's grouped messages,
  round-robin across their groups, into its redelivery stream (fair.lua's
  fair_pick), where the XREADGROUP sent in the same pipeline reads them. A
  subscription sends it before each plain read while its last read found
  groups to serve, and when told of new ones (g on the bell's channel).

  KEYS[1] rstream  stream the group's redelivery stream
  KEYS[2] meta     hash   the group's policy (per-group cap and rate)
  KEYS[3] fq       hash   the group's fair queues (see fair.lua)
  KEYS[4] fring    list   the group's ring of groups to serve
  KEYS[5] fprio    list   the group's groups with high-priority messages
  KEYS[6] fwait    zset   the group's groups asleep under their rate limit
  KEYS[7] bell     string the partition's bell (see lib.lua's ring)
  ARGV[1] most messages moved

  Returns {moved, more, wake}: more is 1 while groups are left to serve
  (else the subscription goes back to plain reads), wake the ms at which a
  group asleep under its rate limit wakes (-1: none).
]]
local rstream, meta, fq, fring, fprio, fwait, bell = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local count = tonumber(ARGV[1])
if redis.call('EXISTS', fq) == 0 then
  return {0, 0, -1}
end
local c = fair_open(fq, fring, fprio, fwait, meta)
local now = now_ms()
local moved, more, wake = fair_pick(c, rstream, count, now)
fair_close(c, bell, now)
if more then
  return {moved, 1, wake}
end
return {moved, 0, wake}
