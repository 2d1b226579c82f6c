-- include: clock
--[[
  delayed: stores the messages of one or more Publish calls to a partition
  that are all plain and delayed (no business key, priority or group) and
  due before the far tier (see FarArgOf: not looked up there, not stored
  there), when the waiting set has no bound: into the waiting set, their
  bodies into the hash beside it, exactly as publish.lua stores such
  messages, at a fraction of its cost (at a steady rate every message is a
  call of its own). As there: each call is atomic on its own, checked in
  order, each seeing the calls accepted before it; a call one of whose
  messages is already waiting with another body is refused; re-publishing a
  byte-identical waiting message is a no-op.

  KEYS[1] waiting  zset   message UUID -> score (due ms * 1024 + sequence)
  KEYS[2] bodies   hash   message UUID -> encoded message
  KEYS[3] seq      string counter that keeps equal due times in publish order
  KEYS[4] dormant  string set while no scheduler loop runs for the
                          partition (idle.lua)
  KEYS[5] reg      string set by the first publish: gone, Redis lost the
                          topic registry too
  ARGV[1]          wake channel, published to when the earliest due time
                   moves earlier, or a message is stored in a dormant
                   partition
  ARGV[2]          number of calls, c
  ARGV[2+k]        number of messages of call k (k = 1..c)
  then three arguments per message, the calls' messages in call order:
  ARGV[j]          message UUID
  ARGV[j+1]        delay in ms from now (Redis server time), > 0
  ARGV[j+2]        encoded message

  Returns publish.lua's reply: one status per call, in call order (0: its
  messages are stored; a UUID: that message is already waiting with a
  different body, and nothing of the call is stored), then 1 when KEYS[5]
  was missing (the caller registers the topic again), else 0, then 0.

  No allow-oom flag, as publish.lua.
]]
local waiting, bodies, seq, dormant, reg = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local wake, calls = ARGV[1], tonumber(ARGV[2])
local first = 3 + calls

local status = {}
local stored = false -- messages were stored
local mustWake = false -- the earliest due time moved earlier
if #ARGV == 6 then
  -- One call of one message, as at a steady rate every call is: what the
  -- loop below does, without its seven tables. Each table a script makes,
  -- grown an element at a time, costs Redis about as much as a command
  -- (callgrind: this path takes a fifth fewer instructions a publish).
  local id, body = ARGV[first], ARGV[first + 2]
  -- HSETNX stores a new message's body and tells a known one in one
  -- command (HGET then HSET were two); only a known one's body is read
  local old
  if redis.call('HSETNX', bodies, id, body) == 0 then
    old = redis.call('HGET', bodies, id)
  else
    local score = (now_ceil_ms() + tonumber(ARGV[first + 1])) * 1024 + redis.call('INCR', seq) % 1024
    redis.call('ZADD', waiting, string.format('%d', score), id)
    stored = true
    mustWake = redis.call('ZRANGE', waiting, '0', '0')[1] == id
  end
  status[1] = (not old or old == body) and 0 or id
else
  local ids = {}
  for j = first, #ARGV, 3 do
    ids[#ids + 1] = ARGV[j]
  end
  -- the bodies waiting already (a call is at most 512 messages: one HMGET)
  local known = redis.call('HMGET', bodies, unpack(ids))
  local accepted = {} -- UUID -> body, of the calls accepted in this run
  local adding = {} -- the ARGV index of each message to store
  local j, k = first, 1
  for c = 1, calls do
    local bad, adds = nil, {}
    for _ = 1, tonumber(ARGV[2 + c]) do
      local id, body = ARGV[j], ARGV[j + 2]
      local old = accepted[id] or known[k]
      if not old then
        adds[#adds + 1] = j
      elseif old ~= body and not bad then
        bad = id
      end
      j, k = j + 3, k + 1
    end
    if bad then
      status[c] = bad
    else
      status[c] = 0
      for _, a in ipairs(adds) do
        accepted[ARGV[a]] = ARGV[a + 2]
        adding[#adding + 1] = a
      end
    end
  end

  if #adding > 0 then
    local now = now_ceil_ms()
    -- (a number passed to redis.call is formatted as %.17g, a score read
    -- back parsed again: at a steady rate, a call of one message spent a
    -- tenth of its time so; integers go as %d, and one message takes INCR)
    local seqNo
    if #adding == 1 then
      seqNo = redis.call('INCR', seq) - 1
    else
      seqNo = redis.call('INCRBY', seq, string.format('%d', #adding)) - #adding
    end
    local h, z = {}, {}
    for _, a in ipairs(adding) do
      seqNo = seqNo + 1
      local score = (now + tonumber(ARGV[a + 1])) * 1024 + seqNo % 1024
      h[#h + 1], h[#h + 2] = ARGV[a], ARGV[a + 2]
      z[#z + 1], z[#z + 2] = string.format('%d', score), ARGV[a]
    end
    redis.call('HSET', bodies, unpack(h))
    redis.call('ZADD', waiting, unpack(z))
    stored = true
    -- the earliest due time moved earlier when the head is now one of ours
    mustWake = accepted[redis.call('ZRANGE', waiting, '0', '0')[1]] ~= nil
  end
end
-- 2 for reg, 1 for dormant: one command for both (as append.lua)
local flags = redis.call('EXISTS', reg, reg, dormant)
if stored then
  if flags % 2 == 1 then
    redis.call('DEL', dormant)
    mustWake = true
  end
  if mustWake then
    redis.call('PUBLISH', wake, 'd')
  end
end
local lost = 0
if flags < 2 then
  redis.call('SET', reg, '1')
  lost = 1
end
status[calls + 1] = lost
status[calls + 2] = 0
return status
