--[[
  promote: moves due messages to where consumers read them, atomically:
  the topic's waiting set into the ready stream, and each listed consumer
  group's retry set into that group's redelivery stream. Several schedulers
  may call it at once: a message is moved exactly once.

  KEYS[1] waiting  zset   message UUID -> due score
  KEYS[2] bodies   hash   message UUID -> encoded message
  KEYS[3] stream   stream the topic's ready stream
  then for each consumer group, three keys:
  KEYS[3g+1] retry    zset   "<attempt>:<m|r><entry id>" -> due score
  KEYS[3g+2] rbodies  hash   same member -> encoded message
  KEYS[3g+3] rstream  stream the group's redelivery stream, fields m, a (attempt)
  ARGV[1]  most messages moved from one set per call

  Returns {moved, wait, missing}:
    moved    messages moved
    wait     ms until the earliest message still waiting is due;
             0 when a set had more due than the limit; -1 when all sets are empty
    missing  members that had no body (dropped from the set; reported by the caller)
]]
local limit = tonumber(ARGV[1])
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local maxScore = now * 1024 + 1023
local moved, missing, wait = 0, 0, -1

local function earlier(w)
  if wait < 0 or w < wait then wait = w end
end

local function move(set, bodies, stream, retry)
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', maxScore, 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do
    local body = redis.call('HGET', bodies, id)
    if body then
      if retry then
        redis.call('XADD', stream, '*', 'm', body, 'a', string.match(id, '^(%d+):'))
      else
        redis.call('XADD', stream, '*', 'm', body)
      end
      moved = moved + 1
    else
      missing = missing + 1
    end
  end
  if #ids > 0 then
    redis.call('HDEL', bodies, unpack(ids))
    redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1)
  end
  if #ids == limit then
    earlier(0)
    return
  end
  local head = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')[2]
  if head then
    local w = math.floor(tonumber(head) / 1024) - now
    if w < 0 then w = 0 end
    earlier(w)
  end
end

move(KEYS[1], KEYS[2], KEYS[3], false)
for g = 4, #KEYS, 3 do
  move(KEYS[g], KEYS[g + 1], KEYS[g + 2], true)
end
return {moved, wait, missing}
