--[[
  trim: removes from the ready stream the entries that every consumer group
  has read and acknowledged, and nothing else: an entry stays while any group
  has not read it yet or has it pending. With no group, nothing is removed.
  Trimming is approximate (whole stream nodes), so a few acknowledged entries
  may stay until a later call.

  KEYS[1] stream  stream the topic's ready stream

  Returns the number of entries removed.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  return 0
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
return redis.call('XTRIM', KEYS[1], 'MINID', '~', string.format('%d-%d', minMs, minSeq))
