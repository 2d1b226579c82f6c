#!lua flags=allow-oom
--[[
  trim: removes from the ready stream the entries that every consumer group
  has read and acknowledged, and nothing else: an entry stays while any group
  has not read it yet or has it pending. A stream with no group keeps its
  entries for the first group, unless a retention is given: then entries
  older than it are removed. Trimming is approximate (whole stream nodes),
  so a few removable entries may stay until a later call.

  KEYS[1] stream  stream the topic's ready stream
  ARGV[1] retention in ms for a stream without consumer groups (0: keep all)

  Returns {removed, by_retention}: the number of entries removed, and 1 when
  they were removed by the retention (no group), 0 otherwise.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, 0}
end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  local retention = tonumber(ARGV[1])
  if retention <= 0 then
    return {0, 0}
  end
  local t = redis.call('TIME')
  local cutoff = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - retention
  return {redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%d-0', cutoff)), 1}
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

local minMs, minSeq = nil, nil
for _, g in ipairs(groups) do
  local name, last, pending
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1]
    elseif g[i] == 'last-delivered-id' then last = g[i + 1]
    elseif g[i] == 'pending' then pending = g[i + 1] end
  end
  local ms, seq
  if pending > 0 then
    ms, seq = parse(redis.call('XPENDING', KEYS[1], name)[2])
  else
    ms, seq = parse(last)
    seq = seq + 1
  end
  if minMs == nil or ms < minMs or (ms == minMs and seq < minSeq) then
    minMs, minSeq = ms, seq
  end
end
return {redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%d-%d', minMs, minSeq)), 0}
