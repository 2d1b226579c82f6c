--[[
  ffilter: the far filter's size (see farfilter.go). An include (see
  scriptSource in scripts.go): put in front of the scripts that need it,
  not a script of its own.
]]

-- The size in blocks of a far filter for n messages:
-- room for half as many again at per a block, in whole multiples of least,
-- at most most.
local function ff_blocks(n, per, least, most)
  local b = math.ceil(math.floor(n * 3 / 2) / per)
  return math.min(math.max(math.ceil(b / least) * least, least), most)
end

-- Takes d far messages off fmeta's count n, and off fm, which counts as n
-- does (see farfilter.go), and dk business key entries of format 3's
-- index off nk; with none left, the far filter goes too, and
-- the format 3 index's shape (far3.go: its shards are empty, but for a
-- tombstone a collision may have left, which a writer takes over and a
-- lookup reads as a maybe; the next writer starts from the fewest
-- shards). (A rebuild under way ends with a filter of its own, which the
-- next trim drops if the far tier is still empty.) Written as values, not
-- HINCRBY by -d: Lua's -0 reaches Redis as "-0", which HINCRBY refuses.
local function ff_remove(fmeta, ff, d, dk)
  local nm = redis.call('HMGET', fmeta, 'n', 'fm', 'nk')
  local n, fm = tonumber(nm[1] or '0') - d, tonumber(nm[2] or '0') - d
  if n <= 0 then
    redis.call('HDEL', fmeta, 'n', 'fm', 'fb', 'fi', 'fs', 'iL', 'iS', 'nk')
    redis.call('DEL', ff)
    return
  end
  -- the counts left, written in one HSET; one at 0 goes
  local set, del = {'n', n}, {}
  if fm > 0 then
    set[3], set[4] = 'fm', fm
  else
    del[1] = 'fm'
  end
  if dk > 0 then
    local nk = tonumber(nm[3] or '0') - dk
    if nk > 0 then
      set[#set + 1], set[#set + 2] = 'nk', nk
    else
      del[#del + 1] = 'nk'
    end
  end
  redis.call('HSET', fmeta, unpack(set))
  if #del > 0 then
    redis.call('HDEL', fmeta, unpack(del))
  end
end
