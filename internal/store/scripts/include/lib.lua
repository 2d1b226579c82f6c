-- include: clock
--[[
  lib: helpers of the scripts that deliver, redeliver and bury messages.
  An include: put in front of the scripts that need it (see scriptSource
  in scripts.go, and TestScriptIncludes, which checks the include lines);
  it defines local functions only. lib calls clock's now_ceil_ms, so it
  names clock, which comes with it.
]]

-- The values of fields ids of hash h, as HMGET gives them (false for
-- none), and how many of them it holds. HMGET scans a listpack-encoded
-- hash once per field: a hash holding a few hundred entries (listpacks go
-- up to hash-max-listpack-entries, 512 unless configured) asked for 256
-- fields cost a script over a millisecond. From 32 fields on, a listpack
-- is read whole instead, once.
local function hash_fields(h, ids)
  if #ids >= 32 and redis.call('OBJECT', 'ENCODING', h) == 'listpack' then
    local all, of = redis.call('HGETALL', h), {}
    for i = 1, #all, 2 do
      of[all[i]] = all[i + 1]
    end
    local vals, n = {}, 0
    for k, id in ipairs(ids) do
      local v = of[id]
      vals[k] = v or false
      if v then n = n + 1 end
    end
    return vals, n
  end
  local vals, n = redis.call('HMGET', h, unpack(ids)), 0
  for _, v in ipairs(vals) do
    if v then n = n + 1 end
  end
  return vals, n
end

-- The ids (a list) whose value in vals (hash_fields') is set.
local function fields_set(ids, vals)
  local out = {}
  for k, id in ipairs(ids) do
    if vals[k] then out[#out + 1] = id end
  end
  return out
end

-- Tells the consumers of a partition waiting for new entries (a read armed
-- the bell: store.ReadNew) that entries were added: once per arming, so a script
-- adding many rings once and a busy partition not at all. The bell's key
-- and channel share a name. A user without the channel (ACL) stores all
-- the same: its consumers then find the entries at their next poll. The
-- note (default empty) is the message published: a subscription whose own
-- read ran the script (promote.lua's ARGV[6]) knows itself by it and is
-- not woken; every other listener, of any release, takes any note as a
-- ring.
local function ring(bell, note)
  if redis.call('DEL', bell) == 1 then
    redis.pcall('PUBLISH', bell, note or '')
  end
end

-- Tells the consumers of a partition that a group of grouped messages may
-- now be served (fair.lua): all of them, waiting for the bell or not,
-- since only a pick (pick.lua) serves it and a busy consumer's plain reads
-- do not pick. The payload "g" says so.
local function ring_groups(bell)
  redis.call('DEL', bell)
  redis.pcall('PUBLISH', bell, 'g')
end

-- Puts a message in a consumer group's retry set until delay (ms) has
-- passed, waking schedulers when it becomes the earliest retry. member
-- ("<attempt>:" and a unique suffix) names it there.
local function retry_later(retry, rbodies, wake, member, delay, body)
  local score = (now_ceil_ms() + delay) * 1024
  local head = redis.call('ZRANGE', retry, '0', '0', 'WITHSCORES')[2]
  redis.call('HSET', rbodies, member, body)
  redis.call('ZADD', retry, string.format('%d', score), member)
  if head == nil or score < tonumber(head) then
    redis.call('PUBLISH', wake, 'r')
  end
end

-- Queues a message for redelivery to one consumer group: straight into the
-- group's redelivery stream when delay <= 0 (ringing the partition's
-- bell), else into its retry set. member_suffix ("m" or "r" + entry id)
-- makes the retry member unique.
local function requeue(retry, rbodies, rstream, bell, wake, member_suffix, attempt, delay, body)
  if delay <= 0 then
    redis.call('XADD', rstream, '*', 'm', body, 'a', string.format('%d', attempt))
    ring(bell)
    return
  end
  retry_later(retry, rbodies, wake, attempt .. ':' .. member_suffix, delay, body)
end

-- Adds a dead letter (fields m = message, a = attempts, r = reason, k =
-- the message's group when it has one; the entry id is the time it died)
-- and evicts the oldest beyond limit (<= 0: no limit). Evictions are
-- counted in the group's meta hash and returned, so callers can log them.
local function bury(dead, meta, limit, body, attempts, reason, group)
  if group then
    redis.call('XADD', dead, '*', 'm', body, 'a', string.format('%d', attempts), 'r', reason, 'k', group)
  else
    redis.call('XADD', dead, '*', 'm', body, 'a', string.format('%d', attempts), 'r', reason)
  end
  redis.call('HINCRBY', meta, 'dead_total', '1')
  if limit > 0 then
    local n = redis.call('XTRIM', dead, 'MAXLEN', limit)
    if n > 0 then
      redis.call('HINCRBY', meta, 'dead_evicted', n)
    end
    return n
  end
  return 0
end

-- The body, attempt number and group (field k, nil for none) of a stream
-- entry (nil body when the entry is gone or has no field m).
local function entry_of(stream, id)
  local e = redis.call('XRANGE', stream, id, id)[1]
  local body, attempt, group = nil, 1, nil
  if e then
    local f = e[2]
    for i = 1, #f, 2 do
      if f[i] == 'm' then
        body = f[i + 1]
      elseif f[i] == 'a' then
        attempt = tonumber(f[i + 1]) or 1
      elseif f[i] == 'k' then
        group = f[i + 1]
      end
    end
  end
  return body, attempt, group
end

