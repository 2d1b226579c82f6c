#!lua flags=no-writes
-- include: stream
--[[
  peek: whether a consumer group has entries it has not read yet in the
  given streams, changing nothing. Idle subscriptions wait for their bell
  (see read.lua); once per BlockTime the Subscriber peeks for each, many
  per pipeline, and rings those that have something to read, for entries a
  writer added without ringing (an older version of this library).

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] fring    list   the group's ring of groups to serve (fair.lua)
  KEYS[4] fprio    list   the group's groups with high-priority messages
  KEYS[5] fwait    zset   the group's groups asleep under their rate limit
  ARGV[1] consumer group

  Returns 1 when the group has entries to read in one of the streams, a
  group of grouped messages to serve, or a stream or the group is gone (the
  reader's next read finds out which); 0 otherwise.
]]
local stream, rstream, fring, fprio, fwait = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group = ARGV[1]

-- Whether stream id a is after b.
local function after(a, b)
  local am, as = parse_id(a)
  local bm, bs = parse_id(b)
  return am > bm or (am == bm and as > bs)
end

if redis.call('LLEN', fring) > 0 or redis.call('LLEN', fprio) > 0 then
  return 1
end
local sleeper = redis.call('ZRANGE', fwait, 0, 0, 'WITHSCORES')[2]
if sleeper then
  local t = redis.call('TIME')
  if tonumber(sleeper) <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
    return 1
  end
end
for _, key in ipairs({stream, rstream}) do
  local groups = redis.pcall('XINFO', 'GROUPS', key)
  if groups.err then
    return 1
  end
  local found = false
  for _, g in ipairs(groups) do
    local f = fields(g)
    if f['name'] == group then
      found = true
      -- lag counts the entries the group has not read; Redis cannot tell
      -- it (false) once entries were deleted (the redelivery stream's are,
      -- when settled): then the newest entry tells.
      local lag = f['lag']
      if lag then
        if lag > 0 then
          return 1
        end
      else
        local last = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
        if last and after(last[1], f['last-delivered-id']) then
          return 1
        end
      end
    end
  end
  if not found then
    return 1
  end
end
return 0
