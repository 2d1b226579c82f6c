-- include: lib
--[[
  fair: a consumer group's queues of grouped messages (SetGroup, and the
  keep-last-if-active business key policy) and their round-robin pick. An
  include (see scriptSource in scripts.go); it calls lib's ring and
  retry_later, so it names lib, which comes with it.

  Per partition and consumer group, four keys (see docs/internals.md):
    fq     hash   the groups' states and queues:
                    <group>              -> the state, "f,r,h,t,ph,pt,d,P,tat":
                      f    messages in flight: picked into the redelivery
                           stream and not yet settled, or waiting in the retry
                           set (a retry keeps its slot until it is due again)
                      r    0 out of the ring, 1 in it, 2 asleep in fwait
                      h,t  the queue: fields <group>\0<h> .. <group>\0<t-1>
                      ph,pt the high-priority queue: <group>\0p<ph> .. \0p<pt-1>
                      d    index of the fresh message a keep-last-if-active
                           group keeps queued (-1: none)
                      P    1 while the group is in fprio
                      tat  the rate limiter's theoretical arrival time (ms, GCRA)
                  <group>\0<i>, <group>\0p<i> -> attempt (8 hex digits) .. encoded message
                  \0n                  -> messages queued in all groups
    ring   list   groups that may be served now, each at most once (r = 1)
    fprio  list   groups with high-priority messages queued, each at most once (P = 1)
    fwait  zset   groups over their rate limit -> when they may go on (ms);
                  idle groups whose limiter has not caught up -> when it has

  A group's name never holds a control character (SetGroup refuses them),
  so "\0" separates its fields; a keep-last-if-active group is "\1" and the
  business key: cap 1, no rate limit, and at most one fresh message queued,
  replaced by each newer one. Membership of ring and fprio is removed
  lazily: the pick drops a group it finds it may not serve. A group's state
  is deleted once it holds nothing and its rate limiter has caught up, so
  the hash holds only active groups. Every key is fixed per partition and
  consumer group: the scripts declare them all, whatever the groups.
]]

-- Opens a consumer group's fair queues; the per-group cap (gcap) and rate
-- ("n/per ms", grate) come from the group's meta hash, written by its
-- subscribers (init.lua). gv is set once a subscriber of the group reads
-- grouped messages.
local function fair_open(fq, ring, fprio, fwait, meta)
  local p = redis.call('HMGET', meta, 'gcap', 'grate', 'gv')
  local n, per = string.match(p[2] or '', '^(%d+)/(%d+)$')
  return {fq = fq, ring = ring, fprio = fprio, fwait = fwait, cap = tonumber(p[1]) or 0,
    rn = tonumber(n) or 0, rper = tonumber(per) or 0, gv = p[3] == '1',
    st = {}, dq = 0, rang = false}
end

local function fair_debounce(g) return string.byte(g, 1) == 1 end

local function fair_cap(c, g)
  if fair_debounce(g) then return 1 end
  return c.cap
end

-- A group's state, read once per script and written back by fair_close.
local function fair_get(c, g)
  local s = c.st[g]
  if not s then
    s = {0, 0, 0, 0, 0, 0, -1, 0, 0}
    local v = redis.call('HGET', c.fq, g)
    if v then
      local i = 0
      for x in string.gmatch(v, '[^,]+') do
        i = i + 1
        s[i] = tonumber(x)
      end
    end
    c.st[g] = s
  end
  return s
end

local function fair_queued(s) return s[4] - s[3] + s[6] - s[5] end

local function fair_open_slot(c, g, s)
  local cap = fair_cap(c, g)
  return cap == 0 or s[1] < cap
end

-- Puts a group that may be served in the ring (and in fprio when it has
-- high-priority messages), unless it is there or asleep.
local function fair_place(c, g, s)
  if s[2] == 2 or fair_queued(s) == 0 or not fair_open_slot(c, g, s) then
    return
  end
  if s[2] == 0 then
    if s[9] > 0 then
      -- an idle group's wait for its limiter to catch up ends (fair_close)
      redis.call('ZREM', c.fwait, g)
    end
    redis.call('RPUSH', c.ring, g)
    s[2] = 1
    c.rang = true
  end
  if s[8] == 0 and s[6] > s[5] then
    redis.call('RPUSH', c.fprio, g)
    s[8] = 1
    c.rang = true
  end
end

-- Queues a message in its group: where is "fresh" (a message that fell
-- due), "back" (a dead letter requeued), "front" (a retry or a message
-- handed back: next in its group) or "prio" (a high-priority message:
-- before the group's others, in due order among its kind). A
-- keep-last-if-active group's fresh message takes the place of the fresh
-- one it keeps queued, if any.
local function fair_push(c, g, attempt, body, where)
  local s = fair_get(c, g)
  local v = string.format('%08x', attempt) .. body
  local fresh = where == 'fresh' and fair_debounce(g)
  if fresh and s[7] >= 0 then
    redis.call('HSET', c.fq, g .. '\0' .. s[7], v)
    return
  end
  if where == 'prio' then
    redis.call('HSET', c.fq, g .. '\0p' .. s[6], v)
    s[6] = s[6] + 1
  elseif where == 'front' then
    s[3] = s[3] - 1
    redis.call('HSET', c.fq, g .. '\0' .. s[3], v)
  else
    redis.call('HSET', c.fq, g .. '\0' .. s[4], v)
    if fresh then s[7] = s[4] end
    s[4] = s[4] + 1
  end
  c.dq = c.dq + 1
  fair_place(c, g, s)
end

-- Gives a group's slot back: its message left the redelivery stream's
-- pending list (acked, dead, handed back) or its retry fell due.
local function fair_release(c, g)
  local s = fair_get(c, g)
  if s[1] > 0 then s[1] = s[1] - 1 end
  fair_place(c, g, s)
end

-- Takes the head of a group's high-priority (hp) or plain queue: its
-- attempt and body, nil when the field is gone.
local function fair_pop(c, g, s, hp)
  local field
  if hp then
    field = g .. '\0p' .. s[5]
    s[5] = s[5] + 1
  else
    field = g .. '\0' .. s[3]
    if s[7] == s[3] then s[7] = -1 end
    s[3] = s[3] + 1
  end
  local v = redis.call('HGET', c.fq, field)
  c.dq = c.dq - 1
  if not v then
    return nil
  end
  redis.call('HDEL', c.fq, field)
  return tonumber(string.sub(v, 1, 8), 16), string.sub(v, 9)
end

-- GCRA: whether group g may take a message at now (ms), charging it if
-- so. Over its rate, a group in the ring (sleep) goes to fwait until it
-- may go on.
local function fair_rate(c, g, s, now, sleep)
  if c.rn == 0 or fair_debounce(g) then
    return true
  end
  local e = c.rper / c.rn
  local tat = math.max(s[9], now)
  if tat - (c.rper - e) > now then
    if sleep then
      redis.call('ZADD', c.fwait, math.ceil(tat - (c.rper - e)), g)
      s[2] = 2
    end
    return false
  end
  s[9] = tat + e
  return true
end

-- Puts up to count groups whose rate limit lets them go on at now (ms)
-- back in the ring (an idle group there only waited for its limiter to
-- catch up: fair_close deletes it). Returns when the next one may go on
-- (ms; -1: none).
local function fair_wake(c, now, count)
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', c.fwait, '-inf', now, 'LIMIT', '0', count)) do
    redis.call('ZREM', c.fwait, g)
    local s = fair_get(c, g)
    if s[2] == 2 then
      s[2] = 0
      fair_place(c, g, s)
    end
  end
  return tonumber(redis.call('ZRANGE', c.fwait, '0', '0', 'WITHSCORES')[2]) or -1
end

-- Moves up to count (at most 256) messages round-robin across the groups into the
-- redelivery stream rstream (fields m, a, k = the group), each a slot of
-- its group: high-priority ones first, then one group per turn of the ring
-- (a group served goes to the back; one that may not be served is dropped
-- from it), at most one message per capped group per call (the ring came
-- round to a capped group a second time: a full lap). At most 4 * count ring moves and count
-- wake-ups: bounded work whatever the number of groups. Returns the
-- messages moved, whether groups are left to serve, and the ms at which
-- the first group asleep under its rate limit wakes (-1: none).
local function fair_pick(c, rstream, count, now)
  -- a bounded call whatever the batch asked for: more is taken next call
  count = math.min(count, 256)
  fair_wake(c, now, count)
  local taken, moves, maxMoves = 0, 0, 4 * count
  local served = {}
  local function take(g, s, hp)
    local attempt, body = fair_pop(c, g, s, hp)
    if body then
      redis.call('XADD', rstream, '*', 'm', body, 'a', attempt, 'k', g)
      s[1] = s[1] + 1
      taken = taken + 1
    end
    served[g] = true
  end
  while taken < count and moves < maxMoves do
    local g = redis.call('LPOP', c.fprio)
    if not g then break end
    moves = moves + 1
    local s = fair_get(c, g)
    s[8] = 0
    if s[6] > s[5] and s[2] ~= 2 and fair_open_slot(c, g, s) and fair_rate(c, g, s, now, false) then
      take(g, s, true)
      if s[6] > s[5] and fair_open_slot(c, g, s) then
        redis.call('RPUSH', c.fprio, g)
        s[8] = 1
      end
    end
  end
  local lapped = {} -- groups the ring came round to in this call
  while taken < count and moves < maxMoves do
    local g = redis.call('LMOVE', c.ring, c.ring, 'LEFT', 'RIGHT')
    if not g then break end
    moves = moves + 1
    local s = fair_get(c, g)
    local capped = fair_cap(c, g) > 0
    if lapped[g] and capped then
      break -- a full lap
    end
    lapped[g] = true
    local stay = false
    if served[g] and capped then
      -- served from fprio in this call: it keeps its turn for the next
      stay = fair_queued(s) > 0 and fair_open_slot(c, g, s)
    elseif fair_queued(s) > 0 and fair_open_slot(c, g, s) and fair_rate(c, g, s, now, true) then
      take(g, s, s[6] > s[5])
      stay = fair_queued(s) > 0 and fair_open_slot(c, g, s)
    end
    if not stay then
      redis.call('RPOP', c.ring)
      if s[2] == 1 then s[2] = 0 end
    end
  end
  local wake = redis.call('ZRANGE', c.fwait, '0', '0', 'WITHSCORES')[2]
  local more = redis.call('LLEN', c.ring) > 0 or redis.call('LLEN', c.fprio) > 0
  return taken, more, tonumber(wake) or -1
end

-- Writes back the states touched (deleting those of groups holding nothing
-- whose limiter caught up), the queued count, and rings the partition's
-- bell when a group may be served.
local function fair_close(c, bell, now)
  for g, s in pairs(c.st) do
    local idle = s[1] == 0 and s[2] == 0 and s[8] == 0 and fair_queued(s) == 0
    if idle and s[9] <= now then
      redis.call('HDEL', c.fq, g)
    else
      redis.call('HSET', c.fq, g, string.format('%d,%d,%d,%d,%d,%d,%d,%d,%.3f', unpack(s)))
      if idle then
        -- its limiter catches up then: fair_wake reads it, and this
        -- deletes it, so idle groups leave nothing behind
        redis.call('ZADD', c.fwait, math.ceil(s[9]), g)
      end
    end
  end
  if c.dq ~= 0 and redis.call('HINCRBY', c.fq, '\0n', c.dq) <= 0 then
    redis.call('HDEL', c.fq, '\0n')
  end
  if c.rang then
    ring_groups(bell)
  end
  c.st, c.dq, c.rang = {}, 0, false
end

-- Queues a settled grouped message again: with no delay at the front of
-- its group, its slot given back; else in the retry set, its member naming
-- the group, the slot kept until it is due (promote.lua then queues it at
-- the front), so a cap of 1 keeps the group's order through retries.
local function fair_retry(c, retry, rbodies, wake, g, id, attempt, delay, body)
  if delay <= 0 then
    fair_release(c, g)
    fair_push(c, g, attempt, body, 'front')
    return
  end
  retry_later(retry, rbodies, wake, attempt .. ':g' .. id .. ':' .. g, delay, body)
end
