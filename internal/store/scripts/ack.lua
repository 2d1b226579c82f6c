#!lua flags=allow-oom
-- include: clock, lib, fair
--[[
  ack: acknowledges messages read from a group's redelivery stream and
  deletes their entries, which no other group reads. An entry no longer
  pending (handed back or reclaimed, and so already deleted or owned by a
  newer entry) is left alone. A grouped message's entry (field k) gives its
  group's slot back (fair.lua); entries are read for it only while the
  group has fair queues.

  KEYS[1] rstream  stream the group's redelivery stream
  KEYS[2] fq       hash   the group's fair queues (see fair.lua)
  KEYS[3] fring    list   the group's ring of groups to serve
  KEYS[4] fprio    list   the group's groups with high-priority messages
  KEYS[5] fwait    zset   the group's groups asleep under their rate limit
  KEYS[6] meta     hash   the group's policy (per-group cap and rate)
  KEYS[7] bell     string the partition's bell (see lib.lua's ring)
  ARGV[1] consumer group
  ARGV[2..] entry ids

  Returns how many of the entries were pending and are now acknowledged.
]]
local rstream, fq, fring, fprio, fwait, meta, bell = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local group = ARGV[1]
local c = nil
if redis.call('EXISTS', fq) == 1 then
  c = fair_open(fq, fring, fprio, fwait, meta)
end
local acked = 0
for i = 2, #ARGV do
  if redis.call('XACK', rstream, group, ARGV[i]) == 1 then
    if c then
      local _, _, g = entry_of(rstream, ARGV[i])
      if g then fair_release(c, g) end
    end
    redis.call('XDEL', rstream, ARGV[i])
    acked = acked + 1
  end
end
if c then fair_close(c, bell, now_ceil_ms()) end
return acked
