#!lua flags=allow-oom
--[[
  promote: one scheduler tick of a topic. It first takes or extends the
  topic's scheduling lease: only the scheduler holding it promotes, the
  others stand by until it expires or is released. The holder then moves due
  messages to where consumers read them, atomically: the topic's waiting set
  into the ready stream (releasing their business keys), and each listed
  consumer group's retry set into that group's redelivery stream. A due
  high-priority message goes to the
  redelivery stream of every listed group instead (as attempt 1), which
  subscribers read before the ready stream; with no group listed, to the
  ready stream. The lease only saves work: a message is
  moved exactly once even when several schedulers call this at once.
  Flagged allow-oom: it runs at maxmemory, since moving due messages on is
  what lets them be acknowledged and trimmed, freeing memory.

  KEYS[1] lease    string owner of the topic's scheduling (expires)
  KEYS[2] groups   set    consumer groups of the topic (only counted)
  KEYS[3] waiting  zset   message UUID -> due score
  KEYS[4] bodies   hash   message UUID -> encoded message
  KEYS[5] stream   stream the topic's ready stream
  KEYS[6] bkeys    hash   business key -> UUID of the waiting message holding it
  KEYS[7] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[8] prio     hash   UUIDs of the waiting high-priority messages -> 1
  then for each consumer group g = 1, 2, ..., three keys:
  KEYS[3g+6] retry    zset   "<attempt>:<m|r><entry id>" -> due score
  KEYS[3g+7] rbodies  hash   same member -> encoded message
  KEYS[3g+8] rstream  stream the group's redelivery stream, fields m, a (attempt)
  ARGV[1]  most messages moved from one set per call
  ARGV[2]  owner: a unique id of the calling scheduler
  ARGV[3]  lease time in ms
  ARGV[4]  "0" when the caller must not take a free lease (it holds its
           share of the topic's partitions already), "1" otherwise

  Returns {moved, wait, missing, groups, held}:
    moved    messages moved
    wait     held: µs until the earliest message still waiting is due;
             0 when a set had more due than the limit; -1 when all sets are empty.
             Not held: µs until the lease expires; -1 when it is free (and the
             caller was not to take it).
    missing  members that had no body (dropped from the set; reported by the caller)
    groups   number of consumer groups registered for the topic (a caller
             whose list differs reads the set again)
    held     1 when the caller holds the lease (and promoted), 0 otherwise
]]
local owner = ARGV[2]
local ngroups = redis.call('SCARD', KEYS[2])
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= owner then
  return {0, redis.call('PTTL', KEYS[1]) * 1000, 0, ngroups, 0}
end
if not holder and ARGV[4] == '0' then
  return {0, -1, 0, ngroups, 0}
end
redis.call('SET', KEYS[1], owner, 'PX', ARGV[3])

local limit = tonumber(ARGV[1])
local t = redis.call('TIME')
local nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(nowUs / 1000)
local maxScore = now * 1024 + 1023
local moved, missing, wait = 0, 0, -1

local function earlier(w)
  if wait < 0 or w < wait then wait = w end
end

-- the redelivery streams of the listed groups, for high-priority messages
local rstreams = {}
for g = 11, #KEYS, 3 do
  rstreams[#rstreams + 1] = KEYS[g]
end

local function move(set, bodies, stream, retry)
  -- the head alone tells an idle set (the common case) apart cheaply
  local head = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2]
  if not head then
    return
  end
  head = tonumber(head)
  if head > maxScore then
    earlier(math.floor(head / 1024) * 1000 - nowUs)
    return
  end
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', maxScore, 'LIMIT', 0, limit)
  local high = {}
  -- only when something is due: an idle tick stays at the head check
  if not retry and redis.call('EXISTS', KEYS[8]) == 1 then
    local flags = redis.call('HMGET', KEYS[8], unpack(ids))
    for k = 1, #ids do
      high[k] = flags[k] == '1'
    end
    redis.call('HDEL', KEYS[8], unpack(ids))
  end
  for k, id in ipairs(ids) do
    local body = redis.call('HGET', bodies, id)
    if body then
      if retry then
        redis.call('XADD', stream, '*', 'm', body, 'a', string.match(id, '^(%d+):'))
      elseif high[k] and #rstreams > 0 then
        for _, rs in ipairs(rstreams) do
          redis.call('XADD', rs, '*', 'm', body, 'a', 1)
        end
      else
        redis.call('XADD', stream, '*', 'm', body)
      end
      moved = moved + 1
    else
      missing = missing + 1
    end
  end
  redis.call('HDEL', bodies, unpack(ids))
  -- messages leaving the waiting set release their business keys; the
  -- reverse hash exists only while a waiting message holds one
  if not retry and redis.call('EXISTS', KEYS[7]) == 1 then
    local held = redis.call('HMGET', KEYS[7], unpack(ids))
    local freed = {}
    for k, key in ipairs(held) do
      if key and redis.call('HGET', KEYS[6], key) == ids[k] then
        freed[#freed + 1] = key
      end
    end
    redis.call('HDEL', KEYS[7], unpack(ids))
    if #freed > 0 then
      redis.call('HDEL', KEYS[6], unpack(freed))
    end
  end
  redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1)
  if #ids == limit then
    earlier(0)
    return
  end
  head = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2]
  if head then
    local w = math.floor(tonumber(head) / 1024) * 1000 - nowUs
    if w < 0 then w = 0 end
    earlier(w)
  end
end

move(KEYS[3], KEYS[4], KEYS[5], false)
for g = 9, #KEYS, 3 do
  move(KEYS[g], KEYS[g + 1], KEYS[g + 2], true)
end
return {moved, wait, missing, ngroups, 1}
