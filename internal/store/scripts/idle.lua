#!lua flags=allow-oom
-- include: clock, stream
--[[
  idle: tells whether a partition holds nothing a scheduler must act on, and
  if so marks it dormant, so the scheduler's loop may stop: no message
  waits, no consumer group has an entry pending (to reclaim should its
  consumer die) or one it has not read yet (it would be pending once read),
  and no listed group has a retry or redelivery queued, nor is a far element
  parked (which a trim of this release moves on; one that no release here
  reads keeps the loop ticking until an operator acts: Health reports it);
  nor, in a stream no group reads, an entry the retention will remove.
  What changes that
  wakes the schedulers: a publish (it clears the mark and publishes a
  wake-up), a new group, a requeue of dead letters.

  KEYS[1] waiting  zset   message UUID -> due score
  KEYS[2] stream   stream the topic's ready stream
  KEYS[3] dormant  string set here when idle
  KEYS[4] fanout   hash   a high-priority message part-way through its fan-out
  KEYS[5] far      zset   the far tier's buckets (see far.go)
  KEYS[6] fz       zset   the same of format 2
  KEYS[7] fpark    list   far elements an older release parked: the
                          scheduler's trim moves them on (unpark.lua)
  then for each consumer group g = 1, 2, ..., two keys:
  KEYS[2g+6] retry    zset   the group's retry set
  KEYS[2g+7] rstream  stream the group's redelivery stream
  ARGV[1] retention in ms for a stream without consumer groups (0: keep all)

  Returns 1 when idle (and marked dormant), 0 otherwise.
]]
local waiting, stream, dormant, fanout, far, fz, fpark = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local retention = tonumber(ARGV[1])
if redis.call('ZCARD', waiting) > 0 or redis.call('EXISTS', fanout) == 1 or redis.call('EXISTS', far, fz, fpark) > 0 then
  return 0
end
for k = 8, #KEYS, 2 do
  if redis.call('ZCARD', KEYS[k]) > 0 or redis.call('XLEN', KEYS[k + 1]) > 0 then
    return 0
  end
end

if redis.call('EXISTS', stream) == 1 then
  local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', '1')[1]
  local groups = redis.call('XINFO', 'GROUPS', stream)
  if #groups == 0 and retention > 0 and last then
    -- the newest entry expires last (trimming is approximate: an older
    -- one left behind does not keep the loop)
    if parse_id(last[1]) > now_ms() - retention then
      return 0
    end
  end
  for _, g in ipairs(groups) do
    g = fields(g)
    if g.pending > 0 then
      return 0
    end
    if last then
      local lm, ls = parse_id(last[1])
      local dm, ds = parse_id(g['last-delivered-id'])
      if dm < lm or (dm == lm and ds < ls) then
        return 0
      end
    end
  end
end
redis.call('SET', dormant, '1')
return 1
