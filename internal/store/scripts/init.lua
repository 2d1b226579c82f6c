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
  ARGV[2] wake channel (told about a new group, or a shorter visibility
          timeout)
  ARGV[3] policy, max: max attempts (0 = no limit)
  ARGV[4] policy, vis: visibility timeout ms
  ARGV[5] policy, deadmax: most dead letters (0 = no limit)
  ARGV[6] policy, idle: consumer idle timeout ms
  ARGV[7] policy, backoff: retry delays ms per attempt (comma-separated,
          last repeats)
  ARGV[8] policy, gcap: most messages of one group in flight (0: no cap)
  ARGV[9] policy, grate: per-group rate limit, "<messages>/<per ms>" ("": none)

  Sets the meta field gv: the group's subscribers read grouped messages
  (fair.lua), so schedulers queue them per group for it.

  Returns 1 when the group is new, 0 when it existed.
]]
local stream, rstream, groups, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, wake = ARGV[1], ARGV[2]
local max, vis, deadmax, idle, backoff = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local gcap, grate = ARGV[8], ARGV[9]
local created = redis.call('SADD', groups, group)
for _, key in ipairs({stream, rstream}) do
  local ok = redis.pcall('XGROUP', 'CREATE', key, group, '0', 'MKSTREAM')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP', 1, true) then
    return redis.error_reply(ok.err)
  end
end
local stored = tonumber(redis.call('HGET', meta, 'vis'))
redis.call('HSET', meta, 'max', max, 'vis', vis, 'deadmax', deadmax, 'idle', idle, 'backoff', backoff,
  'gcap', gcap, 'grate', grate, 'gv', '1')
-- a shorter visibility timeout too: schedulers pace their reclaims by the
-- stored one (see reclaim.lua's oldest), and sweep again when woken so
if created == 1 or (stored and tonumber(vis) < stored) then
  redis.call('PUBLISH', wake, 'g')
end
return created
