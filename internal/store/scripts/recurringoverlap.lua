-- include: clock, stream
--[[
  recurringoverlap: whether a tick of a schedule with the overlap policy "skip"
  may be published. The partition records, per schedule, the last tick it
  let through; the new tick may go once that tick's message is finished:
  no longer waiting (nor being handed to the groups as a high-priority
  message), and no consumer group registered for the topic now still has
  it to read in the ready stream, holds it unacknowledged (ready or
  redelivery stream), or has it in its retry set or redelivery stream. A
  group created after the tick counts too: it reads the ready stream from
  its start. The check reads what is stored, not what was recorded along
  the way, so nothing can leave a stale mark: a message cancelled,
  acknowledged, dead-lettered, trimmed, or lost with its keys, is finished.
  When finished (or nothing is recorded), the new tick is recorded as let
  through and the caller publishes it; otherwise the caller skips it.

  Every place the message can be in is found from the time it falls due
  (when the tick was let through, plus its delay, less a second for a clock
  stepping back): no stream entry of it is older. Its ready-stream entry is
  looked for from then on, a bounded number of entries a call, where the
  last call stopped, up to the stream's last entry when the search began
  (the message had left the waiting set, so its entry, if any, was there
  already): however fast the stream grows, the search ends after a bounded
  number of calls; redelivery entries and retry members (named
  after the entry they came from) are looked at from then on. A body is
  recognised by how it begins (ARGV[3]), not decoded.

  KEYS[1] overlap  hash   schedule ID -> "<UUID> <tick ms> <from ms> <entry> <cursor> <flags> <upto>":
                          the tick let through last, its message's UUID, the ms from which its
                          stream entries are looked for, its ready-stream entry ("?" not found
                          yet, "-" none), the last entry looked at ("-" none), flags: "f" when it
                          may wait in the far tier, "p" when high-priority, "-" neither, and the
                          last entry of the ready stream when the search began ("-" not begun):
                          the message had left the waiting set then, so its entry is not later
  KEYS[2] bodies   hash   UUID of a waiting message -> encoded message
  KEYS[3] findex   hash   the far index shard of that tick's UUID (see far.go), if it may be there
  KEYS[4] fanout   hash   the high-priority message being handed to the groups (field id: its UUID)
  KEYS[5] stream   stream the topic's ready stream
  KEYS[6] groups   set    consumer groups of the topic
  then for each consumer group g = 1, 2, ..., as ARGV lists them, three keys:
  KEYS[3g+4]  retry    zset   "<attempt>:<m|r><entry id>" -> due score
  KEYS[3g+5]  rbodies  hash   same member -> encoded message
  KEYS[3g+6]  rstream  stream the group's redelivery stream
  ARGV[1] schedule ID
  ARGV[2] the UUID of the tick let through last, as the caller believes ("" none)
  ARGV[3] how every encoding of a message with that UUID begins (version byte and UUID)
  ARGV[4] its field in the far index
  ARGV[5] the new tick's message UUID
  ARGV[6] the new tick (Unix ms)
  ARGV[7] the new tick's message's delay (ms, from now)
  ARGV[8] the new tick's message's flags (as in KEYS[1])
  ARGV[9] most stream entries (or retry bodies) read per stream (or group) per call
  ARGV[10] most retry members named per group per call
  ARGV[11] "1" when the caller found the message of the tick let through last
          (ARGV[2]) in the far tier just before (FarPull: format 3's index
          holds fingerprints, which only the element confirms), else "0"
  ARGV[12...] the consumer groups of the topic, as the caller believes

  Returns {status, reason}: status "go" when the new tick is recorded as let
  through (or is the one recorded: a publish tried again), "skip" when the
  previous tick's message is not finished. A skip's reason: "waiting",
  "ready" (not yet read by a group), "pending" (read, not acknowledged),
  "retry" (in a group's retry set or redelivery stream), or "unknown" (more
  to look at than a call may: looked at on at the next tick). When the
  record or the groups are not what the caller believes (another process
  let a tick through, a group was created or deleted), it changes nothing
  and returns {"again", record, group, ...}: the record ("" none) and the
  groups, to call again with.
]]
local overlap, bodies, findex, fanout, stream, groups = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local id, prev, prefix, field, uuid, tick = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local delay, flags, budget, maxMembers = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
local SLACK = 1000 -- ms: a stream entry id is Redis's clock, which may step back a little
local farFound = ARGV[11] == '1'
local names = {unpack(ARGV, 12)}

local rec = {}
local stored = redis.call('HGET', overlap, id)
if stored then
  for w in string.gmatch(stored, '%S+') do
    rec[#rec + 1] = w
  end
end
local members = redis.call('SMEMBERS', groups)
local same = (rec[1] or '') == prev and #members == #names
if same then
  local listed = {}
  for _, g in ipairs(names) do
    listed[g] = true
  end
  for _, g in ipairs(members) do
    same = same and listed[g]
  end
end
if not same then
  return {'again', stored or '', unpack(members)}
end

local function let_through()
  redis.call('HSET', overlap, id, table.concat({uuid, tick, now_ms() + delay - SLACK, '?', '-', flags, '-'}, ' '))
  return {'go', ''}
end
if not stored then
  return let_through()
end
if prev == uuid then
  return {'go', ''}
end

local from, entry, cursor, was, upto = rec[3], rec[4], rec[5], rec[6] or 'fp', rec[7] or '-'
-- skips the tick, keeping where the search for the entry got to
local function hold(reason)
  local state = table.concat({rec[1], rec[2], from, entry, cursor, was, upto}, ' ')
  if state ~= stored then
    redis.call('HSET', overlap, id, state)
  end
  return {'skip', reason}
end
local function body_of(e)
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'm' then
      return f[i + 1]
    end
  end
  return nil
end
local function is_it(body)
  return body ~= nil and body ~= false and string.sub(body, 1, #prefix) == prefix
end
-- a > b for stream entry ids
local function after(a, b)
  local ams, aseq = parse_id(a)
  local bms, bseq = parse_id(b)
  if not bms then
    return true
  end
  return ams > bms or (ams == bms and aseq > bseq)
end

if redis.call('HEXISTS', bodies, prev) == 1
  or (string.find(was, 'f', 1, true) and (farFound or redis.call('HEXISTS', findex, field) == 1))
  or (string.find(was, 'p', 1, true) and redis.call('HGET', fanout, 'id') == prev) then
  return hold('waiting')
end
if #names == 0 then
  return let_through() -- no group to wait for: finished once it left the waiting set
end

-- its ready-stream entry, looked for where the last call stopped
if entry == '?' then
  if upto == '-' then
    local newest = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', '1')[1]
    upto = newest and newest[1] or '0-0'
  end
  local start = from
  if cursor ~= '-' then
    start = '(' .. cursor
  end
  local es = {}
  if cursor == '-' or after(upto, cursor) then
    es = redis.call('XRANGE', stream, start, upto, 'COUNT', budget)
  end
  for _, e in ipairs(es) do
    cursor = e[1]
    if is_it(body_of(e)) then
      entry = e[1]
      break
    end
  end
  if entry == '?' then
    if #es == budget and cursor ~= upto then
      return hold('unknown')
    end
    entry = '-' -- never entered it (cancelled, or handed to the groups' redelivery streams), or trimmed
  end
end
if entry ~= '-' then
  local present = nil -- whether the entry is still there: read when it matters
  local last = {}
  local ok, info = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if ok then
    for _, g in ipairs(info) do
      g = fields(g)
      last[g.name] = g['last-delivered-id']
    end
  end
  for _, g in ipairs(names) do
    if last[g] and after(entry, last[g]) then
      if present == nil then
        present = #redis.call('XRANGE', stream, entry, entry) > 0
      end
      if present then
        return hold('ready')
      end
    end
    local okp, p = pcall(redis.call, 'XPENDING', stream, g, entry, entry, 1)
    if okp and #p > 0 then
      return hold('pending')
    end
  end
end

-- each group's redelivery stream (its entries are deleted once settled, so
-- any there is live) and retry set
for i = 1, #names do
  local retry, rbodies, rstream = KEYS[3 * i + 4], KEYS[3 * i + 5], KEYS[3 * i + 6]
  local es = redis.call('XRANGE', rstream, from, '+', 'COUNT', budget)
  for _, e in ipairs(es) do
    if is_it(body_of(e)) then
      return hold('retry')
    end
  end
  if #es == budget then
    return hold('unknown')
  end
  local n = redis.call('ZCARD', retry)
  if n > maxMembers then
    return hold('unknown')
  end
  if n > 0 then
    local oldest = tonumber(from)
    local candidates = {}
    for _, m in ipairs(redis.call('ZRANGE', retry, '0', '-1')) do
      local ms = tonumber(string.match(m, '^%d+:[mr](%d+)%-'))
      if ms == nil or ms >= oldest then
        candidates[#candidates + 1] = m
      end
    end
    if #candidates > budget then
      return hold('unknown')
    end
    if #candidates > 0 then
      for _, body in ipairs(redis.call('HMGET', rbodies, unpack(candidates))) do
        if is_it(body) then
          return hold('retry')
        end
      end
    end
  end
end
return let_through()
