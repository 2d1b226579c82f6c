--[[
  release: hands every message pending for one consumer back to its group
  (into the group's redelivery stream, attempt count unchanged), then removes
  the consumer. Used when a subscription closes, so unacknowledged and
  prefetched messages reach the group's other consumers at once.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] most entries handed back per call

  Returns {released, missing, done}: missing counts pending entries whose
  body was already gone; done is 1 when the consumer had nothing left and
  was removed (call again otherwise).
]]
local group, consumer, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local released, missing = 0, 0

for s = 1, 2 do
  local stream = KEYS[s]
  local pending = redis.call('XPENDING', stream, group, '-', '+', limit, consumer)
  for _, p in ipairs(pending) do
    local id = p[1]
    local entry = redis.call('XRANGE', stream, id, id)[1]
    local body, attempt = nil, '1'
    if entry then
      local f = entry[2]
      for i = 1, #f, 2 do
        if f[i] == 'm' then body = f[i + 1] elseif f[i] == 'a' then attempt = f[i + 1] end
      end
    end
    if body then
      redis.call('XADD', KEYS[2], '*', 'm', body, 'a', attempt)
      released = released + 1
    else
      missing = missing + 1
    end
    redis.call('XACK', stream, group, id)
    if s == 2 then
      redis.call('XDEL', stream, id)
    end
  end
  if #pending == limit then
    return {released, missing, 0}
  end
end

redis.call('XGROUP', 'DELCONSUMER', KEYS[1], group, consumer)
redis.call('XGROUP', 'DELCONSUMER', KEYS[2], group, consumer)
return {released, missing, 1}
