--[[
  publish: stores the messages of one or more Publish calls to a topic.
  Each call is atomic on its own: all of its messages are stored, or none.
  Due messages are appended to the ready stream; delayed ones go into the
  waiting set, their encoded bodies into the hash beside it.

  KEYS[1] waiting  zset   message UUID -> score (due ms * 1024 + sequence)
  KEYS[2] bodies   hash   message UUID -> encoded message
  KEYS[3] stream   stream ready messages, field m = encoded message
  KEYS[4] seq      string counter that keeps equal due times in publish order
  ARGV[1]          wake channel, published to when the earliest due time moves earlier
  ARGV[2]          number of calls, c
  ARGV[2+k]        number of messages of call k (k = 1..c)
  KEYS[5] prio     hash   message UUID -> 1, for waiting high-priority messages
  then four arguments per message, the calls' messages in call order:
  ARGV[j]          message UUID
  ARGV[j+1]        delay in ms from now (Redis server time); <= 0 means ready now
  ARGV[j+2]        encoded message
  ARGV[j+3]        "1" for a high-priority message, "0" otherwise. A high-priority
                   message always goes into the waiting set (due now when not
                   delayed), so the scheduler hands it to each consumer group's
                   redelivery stream, which subscribers read first.

  Returns one status per call, in call order: 0 when its messages are
  stored, or the UUID of one of its messages already waiting in the topic
  with a different body (then none of that call's messages is written).
  Calls are checked in order, each seeing the calls accepted before it, as
  if they had run one after another. Re-publishing a byte-identical waiting
  message is a no-op, so a retried Publish does not duplicate it.
]]
local CHUNK = 500 -- arguments unpacked per variadic call (Lua's stack is limited)
local calls = tonumber(ARGV[2])
local first = 3 + calls

-- delays, which messages wait (delayed or high-priority), and their UUIDs
local delay, waits, uuids = {}, {}, {}
for j = first, #ARGV, 4 do
  local d = tonumber(ARGV[j + 1])
  if ARGV[j + 3] == '1' and d < 0 then
    d = 0
  end
  delay[j] = d
  waits[j] = d > 0 or ARGV[j + 3] == '1'
  if waits[j] then
    uuids[#uuids + 1] = ARGV[j]
  end
end

-- UUID -> body already waiting (or accepted below); false when none
local known = {}
local now
if #uuids > 0 then
  now = redis.call('TIME')
  -- rounded up: a due time is never earlier than now + delay
  now = tonumber(now[1]) * 1000 + math.ceil(tonumber(now[2]) / 1000)
  for c = 1, #uuids, CHUNK do
    local last = math.min(c + CHUNK - 1, #uuids)
    local bodies = redis.call('HMGET', KEYS[2], unpack(uuids, c, last))
    for k = 1, #bodies do
      known[uuids[c + k - 1]] = bodies[k]
    end
  end
end

-- check each call; collect the writes of those that pass
local status, ready, waiting = {}, {}, {}
local j = first
for k = 1, calls do
  local stop = j + 4 * tonumber(ARGV[2 + k])
  local bad = nil
  for m = j, stop - 1, 4 do
    if waits[m] then
      local old = known[ARGV[m]]
      if old and old ~= ARGV[m + 2] then
        bad = ARGV[m]
        break
      end
    end
  end
  if bad then
    status[k] = bad
  else
    status[k] = 0
    for m = j, stop - 1, 4 do
      if not waits[m] then
        ready[#ready + 1] = m
      elseif not known[ARGV[m]] then
        known[ARGV[m]] = ARGV[m + 2]
        waiting[#waiting + 1] = m
      end
    end
  end
  j = stop
end

for _, m in ipairs(ready) do
  redis.call('XADD', KEYS[3], '*', 'm', ARGV[m + 2])
end

if #waiting > 0 then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  local seq = redis.call('INCRBY', KEYS[4], #waiting) - #waiting
  local earliest = nil
  for c = 1, #waiting, CHUNK do
    local h, z, pr = {}, {}, {}
    for k = c, math.min(c + CHUNK - 1, #waiting) do
      local m = waiting[k]
      seq = seq + 1
      local score = (now + delay[m]) * 1024 + seq % 1024
      h[#h + 1] = ARGV[m]
      h[#h + 1] = ARGV[m + 2]
      z[#z + 1] = score
      z[#z + 1] = ARGV[m]
      if ARGV[m + 3] == '1' then
        pr[#pr + 1] = ARGV[m]
        pr[#pr + 1] = 1
      end
      if earliest == nil or score < earliest then
        earliest = score
      end
    end
    redis.call('HSET', KEYS[2], unpack(h))
    redis.call('ZADD', KEYS[1], unpack(z))
    if #pr > 0 then
      redis.call('HSET', KEYS[5], unpack(pr))
    end
  end
  if head == nil or earliest < tonumber(head) then
    redis.call('PUBLISH', ARGV[1], 'd')
  end
end
return status
