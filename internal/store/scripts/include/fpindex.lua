--[[
  fpindex: the far tier's format 3 index, fingerprints in linear-hashed
  shards with a side table (see far3.go). An include (see scriptSource in
  scripts.go): put in front of the scripts that need it, not a script of
  its own.
]]

-- The bucket residue, position and collided flag of index value loc (as
-- far3.go's fpLoc writes it); nil bucket and position for a tombstone.
local function fi_place(loc)
  if #loc == 5 then
    local b1, b2, b3, p1, p2 = string.byte(loc, 1, 5)
    return b1 * 65536 + b2 * 256 + b3, p1 * 256 + p2, false
  end
  if #loc == 7 then
    local f, b1, b2, b3, p1, p2, p3 = string.byte(loc, 1, 7)
    return b1 * 65536 + b2 * 256 + b3, p1 * 65536 + p2 * 256 + p3, f % 2 == 1
  end
  return nil, nil, #loc == 1 and string.byte(loc) % 2 == 1
end

-- Removes the index entry of the format 3 element at position pos of far
-- bucket b: the shard's, when its place is that one (a collided holder
-- leaves a tombstone: the side table may hold others of its fingerprint),
-- else the side table's (full: the far field of the element's UUID).
-- (With the side table empty, an entry of the fingerprint can only be the
-- element's, as a collision would have put one there: the callers then
-- HDEL it unread.)
local function fi_remove(shard, side, fp, full, b, pos)
  local loc = redis.call('HGET', shard, fp)
  if not loc then
    return
  end
  local rb, rp, collided = fi_place(loc)
  if rb == b % 16777216 and rp == pos then
    if collided then
      redis.call('HSET', shard, fp, '\1')
    else
      redis.call('HDEL', shard, fp)
    end
  elseif collided then
    redis.call('HDEL', side, full)
  end
end
