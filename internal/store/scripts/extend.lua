#!lua flags=allow-oom
--[[
  extend: renews the lease of the messages a subscription holds (fetched
  and not yet settled), so reclaim leaves a live consumer's messages alone
  however long its handler takes. XCLAIM ... JUSTID resets an entry's idle
  time without counting a delivery; an id no longer pending is skipped.
  Entries pending for the consumer that it does not hold (a read whose
  reply was lost) are not renewed but reported, so the subscription reads
  its own pending entries again.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  KEYS[3] meta     hash   the group's policy (vis: the visibility timeout
                          reclaim uses, in ms)
  KEYS[4] handling string the consumer's report of what its handler has,
                          for the Inspector to tell a message being handled
                          from those fetched with it (buffered)
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] how many of the ids that follow are in the ready stream
  ARGV[4] the report: "<m|r> <entry id> <ms handed>" (m: ready stream, r:
          redelivery stream), or "-" when no handler has a message
  ARGV[5] how long the report lasts (ms): the lease, so a consumer that
          died leaves none behind it
  ARGV[6..] ids held: first those in the ready stream, then those in the
          redelivery stream

  Returns {unheld, vis}: unheld > 0 when entries pending for the consumer
  are not among the ids held; vis is the group's stored visibility timeout
  in ms (0 when none is stored), so a subscription renews often enough
  even when another subscriber of the group set a shorter one.
]]
local stream, rstream, meta, handling = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local group, consumer, n, report, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
redis.call('SET', handling, report, 'PX', ttl)
local held = {}
for i = 6, #ARGV do held[ARGV[i]] = true end
local unheld = 0
for s, key in ipairs({stream, rstream}) do
  local first, last = 6, 5 + n
  if s == 2 then first, last = 6 + n, #ARGV end
  -- in chunks: unpack has a stack limit
  for i = first, last, 500 do
    local ids = {unpack(ARGV, i, math.min(i + 499, last))}
    ids[#ids + 1] = 'JUSTID'
    redis.call('XCLAIM', key, group, consumer, '0', unpack(ids))
  end
  -- The first (held + 1) pending entries include an unheld one whenever
  -- there is one. A stream without the group has nothing pending.
  local ok, p = pcall(redis.call, 'XPENDING', key, group, '-', '+', last - first + 2, consumer)
  if ok then
    for _, e in ipairs(p) do
      if not held[e[1]] then unheld = unheld + 1 end
    end
  end
end
return {unheld, tonumber(redis.call('HGET', meta, 'vis')) or 0}
