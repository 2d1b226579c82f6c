#!lua flags=allow-oom
-- include: clock
--[[
  unpack: moves the head of a far bucket (see far.go) into the waiting set,
  when the bucket's time to unpack has come and the caller holds the
  partition's scheduling lease (only the holder pops far buckets). The
  caller read the bucket's popped count and head in one snapshot and names
  the far index shard of each element, so every key is declared; an
  element blanked ("") since, by a cancel, is skipped. Flagged allow-oom
  like promote: the messages only move on, towards being delivered.

  KEYS[1] lease    string owner of the partition's scheduling
  KEYS[2] far      zset   far bucket number -> when to unpack it (ms)
  KEYS[3] fmeta    hash   far counters: n, p:<bucket> (popped), l:<bucket> (live)
  KEYS[4] bucket   list   the far bucket: due score (8 bytes, big-endian double) .. encoded message
  KEYS[5] waiting  zset   message UUID -> due score
  KEYS[6] bodies   hash   message UUID -> encoded message
  KEYS[7...]       far index shards, as the elements name them
  ARGV[1]          owner: the caller's scheduler id
  ARGV[2]          the bucket's number
  ARGV[3]          its popped count as the caller read it
  ARGV[4]          number of head elements the caller read, n
  then three arguments per element, in list order:
  ARGV[j]          the UUID's far index field ("" for an element read blank
                   or that cannot be read: it is dropped and counted)
  ARGV[j+1]        the message UUID
  ARGV[j+2]        index in KEYS of its far index shard

  Returns {moved, corrupt, more}: messages moved into the waiting set,
  elements that could not be read (dropped), and 1 when the bucket has
  more elements (the caller calls again), else 0. {-1, 0, 0} when the
  caller does not hold the lease, the bucket is not due for unpacking, or
  the snapshot is stale (the caller reads again on its next tick).
]]
local b = ARGV[2]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1, 0, 0}
end
local at = redis.call('ZSCORE', KEYS[2], b)
if not at or tonumber(at) > now_ms() then
  return {-1, 0, 0}
end
if tonumber(redis.call('HGET', KEYS[3], 'p:' .. b) or '0') ~= tonumber(ARGV[3]) then
  return {-1, 0, 0}
end
local n = tonumber(ARGV[4])
if n == 0 then
  -- nothing read: a bucket whose list is gone (data lost) is forgotten
  if redis.call('EXISTS', KEYS[4]) == 0 then
    redis.call('ZREM', KEYS[2], b)
    redis.call('HDEL', KEYS[3], 'p:' .. b, 'l:' .. b)
    return {0, 0, 0}
  end
  return {-1, 0, 0}
end
local els = redis.call('LRANGE', KEYS[4], 0, n - 1)
if #els ~= n then
  return {-1, 0, 0}
end
local moved, corrupt, live = 0, 0, 0
local z, h = {}, {}
for i = 1, n do
  local e, j = els[i], 5 + 3 * (i - 1)
  if e ~= '' then
    live = live + 1
    if ARGV[j] == '' or #e < 9 then
      corrupt = corrupt + 1
    else
      redis.call('HDEL', KEYS[tonumber(ARGV[j + 2])], ARGV[j])
      local id = ARGV[j + 1]
      -- the tiers never hold one UUID twice; should they, the waiting one stays
      if redis.call('HSETNX', KEYS[6], id, string.sub(e, 9)) == 1 then
        z[#z + 1] = struct.unpack('>d', e)
        z[#z + 1] = id
        moved = moved + 1
      end
    end
  end
end
for c = 1, #z, 1000 do
  redis.call('ZADD', KEYS[5], unpack(z, c, math.min(c + 999, #z)))
end
-- Counters are written as values, not HINCRBY by -live: Lua's -0 reaches
-- Redis as "-0", which HINCRBY refuses, and a script that fails after
-- LTRIM would leave the popped count behind the list.
local left = tonumber(redis.call('HGET', KEYS[3], 'n') or '0') - live
if left > 0 then
  redis.call('HSET', KEYS[3], 'n', left)
else
  redis.call('HDEL', KEYS[3], 'n')
end
redis.call('LTRIM', KEYS[4], n, -1)
if redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('ZREM', KEYS[2], b)
  redis.call('HDEL', KEYS[3], 'p:' .. b, 'l:' .. b)
  return {moved, corrupt, 0}
end
local counts = redis.call('HMGET', KEYS[3], 'p:' .. b, 'l:' .. b)
redis.call('HSET', KEYS[3], 'p:' .. b, tonumber(counts[1] or '0') + n, 'l:' .. b, tonumber(counts[2] or '0') - live)
return {moved, corrupt, 1}
