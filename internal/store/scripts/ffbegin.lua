#!lua flags=allow-oom
-- include: clock, ffilter
--[[
  ffbegin: starts a rebuild of a partition's far filter (see farfilter.go).
  From this call on, publish.lua sets the bits of every far message it adds
  in ffn too, sized as returned; the caller fills ffn with the messages of
  the far index (ffmerge.lua) and makes it the filter (ffswap.lua). A
  rebuild started later takes over: the token tells them apart. With the
  far tier empty, the filter is dropped instead (publish.lua makes a new
  one with the next far message).

  KEYS[1] fmeta  hash   far counters: n; the filter's fm, fb, fi, fs, fr, ft,
                        fj, fq
  KEYS[2] ffn    string the filter being rebuilt
  KEYS[3] ff     string the far filter
  ARGV[1] token  the rebuild's id
  ARGV[2] messages a block takes (farFilterPerBlock)
  ARGV[3] fewest blocks (a multiple of which the size is)
  ARGV[4] most blocks
  ARGV[5] the selectors' mode of the rebuild (farfilter.go): 3 (fpSel's)
          or 2 (farSel's), kept in fq until ffswap.lua makes it fs

  Returns the size of ffn in 512-bit blocks; 0 when the far tier is empty.
]]
local fmeta, ffn, ff = KEYS[1], KEYS[2], KEYS[3]
local token, per, least, most, mode = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local nm = redis.call('HMGET', fmeta, 'n', 'fm')
local n = tonumber(nm[1] or '0')
redis.call('DEL', ffn)
if n <= 0 then
  redis.call('DEL', ff)
  redis.call('HDEL', fmeta, 'fb', 'fi', 'fr', 'ft', 'fj', 'fm', 'fs', 'fq')
  return 0
end
-- fm from now on counts as n does (below), which would make the filter
-- in use trusted again: one that is not (a far message added or removed
-- by a process that sets no bits, or other bits) goes, and publishes
-- read the index until the rebuild ends.
if nm[2] ~= nm[1] then
  redis.call('DEL', ff)
  redis.call('HDEL', fmeta, 'fb', 'fi', 'fs')
end
local blocks = ff_blocks(n, per, least, most)
-- the token, and when the rebuild started (trim.lua's FarFilterStale)
-- and fm from now on counts as n does: a far message added or removed
-- by a process of the previous version (which sets no bits) makes them
-- differ again, and the filter untrusted
redis.call('HSET', fmeta, 'fr', blocks, 'ft', token .. ' ' .. now_ms(), 'fj', '0', 'fm', n)
if mode == '3' then
  redis.call('HSET', fmeta, 'fq', '3')
else
  redis.call('HDEL', fmeta, 'fq')
end
return blocks
