#!lua flags=allow-oom
-- include: clock
--[[
  slot: the concurrency limit of a consumer group on a topic
  (SubscriberConfig.Concurrency): at most `limit` of its handlers run at
  once, across every subscription in every process. A subscription takes
  a slot before handing a message to its handler and gives it back when
  the handler acked or nacked; a slot whose holder stopped renewing it (a
  dead process) lapses after its lease. Waiters are served in the order
  they first asked, so none starves; a waiter that stopped asking (dead)
  leaves the queue after 3 s. All keys are on partition 0 of the topic.

  KEYS[1] running zset  holder (a subscription's consumer name) -> lease
                        expiry (ms, Redis's clock); the key's name is also
                        the channel a release is published on
  KEYS[2] queue   zset  waiter -> when it first asked (ms)
  KEYS[3] seen    zset  waiter -> when it last asked (ms)

  ARGV[1] take, renew (extend a held slot's lease) or release
  ARGV[2] the holder or waiter
  ARGV[3] limit (take)
  ARGV[4] lease in ms (take, renew)

  Returns 1 when the caller holds a slot (after take or renew), else 0;
  release returns 0.
]]
local running, queue, seen = KEYS[1], KEYS[2], KEYS[3]
local op, member, limit, lease = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if op == 'release' then
  if redis.call('ZREM', running, member) == 1 and redis.call('ZCARD', queue) > 0 then
    redis.pcall('PUBLISH', running, '')
  end
  return 0
end
local now = now_ms()
-- Lapsed holders free their slots: tell the waiters.
local lapsed = redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
if redis.call('ZSCORE', running, member) then
  redis.call('ZADD', running, now + lease, member)
  redis.call('PEXPIRE', running, lease + 10000)
  return 1
end
if op == 'renew' then
  return 0
end
local stale = redis.call('ZRANGEBYSCORE', seen, '-inf', now - 3000, 'LIMIT', '0', '1000')
if #stale > 0 then
  redis.call('ZREM', queue, unpack(stale))
  redis.call('ZREM', seen, unpack(stale))
end
redis.call('ZADD', queue, 'NX', now, member)
redis.call('ZADD', seen, now, member)
local held = 0
local free = limit - redis.call('ZCARD', running)
if free > 0 and redis.call('ZRANK', queue, member) < free then
  redis.call('ZREM', queue, member)
  redis.call('ZREM', seen, member)
  redis.call('ZADD', running, now + lease, member)
  redis.call('PEXPIRE', running, lease + 10000)
  held = 1
end
redis.call('PEXPIRE', queue, '10000')
redis.call('PEXPIRE', seen, '10000')
if lapsed > 0 and held == 0 then
  redis.pcall('PUBLISH', running, '')
end
return held
