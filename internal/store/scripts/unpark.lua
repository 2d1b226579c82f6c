#!lua flags=allow-oom
-- include: farel, ffilter, fpindex
--[[
  unpark: moves far elements that a process of an older release parked
  (unpack.lua's park list: it could not read them) into the waiting set,
  when the caller holds the partition's scheduling lease. Release 0.2.0
  parks a format 3 element it meets (written while it was not yet seen,
  or after a rollback without the rewrite), having counted it out of the
  far tier (:fmeta's n, the bucket's live count) but left its index
  entries: they are removed here where the index's shape finds them (a
  stale one is harmless: every hit is confirmed against the element).
  The element's position in its bucket is not known any more, so an
  entry is taken for the element's when it names the element's bucket
  and the side table does not hold the element. An element this release
  cannot read either stays parked. Flagged allow-oom like unpack: the
  messages only move on, towards being delivered.

  KEYS[1] lease    string owner of the partition's scheduling
  KEYS[2] fmeta    hash   far counters: nk (the index's key entries), iL,
                          iS (its shape: far3.go)
  KEYS[3] fpark    list   the park list: "<format>:<bucket>:<first due
                          ms>:<element>"
  KEYS[4] waiting  zset   message UUID -> due score
  KEYS[5] bodies   hash   message UUID -> encoded message
  KEYS[6] bkeys    hash   business key -> UUID holding it
  KEYS[7] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[8] prio     hash   UUID of a waiting high-priority message -> 1
  KEYS[9] ff       string the far filter (dropped when the far tier empties)
  KEYS[10] fic     hash   format 3 index's side table (far3.go)
  KEYS[11] fkc     hash   its side table of business keys
  KEYS[12...]      format 3 index shards, as the elements name them
  ARGV[1]          owner: the caller's scheduler id
  ARGV[2]          the format 3 index's L the caller read (iL)
  ARGV[3]          number of parked entries the caller names, n
  then per entry seven arguments:
  ARGV[j]          the park list's entry, as read
  ARGV[j+1]        the UUID's fingerprint (4 bytes), then its far field
  ARGV[j+2]        the message UUID
  ARGV[j+3]        index in KEYS of the UUID's shard h mod 2^L
  ARGV[j+4]        index in KEYS of its shard h mod 2^(L+1)
  ARGV[j+5]        h mod 2^L
  ARGV[j+6]        with a business key: the key's fingerprint, then its
                   shards low a b as big-endian numbers of 4 bytes each;
                   else ""

  Returns {moved}: messages moved into the waiting set (an entry that
  cannot be read stays in the park list); {-1} when the caller does not
  hold the lease or the index's L changed since it read it (it reads
  again on its next trim).
]]
local lease, fmeta, fpark, waiting, bodies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local bkeys, bkeyof, prio, ff, fic, fkc = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local owner, callerL, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

if redis.call('GET', lease) ~= owner then
  return {-1}
end
local shape = redis.call('HMGET', fmeta, 'iL', 'iS')
if tonumber(shape[1] or '11') ~= callerL then
  return {-1}
end
local splitS = tonumber(shape[2] or '0')

-- fi_remove for an element whose position is unknown (see above).
local function remove_parked(shard, side, fp, full, b, key)
  local loc = redis.call('HGET', shard, fp)
  if not loc then
    return
  end
  local rb, _, collided, isKey = fi_place(loc)
  if collided and redis.call('HDEL', side, full) == 1 then
    return
  end
  if rb == b % 16777216 and isKey == key then
    if collided then
      redis.call('HSET', shard, fp, '\1')
    else
      redis.call('HDEL', shard, fp)
    end
  end
end

local moved, keyed = 0, 0
local z = {}
for i = 1, n do
  local j = 4 + 7 * (i - 1)
  local entry = ARGV[j]
  local v, b, start, e = string.match(entry, '^(%d+):(%-?%d+):(%-?%d+):(.+)$')
  local score, body, key, isPrio
  if e then
    score, body, key, isPrio = far_decode(tonumber(v), tonumber(start), e)
  end
  if score and redis.call('LREM', fpark, '1', entry) == 1 then
    local shard = KEYS[tonumber(ARGV[j + 3])]
    if tonumber(ARGV[j + 5]) < splitS then
      shard = KEYS[tonumber(ARGV[j + 4])]
    end
    local field, bn = string.sub(ARGV[j + 1], 5), tonumber(b)
    remove_parked(shard, fic, string.sub(ARGV[j + 1], 1, 4), field, bn, false)
    if key and ARGV[j + 6] ~= '' then
      local kfp, low, ka, kb = struct.unpack('>c4i4I4I4', ARGV[j + 6])
      local kshard = KEYS[ka]
      if low < splitS then kshard = KEYS[kb] end
      remove_parked(kshard, fkc, kfp, key, bn, true)
      keyed = keyed + 1
    end
    local id = ARGV[j + 2]
    -- the tiers never hold one UUID twice; should they, the waiting one stays
    if redis.call('HSETNX', bodies, id, body) == 1 then
      z[#z + 1] = string.format('%d', score) -- (as publish.lua's scores)
      z[#z + 1] = id
      moved = moved + 1
      far_restore(bkeys, bkeyof, prio, id, field, key, isPrio, true)
    end
  end
end
for c = 1, #z, 1000 do
  redis.call('ZADD', waiting, unpack(z, c, math.min(c + 999, #z)))
end
if keyed > 0 then
  -- the parking release counted the messages out, not their key entries
  ff_remove(fmeta, ff, 0, keyed)
end
return {moved}
