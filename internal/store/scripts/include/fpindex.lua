--[[
  fpindex: the far tier's format 3 index, fingerprints in linear-hashed
  shards with a side table (see far3.go). An include (see scriptSource in
  scripts.go): put in front of the scripts that need it, not a script of
  its own.
]]

-- The bucket residue, position and collided flag of index value loc (as
-- far3.go's fpLoc writes it), and whether it is a business key's entry;
-- nil bucket and position for a tombstone.
local function fi_place(loc)
  if #loc == 5 then
    local b1, b2, b3, p1, p2 = string.byte(loc, 1, 5)
    return b1 * 65536 + b2 * 256 + b3, p1 * 256 + p2, false, false
  end
  if #loc == 6 then
    local b1, b2, b3, p1, p2, p3 = string.byte(loc, 1, 6)
    return b1 * 65536 + b2 * 256 + b3, p1 * 65536 + p2 * 256 + p3, false, true
  end
  if #loc == 7 then
    local f, b1, b2, b3, p1, p2, p3 = string.byte(loc, 1, 7)
    return b1 * 65536 + b2 * 256 + b3, p1 * 65536 + p2 * 256 + p3, f % 2 == 1, f % 4 >= 2
  end
  return nil, nil, #loc == 1 and string.byte(loc) % 2 == 1, false
end

-- Removes the index entry of the format 3 element at position pos of far
-- bucket b, of its UUID (key false) or its business key (key true): the
-- shard's, when its place is that one and of that kind (a collided holder
-- leaves a tombstone: a side table may hold others of its fingerprint),
-- else the side table's (full: the far field of the element's UUID, or
-- the key). (With the side table empty, an entry of the fingerprint can
-- only be the element's, as a collision would have put one there: the
-- callers then HDEL it unread.)
local function fi_remove(shard, side, fp, full, b, pos, key)
  local loc = redis.call('HGET', shard, fp)
  if not loc then
    return
  end
  local rb, rp, collided, isKey = fi_place(loc)
  if rb == b % 16777216 and rp == pos and isKey == key then
    if collided then
      redis.call('HSET', shard, fp, '\1')
    else
      redis.call('HDEL', shard, fp)
    end
  elseif collided then
    redis.call('HDEL', side, full)
  end
end

-- The place of position pos of far bucket b, as far3.go's fpLoc writes it:
-- 5 bytes; 6 for a business key's (key true); 7 when collided, or a
-- UUID's whose position needs 3 bytes.
local function fi_loc(b, pos, collided, key)
  local bm = b % 16777216
  local b1, b2, b3 = math.floor(bm / 65536), math.floor(bm / 256) % 256, bm % 256
  if not collided and not key and pos < 65536 then
    return string.char(b1, b2, b3, math.floor(pos / 256), pos % 256)
  end
  if not collided and key then
    return string.char(b1, b2, b3, math.floor(pos / 65536), math.floor(pos / 256) % 256, pos % 256)
  end
  local f = 0
  if collided then f = 1 end
  if key then f = f + 2 end
  return string.char(f, b1, b2, b3, math.floor(pos / 65536), math.floor(pos / 256) % 256, pos % 256)
end

-- Indexes the format 3 element at position pos of far bucket b by
-- fingerprint fp in shard, of its UUID (full its far field, side the
-- UUIDs' side table) or of its business key (key true: full the key, side
-- the keys' side table): the shard's entry when the fingerprint is free
-- there or a tombstone (taken over, flag kept); else the side table's,
-- the holder's entry flagged as collided (its kind kept).
local function fi_insert(shard, side, fp, full, b, pos, key)
  if redis.call('HSETNX', shard, fp, fi_loc(b, pos, false, key)) == 1 then
    return
  end
  local cur = redis.call('HGET', shard, fp)
  if #cur == 1 then
    redis.call('HSET', shard, fp, fi_loc(b, pos, true, key))
    return
  end
  local hb, hp, collided, hkey = fi_place(cur)
  if not collided then
    redis.call('HSET', shard, fp, fi_loc(hb, hp, true, hkey))
  end
  redis.call('HSET', side, full, fi_loc(b, pos, false, key))
end

-- Splits index shard src of an index whose L is l: moves the entries whose
-- hash has bit l set (bit l - 11 of the fingerprint, far3.go's fpField) to
-- dst, the shard numbered 2^l above it.
local function fi_split(src, dst, l)
  local all = redis.call('HGETALL', src)
  local div = 2 ^ (l - 11)
  local moved, gone = {}, {}
  for i = 1, #all, 2 do
    local b1, b2, b3, b4 = string.byte(all[i], 1, 4)
    if math.floor((((b1 * 256 + b2) * 256 + b3) * 256 + b4) / div) % 2 == 1 then
      moved[#moved + 1], moved[#moved + 2] = all[i], all[i + 1]
      gone[#gone + 1] = all[i]
    end
  end
  if #gone > 0 then
    redis.call('HSET', dst, unpack(moved))
    redis.call('HDEL', src, unpack(gone))
  end
end
