--[[
  ack: acknowledges a message read from a group's redelivery stream and
  deletes the entry, which no other group reads.

  KEYS[1] rstream  stream the group's redelivery stream
  ARGV[1] consumer group
  ARGV[2] entry id

  Returns 1 when acknowledged, 0 when the entry was not pending.
]]
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
