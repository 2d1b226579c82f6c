#!lua flags=allow-oom
-- include: clock, stream, lib, lazy fair
--[[
  reclaim: takes from a consumer group the messages its consumers have held
  longer than the group's visibility timeout without extending the lease
  (the consumer died or lost Redis), and requeues each as a new attempt
  after the group's retry delay, or buries it in the dead letters when it
  is out of attempts. With cleanup set it also removes consumers that hold
  nothing and have been idle longer than the group's consumer idle timeout.
  The policy comes from the group's meta hash, written by its subscribers.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] retry    zset   the group's retry set
  KEYS[4] rbodies  hash   the group's retry bodies
  KEYS[5] dead     stream the group's dead letters
  KEYS[6] meta     hash   policy: max (attempts, 0 = no limit), vis (ms),
                          deadmax (0 = no limit), idle (ms), backoff
                          (comma-separated ms per attempt, last repeats)
  KEYS[7] bell     string the partition's bell (see lib.lua's ring)
  KEYS[8] fq       hash   the group's fair queues (see fair.lua)
  KEYS[9] fring    list   the group's ring of groups to serve
  KEYS[10] fprio   list   the group's groups with high-priority messages
  KEYS[11] fwait   zset   the group's groups asleep under their rate limit
  ARGV[1] consumer group
  ARGV[2] most pending entries looked at per call
  ARGV[3] wake channel
  ARGV[4] "1" to clean up idle consumers
  ARGV[5] the stream to go on with: 1 or 2, as in KEYS (1: a new sweep)
  ARGV[6] the last entry looked at in it: "-" for none

  A call looks at ARGV[2] pending entries at most (XPENDING IDLE would scan
  every entry of a long pending list that is not idle), so a sweep of a
  long list takes several calls: the caller calls again with the returned
  position until it is done.

  Returns {requeued, buried, evicted, missing, removed, vis, stream, last,
  oldest}: missing counts pending entries whose content was gone
  (acknowledged away), removed the consumers deleted, vis is the group's
  visibility timeout in ms; stream and last tell where to go on (ARGV[5],
  ARGV[6]), stream 0 when the sweep is done; oldest is the longest idle
  time (ms) of the entries looked at and left pending, 0 for none.
  Schedulers pace their reclaims by vis and oldest: nothing left pending
  runs out before vis - oldest.

  A grouped message (a redelivery entry with field k) is queued again in
  its group, or buried giving its group's slot back, as nack.lua does.
]]
local stream, rstream, retry, rbodies, dead, meta, bell = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local fq, fring, fprio, fwait = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local group, limit, wake, cleanup = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local s, last = tonumber(ARGV[5]), ARGV[6]
local p = redis.call('HMGET', meta, 'max', 'vis', 'deadmax', 'idle', 'backoff')
local maxAttempts = tonumber(p[1]) or 16
local vis = tonumber(p[2]) or 30000
local deadMax = tonumber(p[3]) or 100000
local idleMax = tonumber(p[4]) or 3600000
local backoff = {}
for d in string.gmatch(p[5] or '', '%d+') do
  backoff[#backoff + 1] = tonumber(d)
end

local requeued, buried, evicted, missing, removed, oldest = 0, 0, 0, 0, 0, 0
local c = nil -- the fair queues, opened at the first grouped message
-- the streams by their place in KEYS, as ARGV[5] and the reply number them
local streams = {stream, rstream}
while s <= 2 do
  local key, tag = streams[s], (s == 1) and 'm' or 'r'
  local start = '-'
  if last ~= '-' then start = '(' .. last end
  -- a stream without the group (not created yet) has nothing to reclaim
  local ok, pending = pcall(redis.call, 'XPENDING', key, group, start, '+', limit)
  if not ok then pending = {} end
  for _, e in ipairs(pending) do
    local id, consumer, idle = e[1], e[2], e[3]
    last = id
    if idle >= vis then
      local body, attempt, g = entry_of(key, id)
      if g and not c then
        use_fair() -- (fair.lua's helpers: made for grouped messages only)
        c = fair_open(fq, fring, fprio, fwait, meta)
      end
      redis.call('XACK', key, group, id)
      if s == 2 then
        redis.call('XDEL', key, id)
      end
      if not body then
        missing = missing + 1
      elseif maxAttempts > 0 and attempt >= maxAttempts then
        evicted = evicted + bury(dead, meta, deadMax, body, attempt,
          string.format('not acknowledged within %d ms by consumer %s on attempt %d of %d', vis, consumer, attempt, maxAttempts), g)
        buried = buried + 1
        if g then fair_release(c, g) end
      else
        local delay = backoff[math.min(attempt, #backoff)] or 0
        if g then
          fair_retry(c, retry, rbodies, wake, g, id, attempt + 1, delay, body)
        else
          requeue(retry, rbodies, rstream, bell, wake, tag .. id, attempt + 1, delay, body)
        end
        requeued = requeued + 1
      end
    elseif idle > oldest then
      oldest = idle
    end
  end
  if #pending == limit then
    break
  end
  s, last = s + 1, '-'
  limit = limit - #pending
  if limit <= 0 then
    break
  end
end
if s > 2 then
  s = 0
end
if c then fair_close(c, bell, now_ceil_ms()) end

if cleanup == '1' and s == 0 then
  for _, key in ipairs(streams) do
    local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', key, group)
    if not ok then consumers = {} end
    for _, c in ipairs(consumers) do
      c = fields(c)
      if c.pending == 0 and c.idle > idleMax then
        redis.call('XGROUP', 'DELCONSUMER', key, group, c.name)
        removed = removed + 1
      end
    end
  end
end
return {requeued, buried, evicted, missing, removed, vis, s, last, oldest}
