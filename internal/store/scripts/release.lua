#!lua flags=allow-oom
-- include: clock, lib
--[[
  release: hands the messages pending for one consumer back to its group
  (into the group's redelivery stream, attempt count unchanged), then
  removes the consumer. Used when a subscription closes, so unacknowledged
  and prefetched messages reach the group's other consumers at once.
  One entry may be kept (the message a handler is still finishing); the
  consumer is then not removed.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] bell     string the partition's bell (see read.lua)
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] most entries handed back per stream per call
  ARGV[4] stream of the entry to keep: "1" ready, "2" redelivery, "" none
  ARGV[5] id of the entry to keep

  Returns {released, missing, done}: missing counts pending entries whose
  body was already gone; done is 1 when nothing is left to hand back (and,
  unless an entry was kept, the consumer was removed); call again otherwise.
]]
local stream, rstream, bell = KEYS[1], KEYS[2], KEYS[3]
local group, consumer, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local keepStream, keepId = ARGV[4], ARGV[5]
local released, missing = 0, 0

for s, key in ipairs({stream, rstream}) do
  local pending = redis.call('XPENDING', key, group, '-', '+', limit, consumer)
  local kept = 0
  for _, p in ipairs(pending) do
    local id = p[1]
    if keepStream == tostring(s) and keepId == id then
      kept = 1
    else
      local body, attempt = entry_of(key, id)
      if body then
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
  if #pending == limit and #pending > kept then
    if released > 0 then ring(bell) end
    return {released, missing, 0}
  end
end
if released > 0 then ring(bell) end

if keepStream == '' then
  redis.call('XGROUP', 'DELCONSUMER', stream, group, consumer)
  redis.call('XGROUP', 'DELCONSUMER', rstream, group, consumer)
end
return {released, missing, 1}
