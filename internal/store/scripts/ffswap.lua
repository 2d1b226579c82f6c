#!lua flags=allow-oom
--[[
  ffswap: ends a rebuild of a partition's far filter: ffn, holding the far
  index's messages (ffmerge.lua) and those publish.lua added since
  ffbegin.lua, becomes the filter.

  KEYS[1] fmeta  hash   the filter's fb, fi, fs, fr, ft, fj, fq
  KEYS[2] ffn    string the filter rebuilt
  KEYS[3] ff     string the far filter
  ARGV[1] token  the caller's rebuild
  ARGV[2] its size in blocks
  ARGV[3] the messages of the far index it holds

  Returns 1 when swapped, 0 when another rebuild took over (or the filter
  was dropped meanwhile: the far tier emptied).
]]
local fmeta, ffn, ff = KEYS[1], KEYS[2], KEYS[3]
local token, blocks, scanned = ARGV[1], ARGV[2], tonumber(ARGV[3])
local st = redis.call('HMGET', fmeta, 'ft', 'fr', 'fj', 'fq')
if not st[1] or string.sub(st[1], 1, #token + 1) ~= token .. ' ' or st[2] ~= blocks then
  return 0
end
if redis.call('EXISTS', ffn) == 1 then
  redis.call('RENAME', ffn, ff)
else
  redis.call('DEL', ff) -- nothing set: an empty filter
end
redis.call('HSET', fmeta, 'fb', blocks, 'fi', scanned + tonumber(st[3] or '0'))
-- its selectors' mode (ffbegin.lua's fq) is the filter's now
if st[4] then
  redis.call('HSET', fmeta, 'fs', st[4])
  redis.call('HDEL', fmeta, 'fr', 'ft', 'fj', 'fq')
else
  redis.call('HDEL', fmeta, 'fr', 'ft', 'fj', 'fs')
end
return 1
