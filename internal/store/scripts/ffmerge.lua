#!lua flags=allow-oom
--[[
  ffmerge: writes a chunk of a far filter being rebuilt (ffbegin.lua) into
  ffn, if the chunk is still as the caller read it: the caller ORed its bits
  into what it read, and a publish that set bits of the chunk since then
  makes it read again.

  KEYS[1] fmeta  hash   the filter's ft: the rebuild under way
  KEYS[2] ffn    string the filter being rebuilt
  ARGV[1] token  the caller's rebuild
  ARGV[2] offset of the chunk, bytes
  ARGV[3] the chunk as the caller read it (GETRANGE: shorter at the end)
  ARGV[4] the chunk to write

  Returns 1 when written, 0 when the chunk changed (read it again), -1 when
  another rebuild took over (stop).
]]
local fmeta, ffn = KEYS[1], KEYS[2]
local token, off, was, new = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local ft = redis.call('HGET', fmeta, 'ft')
if not ft or string.sub(ft, 1, #token + 1) ~= token .. ' ' then
  return -1
end
if redis.call('GETRANGE', ffn, off, off + #new - 1) ~= was then
  return 0
end
redis.call('SETRANGE', ffn, off, new)
return 1
