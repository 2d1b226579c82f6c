#!lua flags=allow-oom
-- include: clock, lib, lazy fair
--[[
  promote: one scheduler tick of a topic. It first takes or extends the
  topic's scheduling lease: only the scheduler holding it promotes, the
  others stand by until it expires or is released. The holder then moves due
  messages to where consumers read them, atomically: the topic's waiting set
  into the ready stream (releasing their business keys), and each listed
  consumer group's retry set into that group's redelivery stream. A due
  high-priority message goes to the
  redelivery stream of every listed group instead (as attempt 1), which
  subscribers read before the ready stream; with no group listed, to the
  ready stream. A call adds a bounded number of stream entries, so a
  message fanned out to more groups than that goes over several calls
  (KEYS[9]), each finishing the one in progress before others move. The
  lease only saves work: a message is
  moved exactly once even when several schedulers call this at once.
  A due grouped message (listed in grpof) goes to the end of its group's
  queue in each listed consumer group instead (fair.lua; a consumer group
  whose subscribers do not read groups yet, meta field gv unset, gets it
  in its redelivery stream), counting one entry per consumer group; a due
  retry of a grouped message goes to the front of its group's queue and
  gives its slot back. A group asleep under its rate limit is put back in
  its consumer group's ring when it may go on, and counts as the earliest
  due time until then.
  Flagged allow-oom: it runs at maxmemory, since moving due messages on is
  what lets them be acknowledged and trimmed, freeing memory.

  KEYS[1] lease    string owner of the topic's scheduling (expires)
  KEYS[2] groups   set    consumer groups of the topic (only counted)
  KEYS[3] waiting  zset   message UUID -> due score
  KEYS[4] bodies   hash   message UUID -> encoded message
  KEYS[5] stream   stream the topic's ready stream
  KEYS[6] bkeys    hash   business key -> UUID of the waiting message holding it
  KEYS[7] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[8] prio     hash   UUIDs of the waiting high-priority messages -> 1
  KEYS[9] fanout   hash   the high-priority message being fanned out over
                          several calls: m = encoded message, id = UUID,
                          and each redelivery stream given a copy -> 1
  KEYS[10] bell    string the partition's bell, rung when entries were
                          added (see lib.lua's ring)
  KEYS[11] grpof   hash   UUID of a waiting grouped message -> its group
  KEYS[12] gorphan zset   grouped messages that fell due while the topic had
                          no consumer group -> their score (bodies and grpof
                          kept): they wait for the first consumer group,
                          then move back to the waiting set, a bounded
                          number per call
  then for each consumer group g = 1, 2, ..., eight keys:
  KEYS[8g+5]  retry    zset   "<attempt>:<m|r><entry id>" or, for a grouped
                              message, "<attempt>:g<entry id>:<group>" -> due score
  KEYS[8g+6]  rbodies  hash   same member -> encoded message
  KEYS[8g+7]  rstream  stream the group's redelivery stream, fields m, a (attempt)
  KEYS[8g+8]  meta     hash   the group's policy (gv, per-group cap)
  KEYS[8g+9]  fq       hash   the group's fair queues (see fair.lua)
  KEYS[8g+10] fring    list   the group's ring of groups to serve
  KEYS[8g+11] fprio    list   the group's groups with high-priority messages
  KEYS[8g+12] fwait    zset   the group's groups asleep under their rate limit:
                              put back in the ring when they may go on (so the
                              scheduler wakes for them, ringing the bell)
  and last:
  KEYS[#KEYS-1] far   zset   far bucket number -> when to unpack it (ms): see far.go
  KEYS[#KEYS] fz      zset   the same for the far tier's format 2
  ARGV[1]  most stream entries added per call from the waiting set (a
           high-priority message adds one per group), and as many from the
           retry sets of all groups together
  ARGV[2]  owner: a unique id of the calling scheduler
  ARGV[3]  lease time in ms
  ARGV[4]  "0" when the caller must not take a free lease (it holds its
           share of the topic's partitions already), "1" otherwise
  ARGV[5]  "1" to extend the lease the caller holds (it does so a few times
           per lease time, not at every call: a write saved per tick), "0"
           to leave its expiry
  ARGV[6]  optional: the note the bell is rung with (lib.lua's ring); a
           subscription reading right after this call in the same
           pipeline names itself so (store.ReadArgs.Promote)

  Returns {moved, wait, missing, groups, held, far, format}:
    moved    messages moved
    wait     held: µs until the earliest message still waiting is due;
             0 when more is due than the call moved; -1 when all sets are empty.
             Not held: µs until the lease expires; -1 when it is free (and the
             caller was not to take it).
    missing  members that had no body (dropped from the set; reported by the caller)
    groups   number of consumer groups registered for the topic (a caller
             whose list differs reads the set again)
    held     1 when the caller holds the lease (and promoted), 0 otherwise
    far      held: the number of the far bucket due for unpacking (the
             caller unpacks it, unpack.lua), -1 when none is; wait counts
             the time until the next one is
    format   that bucket's format (1: KEYS[#KEYS-1], 2: KEYS[#KEYS])
]]
local lease, groups, waiting, bodies, stream = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local bkeys, bkeyof, prio, fanout, bell = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local grpof, gorphan = KEYS[11], KEYS[12]
local limit, owner, leaseMs, mayTake, extend, note = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local ngroups = redis.call('SCARD', groups)
local holder = redis.call('GET', lease)
if holder and holder ~= owner then
  return {0, redis.call('PTTL', lease) * 1000, 0, ngroups, 0, -1, 0}
end
if not holder and mayTake == '0' then
  return {0, -1, 0, ngroups, 0, -1, 0}
end
if not holder or extend == '1' then
  redis.call('SET', lease, owner, 'PX', leaseMs)
end

local nowUs = now_us()
local now = math.floor(nowUs / 1000)
local maxScore = now * 1024 + 1023
local moved, missing, wait = 0, 0, -1
local added = false -- stream entries were added: ring the bell
-- A tick seldom finds these keys: grouped messages kept for a consumer
-- group to come, a fan-out in progress, the far tier's two schedules. One
-- EXISTS over the four tells the common case (none) apart: each command a
-- script calls costs Redis a few µs of its own, more than what it looks up
-- (callgrind: a tick moving two messages took 16% fewer instructions, an
-- idle one 20%).
local far1, far2 = KEYS[#KEYS - 1], KEYS[#KEYS]
local rare = redis.call('EXISTS', gorphan, fanout, far1, far2) > 0

local function earlier(w)
  if wait < 0 or w < wait then wait = w end
end

-- Each closure the top level makes costs Redis at every call, more the
-- more of the top level's locals it shares (each an upvalue made, looked
-- up and collected again): the helper that moved a set, sharing 26 of
-- them, was an eighth of an idle tick's instructions (callgrind). So the
-- tick's moves run in its top level, and the helpers below share none or
-- few of its locals.

-- The stream entries a call may add: limit for the waiting set (a
-- high-priority message costs one per group), limit for the retry sets of
-- all groups together. A call's work is bounded so, whatever the backlog
-- or the number of groups; the caller calls again at once when told
-- (wait 0).
local budget, rbudget = limit, limit
-- Grouped copies cost several commands each (fair.lua): at most this many
-- a call, whatever the batch, so a call stays short.
local gbudget = math.min(limit, 256)

-- A listed consumer group g's keys are KEYS[k + <offset>], k = 13 + 8 (g - 1)
-- (see the header): retry 0, rbodies 1, rstream 2, meta 3, fq 4, fring 5,
-- fprio 6, fwait 7.

-- the redelivery streams of the listed groups, for high-priority messages
local rstreams = {}
for k = 13, #KEYS - 9, 8 do -- the last two keys: far, fz
  rstreams[#rstreams + 1] = KEYS[k + 2]
end

-- The fair queues of the listed groups (fair.lua), opened when needed:
-- fair.lua's helpers too (use_fair), which most ticks do not need.
local fairs = {}
local function fair_of(g)
  local c = fairs[g]
  if not c then
    use_fair()
    local k = 13 + 8 * (g - 1)
    c = fair_open(KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7], KEYS[k + 3])
    fairs[g] = c
  end
  return c
end

-- Goes on with the fan-out of the high-priority message in the fanout
-- hash (if any): a copy to each listed group (rstreams) that has none yet,
-- as far as the budget (stream entries) allows. Each copy and its mark in
-- the hash are written together, so a scheduler that dies between calls
-- leaves nothing lost or doubled: the next call, by any scheduler, goes on
-- from the marks. Returns whether no fan-out is left, the budget left and
-- whether it added stream entries.
local function resume_fanout(fanout, rstreams, stream, budget)
  local body = redis.call('HGET', fanout, 'm')
  if not body then
    return true, budget, false
  end
  if #rstreams == 0 then
    -- every group is gone: where a high-priority message with no group goes,
    -- unless some group has its copy already
    local added = false
    if redis.call('HLEN', fanout) <= 2 then
      redis.call('XADD', stream, '*', 'm', body)
      added = true
    end
    redis.call('DEL', fanout)
    return true, budget, added
  end
  local added = false
  for _, rs in ipairs(rstreams) do
    if redis.call('HEXISTS', fanout, rs) == 0 then
      if budget == 0 then
        return false, budget, added
      end
      redis.call('XADD', rs, '*', 'm', body, 'a', '1')
      redis.call('HSET', fanout, rs, '1')
      budget = budget - 1
      added = true
    end
  end
  redis.call('DEL', fanout)
  return true, budget, added
end

-- Bodies fetched per HMGET while moving: a call per message costs Redis
-- more than the lookup itself; a whole batch of bodies (up to a megabyte
-- each) at once would all be in Lua's memory.
local BODIES = 32
-- How many members of a set one read at its head takes: enough for the
-- due messages of a tick at a steady rate, and the head after them, in
-- one command.
local PROBE = 4
-- (PROBE - 1 as a string: a number passed to redis.call is formatted with
-- %.17g, a cost of its own at every tick)
local PROBE_LAST = '3'

-- grouped messages kept while the topic had no consumer group go back to
-- the waiting set, due (moved on below), a bounded number per call
if rare and #rstreams > 0 and redis.call('EXISTS', gorphan) == 1 then
  local back = redis.call('ZRANGE', gorphan, '0', math.min(limit, 1000) - 1, 'WITHSCORES')
  local z = {}
  for i = 1, #back, 2 do
    z[#z + 1] = back[i + 1]
    z[#z + 1] = back[i]
  end
  redis.call('ZADD', waiting, unpack(z))
  redis.call('ZREMRANGEBYRANK', gorphan, '0', #back / 2 - 1)
  earlier(0)
end

-- Pass 0 moves the waiting set (after a fan-out in progress, if any), the
-- next ones each group's retry set, in turn from one that changes with
-- time, so none waits behind the others' backlogs for long.
local ng = #rstreams
local first = nowUs % math.max(ng, 1)
for pass = 0, ng do
  -- set: the set whose due messages move, oldest first, while the budget
  -- lasts, their bodies in hash, to the stream dest; retry: the number of
  -- the group whose retry set it is (nil: the waiting set)
  local set, hash, dest, retry, busy
  if pass == 0 then
    local finished, a = true, false
    if rare then
      finished, budget, a = resume_fanout(fanout, rstreams, stream, budget)
      added = added or a
    end
    if finished then
      set, hash, dest = waiting, bodies, stream
    else
      earlier(0)
    end
  else
    retry = (first + pass - 1) % ng + 1
    local k = 13 + 8 * (retry - 1)
    -- most groups have neither retries nor groups asleep: one EXISTS for both
    busy = redis.call('EXISTS', KEYS[k], KEYS[k + 7]) > 0
    if busy then
      set, hash, dest = KEYS[k], KEYS[k + 1], KEYS[k + 2]
    end
  end
  if set then repeat
    -- the head alone tells an idle set (the common case) apart cheaply; at
    -- a steady rate the first few members are the tick's due messages and
    -- the next head
    local left = retry and rbudget or budget
    local probe = redis.call('ZRANGE', set, '0', PROBE_LAST, 'WITHSCORES')
    if not probe[1] then
      break
    end
    local head = tonumber(probe[2])
    if head > maxScore then
      earlier(math.floor(head / 1024) * 1000 - nowUs)
      break
    end
    if left == 0 then
      earlier(0)
      break
    end
    -- the due members of the probe, and the score of the first one not due
    -- (nil: all are due); whole: the probe read the whole set
    local ids, after = {}, nil
    for i = 1, #probe, 2 do
      if tonumber(probe[i + 1]) > maxScore then
        after = tonumber(probe[i + 1])
        break
      end
      ids[#ids + 1] = probe[i]
    end
    local whole = after == nil and #probe < 2 * PROBE
    if after == nil and not whole then
      -- more may be due than the probe took
      ids = redis.call('ZRANGEBYSCORE', set, '-inf', maxScore, 'LIMIT', '0', string.format('%d', left))
    elseif #ids > left then
      ids = {unpack(ids, 1, left)}
      after, whole = nil, false
    end
    local high, grouped = {}, {}
    -- only when something is due: an idle tick stays at the head check;
    -- one EXISTS tells the common case (none of the three) apart
    local flags = 0
    if not retry then
      flags = redis.call('EXISTS', prio, grpof, bkeyof)
    end
    -- (hash_fields: these hashes are often small, listpacks)
    local nHigh, nGrouped, prioOf = 0, 0, {}
    if flags > 0 and redis.call('EXISTS', prio) == 1 then
      prioOf, nHigh = hash_fields(prio, ids)
      for k = 1, #ids do
        high[k] = prioOf[k] == '1'
      end
    end
    if flags > 0 and redis.call('EXISTS', grpof) == 1 then
      grouped, nGrouped = hash_fields(grpof, ids)
    end
    local anyGrouped = nGrouped > 0
    local found, base = {}, 0 -- bodies of ids[base + 1 ..], BODIES at a time
    -- n: how many of ids (the first) leave the set in this call
    local n = 0
    local orphans, kept = {}, {} -- grouped messages with no consumer group (gorphan)
    for k, id in ipairs(ids) do
      local gk = grouped[k]
      -- a grouped message takes an entry per group: it waits for the next
      -- call unless it is the call's first
      if left == 0 or (gk and (#rstreams > left or #rstreams > gbudget) and left < limit) then
        break
      end
      n = k
      if k > base + #found then
        found, base = redis.call('HMGET', hash, unpack(ids, k, math.min(k + BODIES - 1, #ids))), k - 1
      end
      local body = found[k - base]
      if body then
        local ga, gg = nil, nil
        if retry then
          ga, gg = string.match(id, '^(%d+):g[^:]*:(.*)$')
        end
        if gg then
          local c = fair_of(retry)
          fair_release(c, gg)
          fair_push(c, gg, tonumber(ga), body, 'front')
          left = left - 1
        elseif retry then
          redis.call('XADD', dest, '*', 'm', body, 'a', string.match(id, '^(%d+):'))
          left = left - 1
        elseif gk and #rstreams > 0 then
          for g, rs in ipairs(rstreams) do
            local c = fair_of(g)
            if c.gv then
              local where = 'fresh'
              if high[k] and string.byte(gk, 1) ~= 1 then where = 'prio' end
              fair_push(c, gk, 1, body, where)
            else
              redis.call('XADD', rs, '*', 'm', body, 'a', '1')
            end
          end
          left = math.max(left - #rstreams, 0)
          gbudget = gbudget - #rstreams
        elseif gk then
          -- no consumer group to queue it for: it waits for the first
          orphans[#orphans + 1] = redis.call('ZSCORE', set, id)
          orphans[#orphans + 1] = id
          kept[id] = true
          moved = moved - 1
        elseif high[k] and #rstreams > 0 then
          if #rstreams <= left then
            for _, rs in ipairs(rstreams) do
              redis.call('XADD', rs, '*', 'm', body, 'a', '1')
            end
            left = left - #rstreams
          else
            -- too many groups for this call: fanned out over the next ones
            redis.call('HSET', fanout, 'm', body, 'id', id)
            resume_fanout(fanout, rstreams, stream, left)
            left = 0
          end
        else
          redis.call('XADD', dest, '*', 'm', body)
          left = left - 1
        end
        moved = moved + 1
        added = true
      else
        missing = missing + 1
      end
    end
    if retry then rbudget = left else budget = left end
    if n == 0 then
      -- the first due message is grouped and takes more stream entries than
      -- the call has left (a fan-out took some): it goes first in the next
      -- call, which has them all. Nothing leaves the set (and ZREMRANGEBYRANK
      -- 0 -1 would empty it).
      earlier(0)
      break
    end
    local done = ids
    if n < #ids then
      done = {unpack(ids, 1, n)}
    end
    -- the bodies (and flags) of the messages moved; those kept for a
    -- consumer group to come keep theirs
    local gone = done
    if #orphans > 0 then
      redis.call('ZADD', gorphan, unpack(orphans))
      gone = {}
      for _, id in ipairs(done) do
        if not kept[id] then gone[#gone + 1] = id end
      end
    end
    if #gone > 0 then
      redis.call('HDEL', hash, unpack(gone))
      -- the flags of those that have them only: HDEL, too, scans a listpack
      -- once per field
      if nHigh > 0 or anyGrouped then
        local isGone, highGone, groupedGone = {}, {}, {}
        for _, id in ipairs(gone) do
          isGone[id] = true
        end
        for k, id in ipairs(ids) do
          if isGone[id] then
            if prioOf[k] then highGone[#highGone + 1] = id end
            if grouped[k] then groupedGone[#groupedGone + 1] = id end
          end
        end
        if #highGone > 0 then
          redis.call('HDEL', prio, unpack(highGone))
        end
        if #groupedGone > 0 then
          redis.call('HDEL', grpof, unpack(groupedGone))
        end
      end
    end
    -- messages leaving the waiting set release their business keys; the
    -- reverse hash exists only while a waiting message holds one
    if flags > 0 and redis.call('EXISTS', bkeyof) == 1 then
      local held, nHeld = hash_fields(bkeyof, done)
      local freed = {}
      for k, key in ipairs(held) do
        if key and redis.call('HGET', bkeys, key) == done[k] then
          freed[#freed + 1] = key
        end
      end
      if nHeld > 0 then
        redis.call('HDEL', bkeyof, unpack(fields_set(done, held)))
      end
      if #freed > 0 then
        redis.call('HDEL', bkeys, unpack(freed))
      end
    end
    redis.call('ZREMRANGEBYRANK', set, '0', string.format('%d', n - 1))
    if n < #ids or left == 0 then
      earlier(0)
      break
    end
    if after == nil and not whole then
      after = redis.call('ZRANGE', set, '0', '0', 'WITHSCORES')[2]
    end
    if after then
      local w = math.floor(tonumber(after) / 1024) * 1000 - nowUs
      if w < 0 then w = 0 end
      earlier(w)
    end
  until true end
  -- groups asleep under the rate limit: the head alone, as for the sets
  local sleeper = busy and redis.call('ZRANGE', KEYS[13 + 8 * (retry - 1) + 7], '0', '0', 'WITHSCORES')[2]
  if sleeper then
    local w = tonumber(sleeper) * 1000 - nowUs
    if w <= 0 then
      -- (fair_of first: it makes fair_wake)
      local c = fair_of(retry)
      w = fair_wake(c, now, limit)
      if w >= 0 then w = math.max(w * 1000 - nowUs, 0) end
    end
    if w >= 0 then earlier(w) end
  end
end
for _, c in pairs(fairs) do
  fair_close(c, bell, now)
end
-- the far tier's next bucket to unpack
-- (format 1's first: it holds what processes of the previous version wrote)
local far, farFormat = -1, 0
for f = 1, rare and 2 or 0 do
  local fhead = redis.call('ZRANGE', f == 1 and far1 or far2, '0', '0', 'WITHSCORES')
  if fhead[1] then
    local w = tonumber(fhead[2]) * 1000 - nowUs
    if w > 0 then
      earlier(w)
    elseif far < 0 then
      far, farFormat = tonumber(fhead[1]), f
    end
  end
end
if added then
  ring(bell, note)
end
return {moved, wait, missing, ngroups, 1, far, farFormat}
