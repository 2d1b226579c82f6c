-- include: clock, lib
--[[
  requeue: moves dead letters back to their consumer group, into its
  redelivery stream, as attempt 1.

  KEYS[1] dead     stream the group's dead letters
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] bell     string the partition's bell (see read.lua)
  ARGV[1] most dead letters moved when no id is given
  ARGV[2..] dead-letter ids to move; none: the oldest, up to ARGV[1]

  Returns the number moved (ids that are not dead letters are skipped).
]]
local dead, rstream, bell = KEYS[1], KEYS[2], KEYS[3]
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
for _, e in ipairs(entries) do
  local body = ''
  for i = 1, #e[2], 2 do
    if e[2][i] == 'm' then body = e[2][i + 1] end
  end
  redis.call('XADD', rstream, '*', 'm', body, 'a', 1)
  redis.call('XDEL', dead, e[1])
end
if #entries > 0 then ring(bell) end
return #entries
