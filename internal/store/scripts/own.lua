#!lua flags=allow-oom
--[[
  own: takes, renews or drops a consumer's exclusive ownership of one
  partition of a topic for a consumer group (ordered subscriptions: one
  consumer of the group at a time reads a partition). Taking it claims
  every entry still pending in the group for the partition (those of a
  previous owner that died or gave the partition up) for the new owner,
  which reads them first, in order, before new ones; JUSTID leaves their
  delivery counts alone. A call claims ARGV[7] entries at most, so a long
  pending list does not block Redis: the new owner calls "claim" with the
  returned position until done, before it reads. An owner that dies
  before that leaves the rest to the next owner, whose take claims the
  whole list again; a take by the owner itself starts over too.

  KEYS[1] owner    string the owning consumer's name (expires)
  KEYS[2] stream   stream the partition's ready stream
  KEYS[3] rstream  stream the group's redelivery stream of the partition
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] lease time in ms
  ARGV[4] "take", "renew", "drop" or "claim" (go on claiming)
  ARGV[5] claim: the stream to go on with (2 or 3, as in KEYS)
  ARGV[6] claim: the XAUTOCLAIM cursor to go on from
  ARGV[7] take, claim: most entries claimed in the call

  Returns {status, stream, cursor}. status is 1 when the caller owns the
  partition after a take, renew or claim (2 when entries were claimed), 0
  when another consumer owns it (or, for drop, when the caller did not);
  drop returns 1 when dropped. After a take or claim, stream and cursor
  tell where to go on claiming (ARGV[5], ARGV[6]); stream 0: all claimed.
]]
local owner, stream, rstream = KEYS[1], KEYS[2], KEYS[3]
local group, consumer, lease, op = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local fromStream, fromCursor, most = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local holder = redis.call('GET', owner)
if op == 'drop' then
  if holder == consumer then
    redis.call('DEL', owner)
    return {1, 0, ''}
  end
  return {0, 0, ''}
end
if op == 'renew' then
  if holder == consumer then
    redis.call('PEXPIRE', owner, lease)
    return {1, 0, ''}
  end
  return {0, 0, ''}
end
local s, cursor = 2, '0-0'
if op == 'claim' then
  if holder ~= consumer then
    return {0, 0, ''}
  end
  s, cursor = fromStream, fromCursor
elseif holder and holder ~= consumer then
  return {0, 0, ''}
end
redis.call('SET', owner, consumer, 'PX', lease)
local left = most
local claimed = 0
-- the streams by their place in KEYS, as ARGV[5] and the reply number them
local streams = {[2] = stream, [3] = rstream}
-- one XAUTOCLAIM per stream (it scans 10 * COUNT entries at most)
while s <= 3 do
  local ok, r = pcall(redis.call, 'XAUTOCLAIM', streams[s], group, consumer, 0, cursor, 'COUNT', left, 'JUSTID')
  if not ok then
    cursor = '0-0' -- the group does not exist on this stream yet: nothing is pending
  else
    cursor = r[1]
    claimed = claimed + #r[2]
    left = left - #r[2]
  end
  if cursor ~= '0-0' then
    break
  end
  s = s + 1
  if left <= 0 then
    break
  end
end
if s > 3 then
  s = 0
end
if claimed > 0 then
  return {2, s, cursor}
end
return {1, s, cursor}
