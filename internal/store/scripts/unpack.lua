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
local lease, far, fmeta, bucket, waiting, bodies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local owner, b, popped, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('GET', lease) ~= owner then
  return {-1, 0, 0}
end
local at = redis.call('ZSCORE', far, b)
if not at or tonumber(at) > now_ms() then
  return {-1, 0, 0}
end
if tonumber(redis.call('HGET', fmeta, 'p:' .. b) or '0') ~= popped then
  return {-1, 0, 0}
end
if n == 0 then
  -- nothing read: a bucket whose list is gone (data lost) is forgotten
  if redis.call('EXISTS', bucket) == 0 then
    redis.call('ZREM', far, b)
    redis.call('HDEL', fmeta, 'p:' .. b, 'l:' .. b)
    return {0, 0, 0}
  end
  return {-1, 0, 0}
end
local els = redis.call('LRANGE', bucket, 0, n - 1)
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
      if redis.call('HSETNX', bodies, id, string.sub(e, 9)) == 1 then
        z[#z + 1] = struct.unpack('>d', e)
        z[#z + 1] = id
        moved = moved + 1
      end
    end
  end
end
for c = 1, #z, 1000 do
  redis.call('ZADD', waiting, unpack(z, c, math.min(c + 999, #z)))
end
-- Counters are written as values, not HINCRBY by -live: Lua's -0 reaches
-- Redis as "-0", which HINCRBY refuses, and a script that fails after
-- LTRIM would leave the popped count behind the list.
local left = tonumber(redis.call('HGET', fmeta, 'n') or '0') - live
if left > 0 then
  redis.call('HSET', fmeta, 'n', left)
else
  redis.call('HDEL', fmeta, 'n')
end
redis.call('LTRIM', bucket, n, -1)
if redis.call('EXISTS', bucket) == 0 then
  redis.call('ZREM', far, b)
  redis.call('HDEL', fmeta, 'p:' .. b, 'l:' .. b)
  return {moved, corrupt, 0}
end
local counts = redis.call('HMGET', fmeta, 'p:' .. b, 'l:' .. b)
redis.call('HSET', fmeta, 'p:' .. b, tonumber(counts[1] or '0') + n, 'l:' .. b, tonumber(counts[2] or '0') - live)
return {moved, corrupt, 1}
