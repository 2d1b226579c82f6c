#!lua flags=allow-oom
--[[
  own: takes, renews or drops a consumer's exclusive ownership of one
  partition of a topic for a consumer group (ordered subscriptions: one
  consumer of the group at a time reads a partition). Taking it claims
  every entry still pending in the group for the partition (those of a
  previous owner that died or gave the partition up) for the new owner,
  which reads them first, in order, before new ones; JUSTID leaves their
  delivery counts alone.

  KEYS[1] owner    string the owning consumer's name (expires)
  KEYS[2] stream   stream the partition's ready stream
  KEYS[3] rstream  stream the group's redelivery stream of the partition
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] lease time in ms
  ARGV[4] "take", "renew" or "drop"

  Returns 1 when the caller owns the partition after a take or renew (2
  when a take claimed pending entries), 0 when another consumer owns it
  (or, for drop, when the caller did not); drop returns 1 when dropped.
]]
local group, consumer, op = ARGV[1], ARGV[2], ARGV[4]
local holder = redis.call('GET', KEYS[1])
if op == 'drop' then
  if holder == consumer then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if holder == consumer then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if holder or op ~= 'take' then
  return 0
end
redis.call('SET', KEYS[1], consumer, 'PX', ARGV[3])
local claimed = 0
for s = 2, 3 do
  local cursor = '0-0'
  repeat
    local ok, r = pcall(redis.call, 'XAUTOCLAIM', KEYS[s], group, consumer, 0, cursor, 'COUNT', 1000, 'JUSTID')
    if not ok then
      break -- the group does not exist on this stream yet: nothing is pending
    end
    cursor = r[1]
    claimed = claimed + #r[2]
  until cursor == '0-0'
end
if claimed > 0 then
  return 2
end
return 1
