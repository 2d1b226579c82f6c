#!lua flags=allow-oom
--[[
  unlease: releases a topic's scheduling lease if the caller holds it, and
  wakes the standby schedulers so one of them takes over at once.

  KEYS[1] lease  string owner of the topic's scheduling
  ARGV[1] owner  the caller's id
  ARGV[2] wake channel
  ARGV[3] wake-up payload that tells standbys the lease is free

  Returns 1 when released, 0 when the caller did not hold it.
]]
local lease = KEYS[1]
local owner, wake, payload = ARGV[1], ARGV[2], ARGV[3]
if redis.call('GET', lease) ~= owner then
  return 0
end
redis.call('DEL', lease)
redis.call('PUBLISH', wake, payload)
return 1
