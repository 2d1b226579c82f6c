--[[
  idle: tells whether a partition holds nothing a scheduler must act on, and
  if so marks it dormant, so the scheduler's loop may stop: no message
  waits, no consumer group has an entry pending (to reclaim should its
  consumer die) or one it has not read yet (it would be pending once read),
  and no listed group has a retry or redelivery queued. What changes that
  wakes the schedulers: a publish (it clears the mark and publishes a
  wake-up), a new group, a requeue of dead letters.

  KEYS[1] waiting  zset   message UUID -> due score
  KEYS[2] stream   stream the topic's ready stream
  KEYS[3] dormant  string set here when idle
  then for each consumer group g = 1, 2, ..., two keys:
  KEYS[2g+2] retry    zset   the group's retry set
  KEYS[2g+3] rstream  stream the group's redelivery stream

  Returns 1 when idle (and marked dormant), 0 otherwise.
]]
if redis.call('ZCARD', KEYS[1]) > 0 then
  return 0
end
for k = 4, #KEYS, 2 do
  if redis.call('ZCARD', KEYS[k]) > 0 or redis.call('XLEN', KEYS[k + 1]) > 0 then
    return 0
  end
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

if redis.call('EXISTS', KEYS[2]) == 1 then
  local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local delivered, pending
    for i = 1, #g, 2 do
      if g[i] == 'last-delivered-id' then delivered = g[i + 1]
      elseif g[i] == 'pending' then pending = g[i + 1] end
    end
    if pending > 0 then
      return 0
    end
    if last then
      local lm, ls = parse(last[1])
      local dm, ds = parse(delivered)
      if dm < lm or (dm == lm and ds < ls) then
        return 0
      end
    end
  end
end
redis.call('SET', KEYS[3], '1')
return 1
