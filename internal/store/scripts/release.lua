#!lua flags=allow-oom
-- include: clock, lib, fair
--[[
  release: hands the messages pending for one consumer back to its group
  (into the group's redelivery stream, attempt count unchanged), then
  removes the consumer. Used when a subscription closes, so unacknowledged
  and prefetched messages reach the group's other consumers at once.
  One entry may be kept (the message a handler is still finishing); the
  consumer is then not removed.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] bell     string the partition's bell (see lib.lua's ring)
  KEYS[4] meta     hash   the group's policy (per-group cap and rate)
  KEYS[5] fq       hash   the group's fair queues (see fair.lua)
  KEYS[6] fring    list   the group's ring of groups to serve
  KEYS[7] fprio    list   the group's groups with high-priority messages
  KEYS[8] fwait    zset   the group's groups asleep under their rate limit
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] most entries handed back per stream per call
  ARGV[4] stream of the entry to keep: "1" ready, "2" redelivery, "" none
  ARGV[5] id of the entry to keep

  Returns {released, missing, done}: missing counts pending entries whose
  body was already gone; done is 1 when nothing is left to hand back (and,
  unless an entry was kept, the consumer was removed); call again otherwise.
  A grouped message (field k) goes back to the front of its group, its
  slot given back (fair.lua).
]]
local stream, rstream, bell, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fq, fring, fprio, fwait = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local group, consumer, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keepStream, keepId = ARGV[4], ARGV[5]
local released, missing = 0, 0
local c = nil -- the fair queues, opened at the first grouped message

local function done(finished)
  if c then fair_close(c, bell, now_ceil_ms()) end
  if released > 0 then ring(bell) end
  return {released, missing, finished}
end

for s, key in ipairs({stream, rstream}) do
  local pending = redis.call('XPENDING', key, group, '-', '+', limit, consumer)
  local kept = 0
  local back = {} -- grouped messages, queued at the front of their groups last first
  for _, p in ipairs(pending) do
    local id = p[1]
    if keepStream == tostring(s) and keepId == id then
      kept = 1
    else
      local body, attempt, g = entry_of(key, id)
      if body and g then
        back[#back + 1] = {g, attempt, body}
        released = released + 1
      elseif body then
        redis.call('XADD', rstream, '*', 'm', body, 'a', attempt)
        released = released + 1
      else
        missing = missing + 1
      end
      redis.call('XACK', key, group, id)
      if s == 2 then
        redis.call('XDEL', key, id)
      end
    end
  end
  if #back > 0 then
    c = c or fair_open(fq, fring, fprio, fwait, meta)
    for i = #back, 1, -1 do
      fair_release(c, back[i][1])
      fair_push(c, back[i][1], back[i][2], back[i][3], 'front')
    end
  end
  if #pending == limit and #pending > kept then
    return done(0)
  end
end

if keepStream == '' then
  redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
  redis.call('XGROUP', 'DELCONSUMER', rstream, group, consumer)
end
return done(1)
