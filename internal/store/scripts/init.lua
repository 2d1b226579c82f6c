#!lua flags=allow-oom
--[[
  init: creates a consumer group on the topic's ready stream (reading from
  the start, so a new group sees messages still in the stream) and on the
  group's redelivery stream, registers the group for schedulers, and stores
  the group's policy for reclaim (the last subscriber to start wins).

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] groups   set    consumer groups of the topic
  KEYS[4] meta     hash   the group's policy and counters
  ARGV[1] consumer group
  ARGV[2] wake channel (told about the new group)
  ARGV[3..7] policy: max attempts (0 = no limit), visibility timeout ms,
          most dead letters (0 = no limit), consumer idle timeout ms,
          retry delays ms per attempt (comma-separated, last repeats)

  Returns 1 when the group is new, 0 when it existed.
]]
local created = redis.call('SADD', KEYS[3], ARGV[1])
for s = 1, 2 do
  local ok = redis.pcall('XGROUP', 'CREATE', KEYS[s], ARGV[1], '0', 'MKSTREAM')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP', 1, true) then
    return redis.error_reply(ok.err)
  end
end
redis.call('HSET', KEYS[4], 'max', ARGV[3], 'vis', ARGV[4], 'deadmax', ARGV[5], 'idle', ARGV[6], 'backoff', ARGV[7])
if created == 1 then
  redis.call('PUBLISH', ARGV[2], 'g')
end
return created
