--[[
  extend: renews the lease of the messages a subscription holds (fetched
  and not yet settled), so reclaim leaves a live consumer's messages alone
  however long its handler takes. XCLAIM ... JUSTID resets an entry's idle
  time without counting a delivery; an id no longer pending is skipped.
  Entries pending for the consumer that it does not know it holds (a read
  whose reply was lost) are not renewed: the count returned tells the
  subscription to read its own pending entries again.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  ARGV[1] consumer group
  ARGV[2] consumer name
  ARGV[3] how many of the ids that follow are in the ready stream
  ARGV[4..] ids held: first those in the ready stream, then those in the
          redelivery stream

  Returns the number of entries pending for the consumer, up to one more
  than it holds.
]]
local group, consumer, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = #ARGV - 3
local pending = 0
for s = 1, 2 do
  local first, last = 4, 3 + n
  if s == 2 then first, last = 4 + n, #ARGV end
  -- in chunks: unpack has a stack limit
  for i = first, last, 500 do
    local ids = {unpack(ARGV, i, math.min(i + 499, last))}
    ids[#ids + 1] = 'JUSTID'
    redis.call('XCLAIM', KEYS[s], group, consumer, 0, unpack(ids))
  end
  -- a stream without the group (not created yet) has nothing pending
  local ok, p = pcall(redis.call, 'XPENDING', KEYS[s], group, '-', '+', held + 1, consumer)
  if ok then pending = pending + #p end
end
return pending
