#!lua flags=allow-oom
-- include: clock
--[[
  gate: whether a subscription of a consumer group may fetch new messages
  from a topic, and how many. The group's pause flag and rate limiter are
  shared by all its subscriptions of the topic (every partition, every
  process), so both keys are on partition 0.

  The limiter is GCRA with reservations: a call reserves a batch of `want`
  messages at the end of the queue of earlier reservations and says how
  long to wait for its turn, so callers are served in the order they asked
  (none starves) and the rate holds at messages/per with bursts of one
  batch at most.

  KEYS[1] paused  string  set while the group is paused (Inspector.Pause)
  KEYS[2] rate    hash    t: when the last reservation ends (ms, Redis's
                          clock), l: the limit it was made under ("n/per")

  ARGV[1] messages allowed per interval (0: no rate limit)
  ARGV[2] the interval in ms
  ARGV[3] want: messages the caller would fetch (1 or more)
  ARGV[4] unused: messages of the caller's previous reservation it did not
          fetch (its read returned fewer), given back; negative: it fetched
          that many more (a read takes up to count from each of two
          streams), charged
  ARGV[5] the end of the caller's previous reservation, as this script
          returned it ("" for none): unused is given back only when no
          reservation was made after it, since moving the end of the queue
          back over later turns would let them overlap (a burst beyond
          one batch)

  Returns {paused, count, wait_us, end}: paused 1 (count 0) while the
  group is paused; otherwise the caller sleeps wait_us microseconds, then
  fetches at most count messages (want); end identifies its reservation
  (ARGV[5] of its next call).
]]
local paused, rate = KEYS[1], KEYS[2]
-- the limit as given (messages, interval): it is stored as "n/per"
local limitN, limitPer = ARGV[1], ARGV[2]
local want, unused, prev = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local n, per = tonumber(limitN), tonumber(limitPer)
if redis.call('EXISTS', paused) == 1 then
  return {1, 0, 0}
end
if n <= 0 then
  return {0, want, 0}
end
local e = per / n -- ms per message
local now = now_us() / 1000 -- ms, with the µs as a fraction
local limit = limitN .. '/' .. limitPer
local st = redis.call('HMGET', rate, 't', 'l')
local tat = tonumber(st[1]) or now
if st[2] ~= limit then
  -- The limit changed: reservations made under the old one no longer
  -- delay new ones.
  tat = math.min(tat, now)
end
-- A reservation's end in microseconds, as stored: what a caller passes back.
local function id(v)
  return math.floor(tonumber(v) * 1000 + 0.5)
end
if unused >= 0 then
  if unused > 0 and st[1] and prev ~= '' and id(st[1]) == tonumber(prev) then
    tat = math.max(tat - unused * e, now)
  end
  tat = math.max(tat, now)
else
  -- The previous read fetched more than reserved (it reads two streams).
  tat = math.max(tat, now) - unused * e
end
local wait = tat - now
tat = tat + want * e
local stored = string.format('%.3f', tat)
redis.call('HSET', rate, 't', stored, 'l', limit)
redis.call('PEXPIRE', rate, math.ceil(tat - now) + 1000)
return {0, want, math.ceil(wait * 1000), id(stored)}
