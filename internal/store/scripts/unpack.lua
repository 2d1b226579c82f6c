#!lua flags=allow-oom
-- include: clock, farel, farmark, ffilter, fpindex
--[[
  unpack: moves the head of a far bucket (see far.go) into the waiting set,
  when the bucket's time to unpack has come and the caller holds the
  partition's scheduling lease (only the holder pops far buckets). The
  caller read the bucket's popped count and head in one snapshot and names
  the far index shard of each element, so every key is declared; an
  element blanked ("") since, by a cancel, is skipped. An element that
  cannot be read (of a newer release's format, or damaged) is never
  dropped, nor does it hold up the rest of the bucket: it moves to the
  partition's park list (KEYS[11]) as "<format>:<bucket>:<first due
  ms>:<element>", for a release that reads it, and the caller logs it.
  Flagged allow-oom like promote: the messages only move on, towards being
  delivered.

  KEYS[1] lease    string owner of the partition's scheduling
  KEYS[2] far      zset   far bucket number -> when to unpack it (ms), of
                          the bucket's format (far.go: :far or :fz)
  KEYS[3] fmeta    hash   far counters: n (and fm, the far filter's: see
                          farfilter.go), p:<bucket> (popped), l:<bucket>
                          (live); P:, L: for format 2
  KEYS[4] bucket   list   the far bucket (far.go: the formats)
  KEYS[5] waiting  zset   message UUID -> due score
  KEYS[6] bodies   hash   message UUID -> encoded message
  KEYS[7] bkeys    hash   business key -> UUID holding it (far_mark while
                          in the far tier)
  KEYS[8] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[9] prio     hash   UUID of a waiting high-priority message -> 1
  KEYS[10] ff      string the far filter: dropped when the far tier empties
  KEYS[11] fpark   list   far elements this release cannot read, parked
  KEYS[12] fic     hash   format 3 index's side table (far3.go)
  KEYS[13] fkc     hash   its side table of business keys
  KEYS[14...]      far index shards (format 3's too), as the elements name
                   them
  ARGV[1]          owner: the caller's scheduler id
  ARGV[2]          the bucket's number
  ARGV[3]          its popped count as the caller read it
  ARGV[4]          number of head elements the caller read, n
  ARGV[5]          the bucket's format, 1 or 2
  ARGV[6]          the bucket's first due ms (format 2 stores due times from it)
  ARGV[7]          the format 3 index's L the caller read (iL, see far3.go),
                   0 when it read no element of format 3
  then per element, in list order, three arguments (ARGV[7] 0) or seven:
  ARGV[j]          the UUID's far index field ("" for an element read blank
                   or that the caller cannot read); format 3: its
                   fingerprint (4 bytes), then the far field
  ARGV[j+1]        the message UUID
  ARGV[j+2]        index in KEYS of its far index shard; format 3: of the
                   shard h mod 2^L
  ARGV[j+3]        format 3: index in KEYS of the shard h mod 2^(L+1)
  ARGV[j+4]        format 3: h mod 2^L
  ARGV[j+5]        format 3 with a business key: the key's fingerprint
                   (far3.go's fpKeyHash), else ""
  ARGV[j+6]        with one: its shards, low a b as big-endian numbers of 4
                   bytes each (as publish.lua takes them)

  Returns {moved, parked, more}: messages moved into the waiting set,
  elements it could not read (parked), and 1 when the bucket has more
  elements (the caller calls again), else 0. {-1, 0, 0} when the caller does not
  hold the lease, the bucket is not due for unpacking, or the snapshot is
  stale, the format 3 index's L included (the caller reads again on its
  next tick).
]]
local lease, far, fmeta, bucket, waiting, bodies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local bkeys, bkeyof, prio, ff, fpark, fic, fkc = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local owner, b, popped, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local v, start, callerL = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local pf, lf = 'p:' .. b, 'l:' .. b
if v == 2 then
  pf, lf = 'P:' .. b, 'L:' .. b
end
if redis.call('GET', lease) ~= owner then
  return {-1, 0, 0}
end
local at = redis.call('ZSCORE', far, b)
if not at or tonumber(at) > now_ms() then
  return {-1, 0, 0}
end
if tonumber(redis.call('HGET', fmeta, pf) or '0') ~= popped then
  return {-1, 0, 0}
end
local shape, stride, splitS, sideEmpty = false, 3, 0, false
if callerL > 0 then
  stride = 7
  shape = redis.call('HMGET', fmeta, 'iL', 'iS')
  if tonumber(shape[1] or '11') ~= callerL then
    return {-1, 0, 0}
  end
  -- an element's shard (far3.go): h mod 2^L, or h mod 2^(L+1) below S;
  -- inline below, as a helper's call an element costs more than the rest
  -- of the element's index work
  splitS = tonumber(shape[2] or '0')
  sideEmpty = redis.call('EXISTS', fic) == 0
end
if n == 0 then
  -- nothing read: a bucket whose list is gone (data lost) is forgotten
  if redis.call('EXISTS', bucket) == 0 then
    redis.call('ZREM', far, b)
    redis.call('HDEL', fmeta, pf, lf)
    return {0, 0, 0}
  end
  return {-1, 0, 0}
end
local els = redis.call('LRANGE', bucket, '0', n - 1)
if #els ~= n then
  return {-1, 0, 0}
end
local moved, refused, live, keyed = 0, 0, 0, 0
local z, h = {}, {}
for i = 1, n do
  local e, j = els[i], 8 + stride * (i - 1)
  if e ~= '' then
    local score, body, key, isPrio
    if ARGV[j] ~= '' then
      score, body, key, isPrio = far_decode(v, start, e)
    end
    live = live + 1
    if not score then
      redis.call('RPUSH', fpark, v .. ':' .. b .. ':' .. start .. ':' .. e)
      refused = refused + 1
    else
      local field = ARGV[j]
      if shape and string.byte(e, 1) == 3 then
        local shard = KEYS[tonumber(ARGV[j + 2])]
        if tonumber(ARGV[j + 4]) < splitS then
          shard = KEYS[tonumber(ARGV[j + 3])]
        end
        -- the far field only when it is needed: a Lua string costs
        field = (key or not sideEmpty) and string.sub(ARGV[j], 5)
        if sideEmpty then
          redis.call('HDEL', shard, string.sub(ARGV[j], 1, 4)) -- see fi_remove
        else
          fi_remove(shard, fic, string.sub(ARGV[j], 1, 4), field, tonumber(b), popped + i - 1, false)
        end
        if key and ARGV[j + 5] ~= '' then
          -- the key's entry (format 3 marks a far holder's key there)
          local low, ka, kb = struct.unpack('>i4I4I4', ARGV[j + 6])
          local kshard = KEYS[ka]
          if low < splitS then kshard = KEYS[kb] end
          fi_remove(kshard, fkc, ARGV[j + 5], key, tonumber(b), popped + i - 1, true)
          keyed = keyed + 1
        end
      else
        redis.call('HDEL', KEYS[tonumber(ARGV[j + 2])], field)
      end
      local id = ARGV[j + 1]
      -- the tiers never hold one UUID twice; should they, the waiting one stays
      if redis.call('HSETNX', bodies, id, body) == 1 then
        z[#z + 1] = string.format('%d', score) -- (as publish.lua's scores)
        z[#z + 1] = id
        moved = moved + 1
        far_restore(bkeys, bkeyof, prio, id, field, key, isPrio, string.byte(e, 1) == 3)
      elseif key and is_far_mark(redis.call('HGET', bkeys, key), id, field) then
        redis.call('HDEL', bkeys, key) -- its far holder is gone
      end
    end
  end
end
for c = 1, #z, 1000 do
  redis.call('ZADD', waiting, unpack(z, c, math.min(c + 999, #z)))
end
-- Counters are written as values (see ff_remove), and before LTRIM: a
-- script that fails after it would leave the popped count behind the list.
ff_remove(fmeta, ff, live, keyed)
redis.call('LTRIM', bucket, n, '-1')
if redis.call('EXISTS', bucket) == 0 then
  redis.call('ZREM', far, b)
  redis.call('HDEL', fmeta, pf, lf)
  return {moved, refused, 0}
end
local counts = redis.call('HMGET', fmeta, pf, lf)
redis.call('HSET', fmeta, pf, tonumber(counts[1] or '0') + n, lf, tonumber(counts[2] or '0') - live)
return {moved, refused, 1}
