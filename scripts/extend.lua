--[[
  extend: renews the lease of every message a consumer holds (fetched or
  being handled), so reclaim leaves a live consumer's messages alone
  however long its handler takes. XCLAIM ... JUSTID resets an entry's idle
  time without counting a delivery.

  KEYS[1] stream   stream the topic's ready stream
  KEYS[2] rstream  stream the group's redelivery stream
  ARGV[1] consumer group
  ARGV[2] consumer name

  Returns the number of entries whose lease was renewed.
]]
local n = 0
for s = 1, 2 do
  local ok, pending = pcall(redis.call, 'XPENDING', KEYS[s], ARGV[1], '-', '+', 100000, ARGV[2])
  if ok then
    -- in chunks: unpack has a stack limit
    for i = 1, #pending, 500 do
      local ids = {}
      for j = i, math.min(i + 499, #pending) do
        ids[#ids + 1] = pending[j][1]
      end
      n = n + #ids
      ids[#ids + 1] = 'JUSTID'
      redis.call('XCLAIM', KEYS[s], ARGV[1], ARGV[2], 0, unpack(ids))
    end
  end
end
return n
