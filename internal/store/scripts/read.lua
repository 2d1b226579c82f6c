#!lua flags=allow-oom
-- include: clock, lib, fair
--[[
  read: a subscription's read of new messages when its last read found
  fewer than it asked for (its other reads are plain XREADGROUP calls). It
  reads as those do, and when that takes all there is, arms the
  partition's bell, atomically with the read: every script that adds
  entries consumers read rings the bell when armed (lib.lua's ring: it
  deletes KEYS[3] and publishes on the channel of the same name), so once
  it has handled what it read the subscription waits for the bell instead
  of blocking a connection, and misses no entry added after this read.
  Reads never block (BLOCK is not allowed in scripts).

  Before reading it checks that the consumer has no pending entry beyond
  those the caller says it holds (a read whose reply was lost, then retried
  by the client, leaves entries pending that the subscription never got: it
  reads its pending entries first then), and with KEYS[4] whether the group
  is paused.

  KEYS[1] rstream  stream the group's redelivery stream
  KEYS[2] stream   stream the topic's ready stream
  KEYS[3] bell     string "1" while a consumer of the partition waits for
                          new entries; its name is also the bell's channel
  KEYS[4] meta     hash   the group's policy (vis: the visibility timeout
                          reclaim uses, in ms)
  KEYS[5] fq       hash   the group's fair queues (see fair.lua)
  KEYS[6] fring    list   the group's ring of groups to serve
  KEYS[7] fprio    list   the group's groups with high-priority messages
  KEYS[8] fwait    zset   the group's groups asleep under their rate limit
  KEYS[9] paused   string the group's pause flag (optional: only partition 0
                          shares its slot)
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] most entries read per stream
  ARGV[4] entries of the redelivery stream the caller holds (acked, the
          acknowledgement not yet in Redis)
  ARGV[5] same for the ready stream

  While the group has grouped messages queued or in flight (fq exists), it
  first picks up to ARGV[3] of them into the redelivery stream (fair.lua's
  fair_pick), and arms the bell only when no group is left to serve.

  Returns {status, vis, grouped, wake, reply}: grouped is 1 when the group
  has grouped messages queued or in flight (the subscription picks before
  its plain reads then, pick.lua), wake the ms at which a group asleep under
  its rate limit wakes (-1: none); vis is the group's stored visibility
  timeout in ms (0 when none is stored), so a subscription renews the
  lease of what it read often enough even when another subscriber of the
  group set a shorter one. status 0: read, reply is XREADGROUP's (the
  redelivery stream first), and a stream gave all the caller asked for, so
  more may be there; 4: read, and the reply holds all there was, so the
  bell is armed; 1: nothing to read, the bell is armed; 2: the group is
  paused (nothing read); 3: the consumer has pending entries it does not
  hold (nothing read).
]]
local rstream, stream, bell, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fq, fring, fprio, fwait, paused = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local group, consumer, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = {tonumber(ARGV[4]), tonumber(ARGV[5])}

local vis = tonumber(redis.call('HGET', meta, 'vis')) or 0

for s, key in ipairs({rstream, stream}) do
  -- The first held + 1 pending entries of the consumer are more than it
  -- holds when it has one it does not know of.
  if #redis.call('XPENDING', key, group, '-', '+', held[s] + 1, consumer) > held[s] then
    return {3, vis, 0, -1}
  end
end
if paused and redis.call('EXISTS', paused) == 1 then
  return {2, vis, 0, -1}
end
local grouped, wake, more = 0, -1, false
if redis.call('EXISTS', fq) == 1 then
  local c = fair_open(fq, fring, fprio, fwait, meta)
  local now = now_ms()
  local _
  _, more, wake = fair_pick(c, rstream, count, now)
  fair_close(c, bell, now)
  grouped = 1
end
local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', rstream, stream, '>', '>')
if r then
  for _, s in ipairs(r) do
    if #s[2] >= count then
      return {0, vis, grouped, wake, r}
    end
  end
end
if more then
  -- groups are left to serve: read again at once (a nil r would reach the
  -- caller as a nil element)
  if r then
    return {0, vis, grouped, wake, r}
  end
  return {0, vis, grouped, wake}
end
-- NX: an armed bell stays as it is (no write to replicate)
redis.call('SET', bell, '1', 'NX')
if r then
  return {4, vis, grouped, wake, r}
end
return {1, vis, grouped, wake}
