#!lua flags=allow-oom
-- include: clock, stream
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
local stream = KEYS[1]
local retention = tonumber(ARGV[1])
if redis.call('EXISTS', stream) == 0 then
  return {0, 0}
end
local groups = redis.call('XINFO', 'GROUPS', stream)
if #groups == 0 then
  if retention <= 0 then
    return {0, 0}
  end
  local cutoff = now_ms() - retention
  return {redis.call('XTRIM', stream, 'MINID', '~', string.format('%d-0', cutoff)), 1}
end

local minMs, minSeq = nil, nil
for _, g in ipairs(groups) do
  g = fields(g)
  local ms, seq
  if g.pending > 0 then
    ms, seq = parse_id(redis.call('XPENDING', stream, g.name)[2])
  else
    ms, seq = parse_id(g['last-delivered-id'])
    seq = seq + 1
  end
  if minMs == nil or ms < minMs or (ms == minMs and seq < minSeq) then
    minMs, minSeq = ms, seq
  end
end
return {redis.call('XTRIM', stream, 'MINID', '~', string.format('%d-%d', minMs, minSeq)), 0}
