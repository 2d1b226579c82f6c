#!lua flags=no-writes
-- include: stream
--[[
  peek: what an idle subscription of a consumer group should do, changing
  nothing. Idle subscriptions wait for their bell (see store.ReadNew); once
  per BlockTime the Subscriber peeks for each, many per pipeline, and rings
  those that have something to do: entries a writer added without ringing
  (an older version of this library), groups of grouped messages to serve,
  or entries pending for the consumer although it holds none (a read whose
  reply was lost, then retried by the client: nothing else would make it
  read them before the visibility timeout).

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] fring    list   the group's ring of groups to serve (fair.lua)
  KEYS[4] fprio    list   the group's groups with high-priority messages
  KEYS[5] fwait    zset   the group's groups asleep under their rate limit
  ARGV[1] consumer group
  ARGV[2] consumer name

  Returns the sum of: 1 when the group has entries to read in one of the
  streams, or a stream or the group is gone (the reader's next read finds
  out which); 2 when a group of grouped messages may be served; 4 when
  entries are pending for the consumer. 0: nothing to do.
]]
local stream, rstream, fring, fprio, fwait = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group, consumer = ARGV[1], ARGV[2]

-- Whether stream id a is after b.
local function after(a, b)
  local am, as = parse_id(a)
  local bm, bs = parse_id(b)
  return am > bm or (am == bm and as > bs)
end

local found = 0
if redis.call('LLEN', fring) > 0 or redis.call('LLEN', fprio) > 0 then
  found = 2
else
  local sleeper = redis.call('ZRANGE', fwait, '0', '0', 'WITHSCORES')[2]
  if sleeper then
    local t = redis.call('TIME')
    if tonumber(sleeper) <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
      found = 2
    end
  end
end

-- Whether the group has entries to read in a stream (or the stream or
-- the group is gone).
local function unread(key)
  local groups = redis.pcall('XINFO', 'GROUPS', key)
  if groups.err then
    return true
  end
  for _, g in ipairs(groups) do
    local f = fields(g)
    if f['name'] == group then
      -- lag counts the entries the group has not read; Redis cannot tell
      -- it (false) once entries were deleted (the redelivery stream's are,
      -- when settled): then the newest entry tells.
      local lag = f['lag']
      if lag then
        return lag > 0
      end
      local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', '1')[1]
      return last ~= nil and after(last[1], f['last-delivered-id'])
    end
  end
  return true
end

local read, pending = false, false
for _, key in ipairs({stream, rstream}) do
  read = read or unread(key)
  if not pending then
    local ok, p = pcall(redis.call, 'XPENDING', key, group, '-', '+', 1, consumer)
    pending = ok and #p > 0
  end
end
if read then found = found + 1 end
if pending then found = found + 4 end
return found
