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
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
