#!lua flags=allow-oom
-- include: farel, ffilter, fpindex
--[[
  farpull: moves one far message (see far.go), found by its UUID's far
  index entry, into the waiting set with its due time, so Cancel,
  Reschedule and a retried Publish handle it there like any waiting
  message; or, with ARGV[6] = "1", only reads it. Its bucket element becomes
  "" (the bucket's unpacking skips it); a bucket left with no live element
  is deleted. Flagged allow-oom: it frees more than it adds.

  KEYS[1] far      zset   far bucket number -> when to unpack it (ms)
  KEYS[2] fmeta    hash   far counters: n (and fm, the far filter's: see
                          farfilter.go), p:<bucket> (popped), l:<bucket> (live)
  KEYS[3] bucket   list   the message's far bucket
  KEYS[4] index    hash   the far index shard of the UUID; with ARGV[9] "3",
                          the format 3 index shard of its fingerprint, with
                          "s" the format 3 side table (far3.go)
  KEYS[5] waiting  zset   message UUID -> due score
  KEYS[6] bodies   hash   message UUID -> encoded message
  KEYS[7] bkeys    hash   business key -> UUID of the waiting message holding
                          it (far_mark while it waits in the far tier)
  KEYS[8] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[9] prio     hash   UUID of a waiting high-priority message -> 1
  KEYS[10] ff      string the far filter: dropped when the far tier empties
  KEYS[11] fkc     hash   the format 3 index's side table of business keys
  KEYS[12] kshardA hash   with ARGV[11]: the format 3 index shard h mod 2^L
                          of the message's business key's hash h
  KEYS[13] kshardB hash   with ARGV[11]: the shard h mod 2^(L+1)
  ARGV[1] the UUID's far index field; with ARGV[9] "3", its fingerprint
  ARGV[2] the location the caller read for it (format 1: bucket * 2^24 +
          position; format 2: minus that, less one; format 3's index: a
          place, far3.go's fpLoc)
  ARGV[3] the message UUID
  ARGV[4] the bucket's number
  ARGV[5] wake channel, published to when the message becomes the earliest
  ARGV[6] "1": only read the message
  ARGV[7] the bucket's format, 1 or 2 (see far.go; KEYS[1] and KEYS[3] are
          that format's)
  ARGV[8] the bucket's first due ms (format 2 stores due times from it)
  ARGV[9] the index KEYS[4] is: "2" the far index (formats 1 and 2), "3" a
          format 3 index shard, "s" the format 3 side table
  ARGV[10] the UUID's far index field (the side table's field)
  ARGV[11] the fingerprint of business key ARGV[15] in the format 3 index
           (far3.go's fpKeyHash), when the caller expects the message to
           hold it (or was asked, {3, key, iL, iS}); else ""
  ARGV[12] with ARGV[11]: its hash mod 2^L
  ARGV[13] with ARGV[11]: the index's L the caller read
  ARGV[14] a business key: the element is confirmed by its key, not its
           UUID (ARGV[3] ""), and only read (a far holder looked up by its
           key's entry in the format 3 index, or in the side table of keys)
  ARGV[15] with ARGV[11]: the business key it is the fingerprint of

  Returns {1, body, due score} when the message was there (and, unless read
  only, is moved), {0} when the index no longer holds that location (moved
  or unpacked meanwhile, or the index's L is not ARGV[13]: the caller looks
  again), {2} when a format 3 index shard's entry is another message's of
  the same fingerprint (the caller looks in the side table), {3, key, iL,
  iS} when a message of format 3 with a business key is to move and the
  fingerprint ARGV[11] is not its key's (the caller calls again with the
  key's fingerprint and shards in the index's shape, :fmeta's iL and iS).
]]
local far, fmeta, bucket, index, waiting, bodies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local bkeys, bkeyof, prio, ff, fkc, kshardA, kshardB = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local field, readLoc, uuid, b, wake, readOnly = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local v, start, mode, full = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], ARGV[10]
local kfp, klow, kL, byKey, kfor = ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15]
local pf, lf = 'p:' .. b, 'l:' .. b
if v == 2 then
  pf, lf = 'P:' .. b, 'L:' .. b
end
local loc = redis.call('HGET', index, field)
if loc ~= readLoc then
  return {0}
end
local pos, collided, _
if mode == '2' then
  local x = tonumber(loc)
  if v == 2 then
    x = -x - 1
  end
  pos = x % 16777216
else
  _, pos, collided = fi_place(loc)
end
local popped = tonumber(redis.call('HGET', fmeta, pf) or '0')
pos = (pos or -1) - popped
local e = pos >= 0 and redis.call('LINDEX', bucket, pos)
local score, body, key, isPrio
if e and e ~= '' then
  score, body, key, isPrio = far_decode(v, start, e)
end
body = body or ''
if byKey ~= '' then
  if key ~= byKey then
    return {2} -- a fingerprint's holder, not the key's
  end
  return {1, body, score}
end
-- The element must be the message asked for: its UUID is the far field
-- (ARGV[10]; codec version 3: its 16 bytes) or, as text, the UUID given.
local id = nil
local cv = string.byte(body, 1)
if cv == 3 then
  id = string.sub(body, 2, 17) == full and uuid
elseif cv == 1 or cv == 2 then
  local n, at = string.byte(body, 2), 3
  if n and n >= 128 then
    n, at = (n - 128) + 128 * (string.byte(body, 3) or 0), 4
  end
  id = n and string.sub(body, at, at + n - 1)
end
if id ~= uuid then
  if mode == '3' then
    return {2} -- a fingerprint's holder, not the message asked for
  end
  -- an index entry whose element is gone or another message's (cannot
  -- happen unless data was damaged): drop it rather than act on the wrong
  -- message; the message itself, wherever it is, is still delivered
  redis.call('HDEL', index, field)
  return {0}
end
if readOnly == '1' then
  return {1, body, score}
end
local v3 = string.byte(e, 1) == 3
local dk = 0
if v3 and key then
  -- format 3 marks the key by its entry in the index, which goes too
  local shape = redis.call('HMGET', fmeta, 'iL', 'iS')
  if kfp == '' or kfor ~= key then
    return {3, key, shape[1], shape[2]}
  end
  if shape[1] ~= kL then
    return {0}
  end
  local kshard = kshardA
  if tonumber(klow) < tonumber(shape[2] or '0') then kshard = kshardB end
  fi_remove(kshard, fkc, kfp, key, tonumber(b), pos + popped, true)
  dk = 1
end
redis.call('LSET', bucket, pos, '')
if collided then
  redis.call('HSET', index, field, '\1') -- a tombstone (see fi_remove)
else
  redis.call('HDEL', index, field)
end
ff_remove(fmeta, ff, 1, dk)
if redis.call('HINCRBY', fmeta, lf, '-1') <= 0 then
  redis.call('DEL', bucket)
  redis.call('ZREM', far, b)
  redis.call('HDEL', fmeta, pf, lf)
end
local head = redis.call('ZRANGE', waiting, '0', '0', 'WITHSCORES')[2]
redis.call('ZADD', waiting, score, uuid)
redis.call('HSET', bodies, uuid, body)
far_restore(bkeys, bkeyof, prio, uuid, full, key, isPrio, v3)
if not head or score < tonumber(head) then
  redis.call('PUBLISH', wake, 'd')
end
return {1, body, score}
