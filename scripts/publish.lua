--[[
  publish: stores the messages of one or more Publish calls to a topic.
  Each call is atomic on its own: all of its messages are stored, or none.
  Due messages are appended to the ready stream; delayed ones go into the
  waiting set, their encoded bodies into the hash beside it. A high-priority
  message always goes into the waiting set (due now when not delayed), so
  the scheduler hands it to each consumer group's redelivery stream, which
  subscribers read first; it counts as waiting in every respect.

  KEYS[1] waiting  zset   message UUID -> score (due ms * 1024 + sequence)
  KEYS[2] bodies   hash   message UUID -> encoded message
  KEYS[3] stream   stream ready messages, field m = encoded message
  KEYS[4] seq      string counter that keeps equal due times in publish order
  KEYS[5] bkeys    hash   business key -> UUID of the waiting message holding it
  KEYS[6] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[7] prio     hash   UUID of a waiting high-priority message -> 1
  KEYS[8] reg      string set by the first publish: gone, Redis lost the topic registry too
  KEYS[9] dormant  string set while no scheduler loop runs for the partition (idle.lua)
  ARGV[1]          wake channel, published to when the earliest due time moves
                   earlier, or a message is stored in a dormant partition
  ARGV[2]          most waiting messages (ZCARD waiting) a call may leave; 0: no bound
  ARGV[3]          most ready entries (XLEN stream) a call may leave; 0: no bound
  ARGV[4]          number of calls, c
  ARGV[4+k]        number of messages of call k (k = 1..c)
  then five arguments per message, the calls' messages in call order:
  ARGV[j]          message UUID
  ARGV[j+1]        delay in ms from now (Redis server time); <= 0 means ready now
  ARGV[j+2]        encoded message
  ARGV[j+3]        business key: '' for none, else the policy's letter and
                   the key: r (reject), k (keep first), x (replace),
                   d (replace, keeping the holder's due time)
  ARGV[j+4]        "1" for a high-priority message, "0" otherwise

  Returns one status per call, in call order, then 1 when KEYS[8] was
  missing (the caller registers the topic again), else 0. A status:
    0                          its messages are stored (or dropped: keep first)
    UUID                       one of its messages is already waiting with a
                               different body
    {'key', key, UUID}         reject: a message of the call has a business key
                               held by the waiting message UUID
    {'full', 'waiting'|'ready', count, added}
                               the call would take the partition's waiting
                               set or ready stream, holding count, over its bound
  Only a 0 call stores messages. Calls are checked in order, each seeing the
  calls accepted before it, as if they had run one after another.
  Re-publishing a byte-identical waiting message is a no-op, so a retried
  Publish does not duplicate it.

  Business keys: a waiting message may hold one; no two waiting messages
  hold the same. A message whose key is held by another waiting message
  (or, for an immediate message, by a waiting one of the same UUID) is
  rejected (r), dropped (k), or takes its place (x: the holder is removed;
  d: the same, but the message takes the holder's score, so it is due when
  the holder was, in its place among equal due times; an immediate message
  then waits and holds the key). Other immediate messages never hold a key.

  No allow-oom flag, unlike the scripts that drain (see scripts.go): at
  maxmemory with noeviction, Redis refuses the call at its first write, so
  nothing of it is stored and Publish returns the OOM error.
]]
local CHUNK = 500 -- arguments unpacked per variadic call (Lua's stack is limited)
local maxWaiting = tonumber(ARGV[2])
local maxReady = tonumber(ARGV[3])
local calls = tonumber(ARGV[4])
local first = 5 + calls

-- delays, which messages wait (delayed or high-priority), their UUIDs, the
-- business keys
local delay, waits, uuids, bkeys = {}, {}, {}, {}
local fixed = {} -- message -> the score it takes from the holder it replaces (d)
for j = first, #ARGV, 5 do
  local d = tonumber(ARGV[j + 1])
  if ARGV[j + 4] == '1' and d < 0 then
    d = 0
  end
  delay[j] = d
  waits[j] = d > 0 or ARGV[j + 4] == '1'
  if waits[j] then
    uuids[#uuids + 1] = ARGV[j]
  end
  if ARGV[j + 3] ~= '' then
    bkeys[#bkeys + 1] = string.sub(ARGV[j + 3], 2)
  end
end

-- looks up fields of a hash in chunks: into[names[i]] = value or false
local function lookup(hash, names, into)
  for c = 1, #names, CHUNK do
    local last = math.min(c + CHUNK - 1, #names)
    local vals = redis.call('HMGET', hash, unpack(names, c, last))
    for k = 1, #vals do
      into[names[c + k - 1]] = vals[k]
    end
  end
end

-- UUID -> body already waiting (or accepted below); false when none
local known = {}
local now
if #uuids > 0 then
  now = redis.call('TIME')
  -- rounded up: a due time is never earlier than now + delay
  now = tonumber(now[1]) * 1000 + math.ceil(tonumber(now[2]) / 1000)
  lookup(KEYS[2], uuids, known)
end
-- business key -> UUID of the waiting message holding it; false when none
local holder = {}
if #bkeys > 0 then
  lookup(KEYS[5], bkeys, holder)
end
local nWaiting, nReady = 0, 0
if maxWaiting > 0 then
  nWaiting = redis.call('ZCARD', KEYS[1])
end
if maxReady > 0 then
  nReady = redis.call('XLEN', KEYS[3])
end

-- check each call; collect the writes of those that pass
local status, ready, waiting = {}, {}, {}
local pending = {}   -- UUID -> index in waiting of a message accepted in this run
local removed = {}   -- UUIDs of messages waiting before this run that are replaced
local touched = {}   -- business keys whose holder changed
local j = first
for k = 1, calls do
  local stop = j + 5 * tonumber(ARGV[4 + k])
  local bad = nil
  local adds, removes = {}, {}
  local dWait, dReady = 0, 0
  for m = j, stop - 1, 5 do
    local id, w = ARGV[m], waits[m]
    local old = w and known[id]
    if old then
      if old ~= ARGV[m + 2] then
        bad = id
        break
      end
      -- byte-identical and waiting: a no-op
    else
      local keep = true
      local bk = ARGV[m + 3]
      if bk ~= '' then
        local policy, key = string.sub(bk, 1, 1), string.sub(bk, 2)
        local h = holder[key]
        if h and (h ~= id or not w) then
          if policy == 'r' then
            bad = {'key', key, h}
            break
          elseif policy == 'k' then
            keep = false
          else
            removes[#removes + 1] = key
            dWait = dWait - 1
            if policy == 'd' then
              if pending[h] then
                local p = waiting[pending[h]]
                fixed[m], delay[m] = fixed[p], delay[p]
              else
                fixed[m] = tonumber(redis.call('ZSCORE', KEYS[1], h))
              end
              if not w then
                -- an immediate message that now waits: its UUID must not
                -- be waiting already, but as the holder itself
                local o = known[id]
                if o == nil then
                  o = redis.call('HGET', KEYS[2], id)
                end
                if o and id ~= h then
                  bad = id
                  break
                end
                w = true
                waits[m] = true
              end
            end
          end
        end
      end
      if keep then
        adds[#adds + 1] = m
        if w then dWait = dWait + 1 else dReady = dReady + 1 end
      end
    end
  end
  if not bad and maxWaiting > 0 and dWait > 0 and nWaiting + dWait > maxWaiting then
    bad = {'full', 'waiting', nWaiting, dWait}
  end
  if not bad and maxReady > 0 and dReady > 0 and nReady + dReady > maxReady then
    bad = {'full', 'ready', nReady, dReady}
  end
  if bad then
    status[k] = bad
  else
    status[k] = 0
    nWaiting, nReady = nWaiting + dWait, nReady + dReady
    for _, key in ipairs(removes) do
      local h = holder[key]
      if pending[h] then
        waiting[pending[h]] = false
        pending[h] = nil
      else
        removed[#removed + 1] = h
      end
      known[h] = false
      holder[key] = false
      touched[#touched + 1] = key
    end
    for _, m in ipairs(adds) do
      if not waits[m] then
        ready[#ready + 1] = m
      else
        local id = ARGV[m]
        known[id] = ARGV[m + 2]
        waiting[#waiting + 1] = m
        pending[id] = #waiting
        if ARGV[m + 3] ~= '' then
          local key = string.sub(ARGV[m + 3], 2)
          holder[key] = id
          touched[#touched + 1] = key
        end
      end
    end
  end
  j = stop
end

-- replaced messages that waited before this run
if #removed > 0 then
  redis.call('ZREM', KEYS[1], unpack(removed))
  redis.call('HDEL', KEYS[2], unpack(removed))
  redis.call('HDEL', KEYS[6], unpack(removed))
  redis.call('HDEL', KEYS[7], unpack(removed))
end
-- the final holder of every business key that changed hands
for _, key in ipairs(touched) do
  local h = holder[key]
  if h then
    redis.call('HSET', KEYS[5], key, h)
  else
    redis.call('HDEL', KEYS[5], key)
  end
end

for _, m in ipairs(ready) do
  redis.call('XADD', KEYS[3], '*', 'm', ARGV[m + 2])
end

local wake = false
local stored = {}
for _, m in ipairs(waiting) do
  if m then
    stored[#stored + 1] = m
  end
end
if #stored > 0 then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  local seq = redis.call('INCRBY', KEYS[4], #stored) - #stored
  if not now then
    -- only immediate messages that wait in a holder's place (d): taking
    -- its score, they need no clock unless the holder had no score
    now = redis.call('TIME')
    now = tonumber(now[1]) * 1000 + math.ceil(tonumber(now[2]) / 1000)
  end
  local earliest = nil
  for c = 1, #stored, CHUNK do
    local h, z, o, pr = {}, {}, {}, {}
    for k = c, math.min(c + CHUNK - 1, #stored) do
      local m = stored[k]
      seq = seq + 1
      local score = fixed[m] or (now + delay[m]) * 1024 + seq % 1024
      h[#h + 1] = ARGV[m]
      h[#h + 1] = ARGV[m + 2]
      z[#z + 1] = score
      z[#z + 1] = ARGV[m]
      if ARGV[m + 3] ~= '' then
        o[#o + 1] = ARGV[m]
        o[#o + 1] = string.sub(ARGV[m + 3], 2)
      end
      if ARGV[m + 4] == '1' then
        pr[#pr + 1] = ARGV[m]
        pr[#pr + 1] = 1
      end
      if earliest == nil or score < earliest then
        earliest = score
      end
    end
    redis.call('HSET', KEYS[2], unpack(h))
    redis.call('ZADD', KEYS[1], unpack(z))
    if #o > 0 then
      redis.call('HSET', KEYS[6], unpack(o))
    end
    if #pr > 0 then
      redis.call('HSET', KEYS[7], unpack(pr))
    end
  end
  if head == nil or earliest < tonumber(head) then
    wake = true
  end
end
if (#ready > 0 or #stored > 0) and redis.call('DEL', KEYS[9]) == 1 then
  wake = true
end
if wake then
  redis.call('PUBLISH', ARGV[1], 'd')
end
local new = 0
if redis.call('EXISTS', KEYS[8]) == 0 then
  redis.call('SET', KEYS[8], '1')
  new = 1
end
status[calls + 1] = new
return status
