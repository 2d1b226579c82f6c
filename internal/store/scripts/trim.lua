#!lua flags=allow-oom
-- include: clock, stream, ffilter
--[[
  trim: removes from the ready stream the entries that every consumer group
  has read and acknowledged, and nothing else: an entry stays while any group
  has not read it yet or has it pending. A stream with no group keeps its
  entries for the first group, unless a retention is given: then entries
  older than it are removed. Trimming is approximate (whole stream nodes),
  so a few removable entries may stay until a later call.

  Its caller being the partition's scheduler, at its pace, it also tells
  whether the far filter (farfilter.go) needs a rebuild: the far tier holds
  messages, and the filter is missing (a previous version's far tier), past
  its capacity, counts far messages otherwise than n does (fm: a previous
  version's process added or removed some), of selectors other than the
  scheduler's (fs: after the storage level changed, publishers of the
  new level do not trust it), or four times the size the far tier needs;
  or the far tier
  is empty and a filter is left (dropped then); and no rebuild runs but one
  started ARGV[3] ago or longer (taken for abandoned).

  KEYS[1] stream  stream the topic's ready stream
  KEYS[2] fmeta   hash   far counters: n; the filter's fm, fb, fi, ft, fs
  KEYS[3] fpark   list   far elements an older release parked (unpark.lua)
  ARGV[1] retention in ms for a stream without consumer groups (0: keep all)
  ARGV[2] messages a far filter block takes
  ARGV[3] fewest blocks of a far filter
  ARGV[4] most blocks of a far filter
  ARGV[5] ms after which a rebuild not finished is taken for abandoned
  ARGV[6] the scheduler's far filter selectors (farfilter.go): 3 or 2

  Returns {removed, by_retention, far_filter, parked}: the number of
  entries removed, 1 when they were removed by the retention (no group)
  else 0, 1 when the far filter needs a rebuild, else 0, and the length of
  the park list.
]]
local stream, fmeta, fpark = KEYS[1], KEYS[2], KEYS[3]
local retention = tonumber(ARGV[1])
local per, least, most, stale = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local mode = ARGV[6]

local ff = 0
local st = redis.call('HMGET', fmeta, 'n', 'fb', 'fi', 'ft', 'fm', 'fs')
local n, fb, fi, fm = tonumber(st[1] or '0'), tonumber(st[2] or '0'), tonumber(st[3] or '0'), tonumber(st[5] or '0')
if st[4] then
  if now_ms() - tonumber(string.match(st[4], ' (%d+)$') or '0') >= stale then
    ff = 1
  end
elseif n <= 0 then
  if fb > 0 then ff = 1 end
else
  if fb == 0 or fi > fb * per or fm ~= n or (st[6] == '3') ~= (mode == '3')
    or fb > 4 * ff_blocks(n, per, least, most) then
    ff = 1
  end
end

local parked = redis.call('LLEN', fpark)
if redis.call('EXISTS', stream) == 0 then
  return {0, 0, ff, parked}
end
local groups = redis.call('XINFO', 'GROUPS', stream)
if #groups == 0 then
  if retention <= 0 then
    return {0, 0, ff, parked}
  end
  local cutoff = now_ms() - retention
  return {redis.call('XTRIM', stream, 'MINID', '~', string.format('%d-0', cutoff)), 1, ff, parked}
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
return {redis.call('XTRIM', stream, 'MINID', '~', string.format('%d-%d', minMs, minSeq)), 0, ff, parked}
