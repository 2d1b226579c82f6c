--[[
  shift: moves the members of a due-time sorted set (a partition's waiting
  set, a group's retry set) earlier by a fixed amount, for tests that move
  a topic's clock forward (package redisdelaytest). Never run by the
  library itself. Members are taken in score order from the cursor up, a
  batch per call, with the members tied with the batch's last, so a call
  after it starts above every score it shifted: a shifted member lands
  below the cursor and is not met twice. A score that would fall below 0
  keeps its sequence part only (due at the epoch: overdue).

  KEYS[1] set      zset   member -> due score (due ms * 1024 + sequence)
  ARGV[1] the shift, in score units (ms * 1024)
  ARGV[2] the cursor: the last score shifted by the previous call, "" for
          the first call
  ARGV[3] batch size

  Returns {shifted, cursor}: the members shifted, and the cursor to pass
  to the next call, "" when no member was left above the cursor.
]]
local set = KEYS[1]
local shift, cursor, batch = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local min = '-inf'
if cursor ~= '' then
  min = '(' .. cursor
end
local zs = redis.call('ZRANGE', set, min, '+inf', 'BYSCORE', 'LIMIT', '0', batch, 'WITHSCORES')
if #zs == 0 then
  return {0, ''}
end
local last = zs[#zs]
local taken = {}
for i = 1, #zs, 2 do
  taken[zs[i]] = true
end
for _, m in ipairs(redis.call('ZRANGE', set, last, last, 'BYSCORE')) do
  if not taken[m] then
    zs[#zs + 1] = m
    zs[#zs + 1] = last
  end
end
local args, n = {}, 0
for i = 1, #zs, 2 do
  local score = tonumber(zs[i + 1]) - shift
  if score < 0 then
    score = tonumber(zs[i + 1]) % 1024
  end
  args[#args + 1] = score
  args[#args + 1] = zs[i]
  n = n + 1
end
for c = 1, #args, 1000 do
  redis.call('ZADD', set, unpack(args, c, math.min(c + 999, #args)))
end
return {n, last}
