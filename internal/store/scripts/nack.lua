#!lua flags=allow-oom
-- include: clock, lib, fair
--[[
  nack: takes a delivered message away from its consumer group's pending
  list and either queues it for redelivery to that group only (into the
  group's redelivery stream now, or into its retry set until the delay has
  passed) or, when it is out of attempts or cannot be decoded, buries it
  in the group's dead letters.

  KEYS[1] source   stream the entry was read from (ready or redelivery stream)
  KEYS[2] retry    zset   the group's retry set
  KEYS[3] rbodies  hash   the group's retry bodies
  KEYS[4] rstream  stream the group's redelivery stream
  KEYS[5] dead     stream the group's dead letters
  KEYS[6] meta     hash   the group's policy and counters
  KEYS[7] bell     string the partition's bell (see lib.lua's ring)
  KEYS[8] fq       hash   the group's fair queues (see fair.lua)
  KEYS[9] fring    list   the group's ring of groups to serve
  KEYS[10] fprio   list   the group's groups with high-priority messages
  KEYS[11] fwait   zset   the group's groups asleep under their rate limit
  ARGV[1] consumer group
  ARGV[2] entry id in the source stream
  ARGV[3] source tag: "m" for the ready stream, "r" for the redelivery stream
          (redelivery entries are deleted once handled)
  ARGV[4] attempt number that failed
  ARGV[5] delay in ms before the next attempt (<= 0: now)
  ARGV[6] encoded message (with the metadata the handler left on it)
  ARGV[7] wake channel
  ARGV[8] "" to requeue, else the reason to bury it in the dead letters
  ARGV[9] most dead letters kept (<= 0: no limit)
  ARGV[10] "1" to requeue it as the same attempt (Snooze), else as the next

  Returns {status, evicted}: status 0 when the entry was no longer pending
  for the group (already acknowledged, handed back or reclaimed: nothing is
  queued twice), 1 when requeued, 2 when buried; evicted counts dead
  letters evicted to make room.

  A grouped message (a redelivery entry with field k) keeps its group: it
  is queued again at the front of its group (fair.lua's fair_retry), and
  buried or not, its group's slot is given back once it leaves.
]]
local source, retry, rbodies, rstream, dead, meta, bell = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local fq, fring, fprio, fwait = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local group, id, tag, attempt, delay, body = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local wake, reason, deadMax, snooze = ARGV[7], ARGV[8], tonumber(ARGV[9]), ARGV[10]
if redis.call('XACK', source, group, id) == 0 then
  return {0, 0}
end
local g = nil
if tag == 'r' then
  if redis.call('EXISTS', fq) == 1 then
    local _
    _, _, g = entry_of(source, id)
  end
  redis.call('XDEL', source, id)
end
local c
if g then
  c = fair_open(fq, fring, fprio, fwait, meta)
end

local next = attempt + 1
if snooze == '1' then
  next = attempt
end
local status, evicted = 1, 0
if reason ~= '' then
  status, evicted = 2, bury(dead, meta, deadMax, body, attempt, reason, g)
  if c then fair_release(c, g) end
elseif c then
  fair_retry(c, retry, rbodies, wake, g, id, next, delay, body)
else
  requeue(retry, rbodies, rstream, bell, wake, tag .. id, next, delay, body)
end
if c then fair_close(c, bell, now_ceil_ms()) end
return {status, evicted}
