#!lua flags=allow-oom
--[[
  ack: acknowledges messages read from a group's redelivery stream and
  deletes their entries, which no other group reads. An entry no longer
  pending (handed back or reclaimed, and so already deleted or owned by a
  newer entry) is left alone.

  KEYS[1] rstream  stream the group's redelivery stream
  ARGV[1] consumer group
  ARGV[2..] entry ids

  Returns how many of the entries were pending and are now acknowledged.
]]
local rstream = KEYS[1]
local group = ARGV[1]
local acked = 0
for i = 2, #ARGV do
  if redis.call('XACK', rstream, group, ARGV[i]) == 1 then
    redis.call('XDEL', rstream, ARGV[i])
    acked = acked + 1
  end
end
return acked
