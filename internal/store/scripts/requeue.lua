-- include: clock, lib, fair
--[[
  requeue: moves dead letters back to their consumer group, into its
  redelivery stream, as attempt 1. A grouped message's dead letter (field
  k) goes back to the end of its group's queue (fair.lua).

  KEYS[1] dead     stream the group's dead letters
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] bell     string the partition's bell (see lib.lua's ring)
  KEYS[4] meta     hash   the group's policy (per-group cap and rate)
  KEYS[5] fq       hash   the group's fair queues (see fair.lua)
  KEYS[6] fring    list   the group's ring of groups to serve
  KEYS[7] fprio    list   the group's groups with high-priority messages
  KEYS[8] fwait    zset   the group's groups asleep under their rate limit
  ARGV[1] most dead letters moved when no id is given
  ARGV[2..] dead-letter ids to move; none: the oldest, up to ARGV[1]

  Returns the number moved (ids that are not dead letters are skipped).
]]
local dead, rstream, bell, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fq, fring, fprio, fwait = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local most = tonumber(ARGV[1])
local entries = {}
if #ARGV > 1 then
  for i = 2, #ARGV do
    local e = redis.call('XRANGE', dead, ARGV[i], ARGV[i])[1]
    if e then entries[#entries + 1] = e end
  end
else
  entries = redis.call('XRANGE', dead, '-', '+', 'COUNT', most)
end
local c = nil -- the fair queues, opened at the first grouped message
for _, e in ipairs(entries) do
  local body, g = '', nil
  for i = 1, #e[2], 2 do
    if e[2][i] == 'm' then body = e[2][i + 1] elseif e[2][i] == 'k' then g = e[2][i + 1] end
  end
  if g then
    c = c or fair_open(fq, fring, fprio, fwait, meta)
    fair_push(c, g, 1, body, 'back')
  else
    redis.call('XADD', rstream, '*', 'm', body, 'a', '1')
  end
  redis.call('XDEL', dead, e[1])
end
if c then fair_close(c, bell, now_ceil_ms()) end
if #entries > 0 then ring(bell) end
return #entries
