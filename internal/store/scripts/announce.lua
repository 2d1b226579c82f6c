#!lua flags=allow-oom
-- include: clock
--[[
  announce: the heartbeat of a process in the storage level registry (see
  level.go), and the level every process writes. A process announces the
  newest level it reads; the level written is the newest one that every
  reader active within the registry's window reads, and has read for the
  settle time. Readers of a release that announces nothing (0.1.0) are
  reported by the scan (legacy), and count as reading level 1 while the
  report lasts. Flagged allow-oom: a full Redis must not stop processes
  from agreeing on what they can read.

  KEYS[1] levels   hash   read (the oldest level a live reader reads),
                          since (ms: when read last changed), write (the
                          level in use; absent: 1), pin (an operator's
                          ceiling), settle (ms: overrides ARGV[5]),
                          legacy (ms: until when a legacy reader counts),
                          legacywhat (what the scan saw), changed (ms:
                          when write last changed), scanner and scanuntil
                          (the process given the scan, until when)
  KEYS[2] procs    zset   process id -> expiry (ms)
  KEYS[3] pinfo    hash   process id -> "<level> <version> <role> <host> <unreadable>"
  KEYS[4] plevels  zset   process id -> the level it reads
  ARGV[1]          process id
  ARGV[2]          time to live in ms; 0 removes the process
  ARGV[3]          its info (pinfo's value; begins with the level it reads)
  ARGV[4]          the newest level this release knows (the ceiling)
  ARGV[5]          the default settle time, ms
  ARGV[6]          legacy report: how long it counts, ms (0: none)
  ARGV[7]          what the scan saw (legacywhat)
  ARGV[8]          "1" when the caller found nothing stored under the
                   prefix (no topic registered): with no level agreed yet,
                   no release ever wrote here, so none can be rolled back
                   to that would need the settle time
  ARGV[9]          how long the scan is the caller's when given it, ms

  Returns {level, read, write, pin, since, live, legacy, scan}: the level
  to write now (write under the pin, and never above ARGV[4]), the oldest
  level a live reader reads, the level agreed before the pin, the pin (0:
  none), since, the number of live processes, until when a legacy reader
  counts (0: none seen within the window), and 1 when the caller is to
  scan.
]]
local levels, procs, pinfo, plevels = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, ttl, info = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local newest, settle = tonumber(ARGV[4]), tonumber(ARGV[5])
local legacyFor, legacyWhat, fresh = tonumber(ARGV[6]), ARGV[7], ARGV[8] == '1'
local scanFor = tonumber(ARGV[9])
local now = now_ms()

if ttl > 0 then
  redis.call('ZADD', procs, now + ttl, id)
  redis.call('ZADD', plevels, tonumber(string.match(info, '^(%d+)')) or 1, id)
  redis.call('HSET', pinfo, id, info)
else
  redis.call('ZREM', procs, id)
  redis.call('ZREM', plevels, id)
  redis.call('HDEL', pinfo, id)
end
local expired = redis.call('ZRANGEBYSCORE', procs, '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', procs, '-inf', now)
  redis.call('ZREM', plevels, unpack(expired))
  redis.call('HDEL', pinfo, unpack(expired))
end
if legacyFor > 0 then
  redis.call('HSET', levels, 'legacy', now + legacyFor, 'legacywhat', legacyWhat)
end

local st = redis.call('HMGET', levels, 'read', 'since', 'write', 'pin', 'settle', 'legacy', 'scanner', 'scanuntil')
local oldest = redis.call('ZRANGE', plevels, '0', '0', 'WITHSCORES')
local read = tonumber(oldest[2])
local live = redis.call('ZCARD', procs)
local legacy = tonumber(st[6]) or 0
if legacy > now then
  read = 1
else
  legacy = 0
end
if read == nil then
  -- Nobody live (the last process leaving): keep what was agreed.
  read = tonumber(st[1]) or 1
end

settle = tonumber(st[5]) or settle
local since = tonumber(st[2]) or now
if st[3] == false and fresh then
  since = now - settle
  redis.call('HSET', levels, 'read', read, 'since', since)
elseif tonumber(st[1]) ~= read then
  since = now
  redis.call('HSET', levels, 'read', read, 'since', since)
end
local write = tonumber(st[3]) or 1
local was = write
if read < write then
  -- A reader of an older level is live: write what it reads at once.
  write = read
elseif write < read and now - since >= settle then
  write = read
end
if write ~= was or st[3] == false then
  redis.call('HSET', levels, 'write', write, 'changed', now)
end
local pin = tonumber(st[4]) or 0
local level = math.min(write, newest)
if pin > 0 and pin < level then
  level = pin
end
local scan = 0
if ttl > 0 and (st[7] == id or (tonumber(st[8]) or 0) < now) then
  scan = 1
  redis.call('HSET', levels, 'scanner', id, 'scanuntil', now + scanFor)
elseif ttl == 0 and st[7] == id then
  redis.call('HDEL', levels, 'scanner', 'scanuntil') -- another takes it at once
end
return {level, read, write, pin, since, live, legacy, scan}
