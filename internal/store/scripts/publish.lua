-- include: clock, lib, lazy fair, farmark, lazy fpindex
--[[
  publish: stores the messages of one or more Publish calls to a topic.
  Each call is atomic on its own: all of its messages are stored, or none.
  Due messages are appended to the ready stream; delayed ones go into the
  waiting set, their encoded bodies into the hash beside it. A high-priority
  message always goes into the waiting set (due now when not delayed), so
  the scheduler hands it to each consumer group's redelivery stream, which
  subscribers read first; it counts as waiting in every respect. So does a
  grouped message (SetGroup, or the keep-last-if-active policy), which the
  scheduler queues in its group (fair.lua); grpof names its group. An
  immediate grouped message is queued in its group in each consumer group
  at once instead, when the caller lists the topic's consumer groups
  (ARGV[8..]), the list is right, and nothing due waits for the scheduler
  (it would overtake it).

  KEYS[1] waiting  zset   message UUID -> score (due ms * 1024 + sequence)
  KEYS[2] bodies   hash   message UUID -> encoded message
  KEYS[3] stream   stream ready messages, field m = encoded message
  KEYS[4] seq      string counter that keeps equal due times in publish order
  KEYS[5] bkeys    hash   business key -> UUID of the waiting message holding
                          it; a value beginning with "\0" (farmark.lua's
                          far_mark) while that message is in the far tier
  KEYS[6] bkeyof   hash   UUID of a waiting message -> its business key
  KEYS[7] prio     hash   UUID of a waiting high-priority message -> 1
  KEYS[8] reg      string set by the first publish: gone, Redis lost the topic registry too
  KEYS[9] dormant  string set while no scheduler loop runs for the partition (idle.lua)
  KEYS[10] far     zset   far bucket number -> when to unpack it (ms), of the
                          far tier's format 2 (:fz): see far.go
  KEYS[11] fmeta   hash   far tier counters: n (both formats), P:<bucket>,
                          L:<bucket> (format 2's); the far filter's (fm,
                          fb, fi, fr, fj, and fs and fq: its selectors'
                          and the rebuilt one's mode, 3 or absent)
  KEYS[12] bell    string the partition's bell, rung when ready entries were
                          added (see lib.lua's ring)
  KEYS[13] grpof   hash   UUID of a waiting grouped message -> its group
  KEYS[14] cgroups set    consumer groups of the topic (only read)
  KEYS[15] ff      string the far filter (farfilter.go): fmeta's fm, fb, fi
  KEYS[16] ffn     string the far filter being rebuilt: fmeta's fr, fj
  then for each consumer group listed (ARGV[9..]), six keys:
  KEYS[6g+11] meta     hash   its policy (gv, per-group cap)
  KEYS[6g+12] fq       hash   its fair queues (see fair.lua)
  KEYS[6g+13] fring    list   its ring of groups to serve
  KEYS[6g+14] fprio    list   its groups with high-priority messages
  KEYS[6g+15] fwait    zset   its groups asleep under their rate limit
  KEYS[6g+16] rstream  stream its redelivery stream (for a group whose
                              subscribers do not read groups: gv unset)
  then the far index shards and far buckets the messages and splits name,
  and the format 3 index's side table (far3.go) when it is written (below)
  ARGV[1]          wake channel, published to when the earliest due time moves
                   earlier, or a message is stored in a dormant partition
  ARGV[2]          most waiting messages (ZCARD waiting) a call may leave; 0: no bound
  ARGV[3]          most ready entries (XLEN stream) a call may leave; 0: no bound
  ARGV[4]          number of calls, c
  ARGV[5]          far margin, ms: a message goes to a far bucket only when
                   the bucket is unpacked later than now + this
  ARGV[6]          far bucket width, ms
  ARGV[7]          far slack, ms: how far outside its bucket a message may be
                   due (the caller chose the bucket by its own clock); less
                   than a quarter of the width and than the unpacking lead, so
                   it is never unpacked after it is due, and Inspector's merge
                   (which reads one bucket more) keeps due order
  ARGV[8]          number of consumer groups listed, n (0: none; then every
                   grouped message waits for the scheduler)
  ARGV[9..8+n]     the consumer groups listed
  ARGV[8+n+k]      number of messages of call k (k = 1..c)
  ARGV[9+n+c]      the caller's far filter selectors (farfilter.go): 3 when
                   ARGV[j+12] is fpSel's (as a process writing format 3
                   has them), else 2 (farSel's, as releases up to 0.2.0)
  ARGV[10+n+c]     the far filter's size in bits as the caller knows it (a
                   run's reply; 0 for none): a message only looked up
                   (ARGV[j+7] 0) then comes with its bit in ARGV[j+12]
  ARGV[11+n+c]     the format 3 index's L as the caller knows it (far3.go;
                   :fmeta's iL), 0 for none: then thirteen arguments per
                   message, else fifteen (ARGV[j+13..14]) and the index
                   arguments below; fpMinLevel (11) when the caller knows
                   none and may store format 3
  and with an L (none: the messages' arguments follow):
  ARGV[12+n+c]     1 when the far messages are stored in format 3 (far3.go),
                   0 for format 2
  ARGV[13+n+c]     the index's split pointer S as the caller knows it
  ARGV[14+n+c]     the number of index splits the caller gives keys for, s
  ARGV[15+n+c]     index in KEYS of the index's side table (:fic); 0 with
                   format 2
  ARGV[16+n+c]     index in KEYS of the index's side table of business keys
                   (:fkc); 0 when no message has a business key
  ARGV[17+n+c..]   per split, in order from the caller's L and S: indexes in
                   KEYS of the shard split and of the shard 2^L above it
                   (far3.go's splits). A run storing format 3 splits shards
                   while the tier holds more than fpPerShard (48) messages
                   per shard, when it finds the L and S the caller gave.
  then per message, the calls' messages in call order:
  ARGV[j]          message UUID
  ARGV[j+1]        delay in ms from now (Redis server time); <= 0 means ready now
  ARGV[j+2]        encoded message
  ARGV[j+3]        business key: '' for none, else the policy's letter (the
                   table businessKeyPolicies in businesskey.go) and
                   the key: r (reject), k (keep first), x (replace),
                   d (replace, keeping the holder's due time), l (keep last
                   if active: replace while waiting; its group is ARGV[j+11])
  ARGV[j+4]        "1" for a high-priority message, "0" otherwise
  ARGV[j+5]        index in KEYS of the far index shard of the UUID, where a
                   waiting message is looked up first; 0: not looked up (an
                   immediate message, or one due within the far margin: see
                   FarArgOf in far.go)
  ARGV[j+6]        the UUID's field in the far index (farField)
  ARGV[j+7]        index in KEYS of the far bucket the message may go to; 0: none
  ARGV[j+8]        that bucket's number
  ARGV[j+9]        the first due ms of the bucket
  ARGV[j+10]       when the bucket is unpacked (ms)
                   The message goes to the bucket (format 2, far.go) when it
                   has no holder's score and a business key of under 256
                   bytes if any, is due within the bucket give or take the
                   slack (by Redis's clock), and ARGV[j+10] is after now +
                   the margin: the bucket is unpacked later, and before the
                   message is due. Its business key and priority travel in
                   its element; bkeys marks it as a far holder.
  ARGV[j+11]       the message's group ("" for none): it waits, even when
                   due now unless it goes straight to its group (above), and
                   grpof names its group while it waits (in either tier)
  ARGV[j+12]       its selector in the far filter (farfilter.go, of the
                   mode ARGV[9+n+c] says): its bit is this modulo the
                   filter's bits, whatever the format it is or would be
                   stored in; a lookup reads it first (with a trusted
                   filter), and a message stored in the far tier sets it.
                   0 when ARGV[j+5] and ARGV[j+7] are 0. For a message only
                   looked up (ARGV[j+7] 0), with a size in ARGV[10+n+c]:
                   its bit, the selector modulo that size. (Else Lua makes
                   a number of the selector and Redis a string of the bit,
                   with strtod and snprintf in Redis 7.0.)
  ARGV[j+13]       the UUID's fingerprint in the format 3 index ("" when
                   ARGV[j+5] is 0, or when a pull found no far message of
                   the UUID and it is not to be stored in format 3): a
                   lookup reads it there too, and a message stored in
                   format 3 is indexed by it
  ARGV[j+14]       its shards, low a b as big-endian numbers of 4 bytes
                   each (one argument, read only on a maybe or a
                   write: Redis charges each argument, and Lua's tonumber
                   is a strtod): low h mod 2^L, or -1 - h mod 2^L when
                   a pull found no far message of the UUID (its
                   fingerprint's entry is another's: not looked up,
                   indexed when stored); a the
                   index in KEYS of the index shard h mod 2^L, for a
                   message only looked up (not to be stored in format 3)
                   of the shard the caller's S picks: h mod 2^(L+1) when
                   h mod 2^L is below it, else h mod 2^L; b that of the
                   shard h mod 2^(L+1), 0 for a message only looked up
                   (a run that finds S moved past h mod 2^L takes it for
                   a maybe: the pull is exact); then, for a message
                   that may be stored in format 3, 2 bytes more: where its
                   body has Watermill's until key in the form its element
                   derives from the due time (far3.go's farUntilAt), -1
                   for none; "" with an empty ARGV[j+13]
  and with an L, after the messages' arguments, two per message with a
  business key, in message order (a message without one pays nothing):
  ARGV[k]          the key's fingerprint in the format 3 index (far3.go's
                   fpKeyHash): where a holder waiting in format 3 marks it
                   (not in :bkeys), where a message stored in format 3
                   marks it
  ARGV[k+1]        its shards, low a b as for ARGV[j+14] (both shards
                   always: a lookup reads the one S picks), then, when a
                   pull found the place of the key's entry another
                   message's, that place (6 bytes: far3.go's fpLoc less its
                   flag byte), which is then not a maybe

  Returns {-1, L, S, F} when the caller's L (ARGV[11+n+c]) is not the
  format 3 index's and a message is looked up or may be stored in format 3,
  or when a message is looked up and the caller's far filter size
  (ARGV[10+n+c]) is not 0 and not F, the size of the filter a lookup may
  trust: nothing is done, the caller sends the run again with L and F.
  Else one status per call, in call order, then 1 when KEYS[8] was
  missing (the caller registers the topic again), else 0, then 1 when an
  immediate grouped message found the consumer groups listed wrong (it
  waited for the scheduler: the caller reads the list again), else 0, then
  F (0: no filter a lookup may trust at the caller's selectors), then, when
  the caller gave an L, the index's L and S after the run (L 0: none). A
  status:
    0                          its messages are stored (or dropped: keep first)
    {'pull', UUID, ...}        messages of the call, or holders of its
                               business keys that it replaces, are waiting
                               in the far tier: the caller moves them to the
                               waiting set
                               (farpull.lua, which looks each up) and sends
                               the call again, so they are compared there like
                               any waiting message. All of the call's are
                               named, so a retried call is sent twice, not
                               once per message.
    UUID                       one of its messages is already waiting with a
                               different body
    {'pullkey', key, ...}      business keys of the call whose holder may
                               wait in format 3 (the index marks keys, not
                               their holders' UUIDs): the caller finds each
                               holder, moves it to the waiting set, and sends
                               the call again (with the place of an entry
                               that was another's)
    {'key', key, UUID}         reject: a message of the call has a business key
                               held by the waiting message UUID
    {'full', 'waiting'|'ready', count, added}
                               the call would take the partition's waiting
                               set or ready stream, holding count, over its bound
  Only a 0 call stores messages. Calls are checked in order, each seeing the
  calls accepted before it, as if they had run one after another.
  Re-publishing a byte-identical waiting message is a no-op, so a retried
  Publish does not duplicate it.

  Business keys: a waiting message may hold one; no two waiting messages
  hold the same. A message whose key is held by another waiting message
  (or, for an immediate message, by a waiting one of the same UUID) is
  rejected (r), dropped (k), or takes its place (x: the holder is removed;
  d: the same, but the message takes the holder's score, so it is due when
  the holder was, in its place among equal due times; an immediate message
  then waits and holds the key). Other immediate messages never hold a key.

  No allow-oom flag, unlike the scripts that drain (see scripts.go): at
  maxmemory with noeviction, Redis refuses the call at its first write, so
  nothing of it is stored and Publish returns the OOM error.
]]
local waiting, bodies, stream, seq, bkeys, bkeyof = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local prio, reg, dormant, far, fmeta, bell = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local grpof, cgroups, ff, ffn = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local wake, maxWaiting, maxReady, calls = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local farMargin, farWidth, farSlack = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local CHUNK = 500 -- arguments unpacked per variadic call (Lua's stack is limited)
local ng = tonumber(ARGV[8])
local mode3 = ARGV[9 + ng + calls] == '3'
local callerBits = tonumber(ARGV[10 + ng + calls])
local base = 11 + ng + calls
local fpL = tonumber(ARGV[base])
local w3, fpS, nsplit, fic, fkc, first = false, 0, 0, nil, nil, base + 1
local STRIDE = 13 -- arguments per message
if fpL > 0 then
  w3, fpS, nsplit = ARGV[base + 1] == '1', tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  fic = KEYS[tonumber(ARGV[base + 4])]
  fkc = KEYS[tonumber(ARGV[base + 5])]
  first, STRIDE = base + 6 + 2 * nsplit, 15
end
-- the messages' arguments end before last; the keys' (with an L) follow
local last = #ARGV + 1
if fpL > 0 then
  last = first
  for k = 1, calls do
    last = last + STRIDE * tonumber(ARGV[8 + ng + k])
  end
end
-- A message's arguments are ARGV[j + <offset>] (see the header):
local UUID, DELAY, BODY, BKEY, PRIO, FSHARD, FFIELD, FBUCKETKEY, FBUCKET, FSTART, FUNPACK, GROUP, FSEL =
  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
local FP, FPLOC = 13, 14 -- FPLOC: binary (struct.unpack '>i4I4I4[h]')
-- message -> the ARGV index of its business key's fingerprint (with an L)
local kfp = fpL > 0 and {}
-- A listed consumer group's keys are KEYS[k + <offset>], k = 17 + GSTRIDE (i - 1):
local GMETA, GFQ, GFRING, GFPRIO, GFWAIT, GREDO, GSTRIDE = 0, 1, 2, 3, 4, 5, 6

-- Whether immediate grouped messages go straight to their groups: the
-- consumer groups listed are the topic's (listed), and no message is due
-- and not yet moved by the scheduler, so they overtake none of their
-- group's (due order within a group); else they wait for the scheduler.
local listed = ng > 0 and redis.call('SCARD', cgroups) == ng
for i = 1, ng do
  if listed and redis.call('SISMEMBER', cgroups, ARGV[8 + i]) == 0 then
    listed = false
  end
end
local direct = listed
if direct then
  local head = redis.call('ZRANGE', waiting, '0', '0', 'WITHSCORES')[2]
  direct = head == nil or tonumber(head) > now_ceil_ms() * 1024 + 1023
end
local stale = 0

-- delays, which messages wait (delayed or high-priority), their UUIDs, the
-- business keys
local delay, waits, uuids, msgKeys = {}, {}, {}, {}
local fixed = {} -- message -> the score it takes from the holder it replaces (d)
local kj = last
for j = first, last - 1, STRIDE do
  local d = tonumber(ARGV[j + DELAY])
  local grouped = ARGV[j + GROUP] ~= ''
  if grouped and d <= 0 and not listed then
    -- through the scheduler; the caller's list is out of date unless
    -- the topic has no consumer group
    if ng > 0 or redis.call('SCARD', cgroups) > 0 then stale = 1 end
  end
  -- high priority, or grouped without the consumer groups to queue it in
  local through = ARGV[j + PRIO] == '1' and not (grouped and direct) or grouped and not direct
  if through and d < 0 then
    d = 0
  end
  delay[j] = d
  waits[j] = d > 0 or through
  if waits[j] then
    uuids[#uuids + 1] = ARGV[j + UUID]
  end
  if ARGV[j + BKEY] ~= '' then
    msgKeys[#msgKeys + 1] = string.sub(ARGV[j + BKEY], 2)
    if fpL > 0 then
      kfp[j], kj = kj, kj + 2
    end
  end
end

-- looks up fields of a hash in chunks: into[names[i]] = value or false.
-- hash_fields (lib.lua) reads a listpack hash whole for a chunk of 32
-- names or more: :bkeys is one while it holds up to 512 keys (and :bodies
-- while its messages are small), and HMGET scans a listpack once per
-- field (500 keys looked up in a :bkeys of 400 cost 4 us a message, 0.5
-- read whole).
local function lookup(hash, names, into)
  for c = 1, #names, CHUNK do
    local part = {unpack(names, c, math.min(c + CHUNK - 1, #names))}
    local vals = hash_fields(hash, part)
    for k = 1, #part do
      into[part[k]] = vals[k]
    end
  end
end

-- UUID -> body already waiting (or accepted below); false when none
local known = {}
local now
if #uuids > 0 then
  now = now_ceil_ms()
  lookup(bodies, uuids, known)
end
-- The far filter (farfilter.go): fmeta's n counts the far messages of
-- both formats, fm the same as this version's scripts count them; fb is
-- the filter's size in blocks of 512 bits (none: no filter), fi
-- the messages added to it, fr the size of the one a rebuild fills (none:
-- no rebuild) and fj the messages added to that; iL and iS, the format 3
-- index's shape (far3.go), when the caller knows one (else below, when a
-- message is looked up). (A field absent is 0 without tonumber: Lua's
-- string to number conversion is a strtod, costly when it makes eight.)
-- nk counts the business keys format 3's index marks.
local fst
if fpL > 0 then
  fst = redis.call('HMGET', fmeta, 'n', 'fm', 'fb', 'fi', 'fr', 'fj', 'fs', 'fq', 'nk', 'iL', 'iS')
else
  fst = redis.call('HMGET', fmeta, 'n', 'fm', 'fb', 'fi', 'fr', 'fj', 'fs', 'fq', 'nk')
end
-- whether the filter's bits, and those of the one being rebuilt, are at
-- the selectors of the caller's mode (fs, fq: '3' for fpSel's)
local ffMode, ffNextMode = (fst[7] == '3') == mode3, (fst[8] == '3') == mode3
for i = 1, #fst do
  fst[i] = fst[i] and tonumber(fst[i]) or 0
end
local farN, farM, ffBlocks, ffAdded, ffNext, ffJ, farK = fst[1], fst[2], fst[3], fst[4], fst[5], fst[6], fst[9]
local FF_PER, FF_MIN = 32, 64 -- farFilterPerBlock, farFilterMinBlocks
-- whether the filter holds every message it counts (past its capacity new
-- ones get no bit) at the caller's selectors
local ffWithin = ffBlocks > 0 and ffAdded <= ffBlocks * FF_PER and ffMode

-- sets the bits of the messages ms (ARGV offsets) in filter key of blocks
-- blocks of 512 bits, 120 a call (bit offsets as numbers: Redis formats
-- those without making Lua strings). A message's bit is its selector
-- (ARGV[j+12]) modulo the filter's bits, whatever the format it is
-- stored in (farfilter.go).
local function ffadd(key, blocks, ms)
  local n, set = blocks * 512, {}
  for k, m in ipairs(ms) do
    local i = #set
    set[i + 1], set[i + 2], set[i + 3], set[i + 4] = 'SET', 'u1', tonumber(ARGV[m + FSEL]) % n, 1
    if #set >= 480 or k == #ms then
      redis.call('BITFIELD', key, unpack(set))
      set = {}
    end
  end
end

-- message -> its location in the far tier, for waiting messages whose UUID
-- is there (the tiers never hold one UUID twice). None: no lookup. A
-- trusted filter (farfilter.go) whose bits for the message are 0: no
-- lookup either (its format 2 bit for format 2's index, its format 3 bit
-- for format 3's); the bits are read in one BITFIELD per 60 messages.
local farLoc = {}
local ffSet = {} -- messages whose bit in the far filter is set already
local ask, nAsk = nil, 0 -- waiting messages looked up in the far tier
if farN > 0 then
  ask = {}
  for j = first, last - 1, STRIDE do
    if waits[j] and ARGV[j + FSHARD] ~= '0' and not known[ARGV[j + UUID]] then
      ask[#ask + 1] = j
    end
  end
  nAsk = #ask
  if (nAsk > 0 or farK > 0 and #msgKeys > 0) and fpL == 0 then
    local shape = redis.call('HMGET', fmeta, 'iL', 'iS')
    fst[10], fst[11] = tonumber(shape[1] or '0'), tonumber(shape[2] or '0')
  end
end
-- the format 3 index's shape, which matters when a message is looked up
-- or may be stored in format 3, or a business key looked up there; iSet:
-- it was written
local iL, iS = fst[10] or 0, fst[11] or 0
local iSet = iL > 0
if not iSet and w3 then
  iL = 11 -- fpMinLevel: the shape a writer starts
end
-- the far filter's size in bits when a lookup may trust it, else 0
local ffBits = 0
if ffWithin and farM == farN then
  ffBits = ffBlocks * 512
end
if (nAsk > 0 or w3 or farK > 0 and #msgKeys > 0) and iL ~= fpL or nAsk > 0 and callerBits > 0 and ffBits > 0 and callerBits ~= ffBits then
  return {-1, iL, iS, ffBits}
end
if farN > 0 then
  -- maybe: looked up in the far index, format 2's, and format 3's when
  -- it has one and the message a fingerprint to look up (none when a
  -- pull found the entry another's: its low negative)
  local maybe = ask
  if #ask > 0 and ffBits > 0 then
    -- Read from a trusted filter: one bit a message, whatever the format
    -- its UUID may be stored in. A message that may go to the far tier
    -- has its bit set now, the reply being the bit before (one that does
    -- not go only makes a false 1 more). One only looked up comes with
    -- its bit when the caller knew the filter's size (checked above).
    maybe = {}
    local n, given = ffBits, callerBits > 0
    for c = 1, #ask, 120 do
      local ops, write = {}, false
      for k = c, math.min(c + 119, #ask) do
        local m, i = ask[k], #ops
        if ARGV[m + FBUCKETKEY] ~= '0' then
          ops[i + 1], ops[i + 2], ops[i + 3], ops[i + 4] = 'SET', 'u1', tonumber(ARGV[m + FSEL]) % n, 1
          ffSet[m], write = true, true
        else
          ops[i + 1], ops[i + 2] = 'GET', 'u1'
          if given then
            ops[i + 3] = ARGV[m + FSEL]
          else
            ops[i + 3] = tonumber(ARGV[m + FSEL]) % n
          end
        end
      end
      local cmd = 'BITFIELD_RO'
      if write then cmd = 'BITFIELD' end
      for k, b in ipairs(redis.call(cmd, ff, unpack(ops))) do
        if b == 1 then
          maybe[#maybe + 1] = ask[c + k - 1]
        end
      end
    end
  end
  local maybe2, maybe3, from3 = maybe, {}, maybe
  if not mode3 then
    -- a filter of farSel's selectors holds no format 3 message (a
    -- rebuild cannot hash their far fields, which format 3's index does
    -- not keep): format 3's index is read for each (a rollback to level
    -- 2 while format 3 messages wait)
    from3 = ask
  end
  if iSet then
    for _, j in ipairs(from3) do
      if ARGV[j + FP] ~= '' and string.byte(ARGV[j + FPLOC]) < 128 then -- low >= 0
        maybe3[#maybe3 + 1] = j
      end
    end
  end
  -- Format 2's index (formats 1 and 2: far.go) is read by one HGET a
  -- message, unless one EXISTS finds none of their shards: a shard that
  -- does not exist holds no entry, and once format 3 is written (iSet)
  -- format 2's drains, so without a trusted filter (after a fill by
  -- publishers alone) every message would read an empty shard (one
  -- argument a message instead of a call).
  for c = 1, #maybe2, CHUNK do
    local part = {}
    for k = c, math.min(c + CHUNK - 1, #maybe2) do
      part[#part + 1] = KEYS[tonumber(ARGV[maybe2[k] + FSHARD])]
    end
    if #part == 1 or not iSet or redis.call('EXISTS', unpack(part)) > 0 then
      for k, shard in ipairs(part) do
        local j = maybe2[c + k - 1]
        farLoc[j] = redis.call('HGET', shard, ARGV[j + FFIELD])
      end
    end
  end
  -- An entry of the fingerprint in format 3's index (a place, or a
  -- tombstone: the side table may hold it) is only a maybe: the caller's
  -- pull confirms it against the element, and sends a message it did not
  -- find again without a lookup.
  for _, j in ipairs(maybe3) do
    if not farLoc[j] then
      -- the message's shard (far3.go): h mod 2^L, or h mod 2^(L+1)
      -- below S. A message only looked up comes with the shard the
      -- caller's S picks: when S moved past it since, a maybe (the pull
      -- is exact).
      local low, a, b = struct.unpack('>i4I4I4', ARGV[j + FPLOC])
      if b == 0 then
        if (low < iS) == (low < fpS) then
          farLoc[j] = redis.call('HGET', KEYS[a], ARGV[j + FP])
        else
          farLoc[j] = true
        end
      elseif low < iS then
        farLoc[j] = redis.call('HGET', KEYS[b], ARGV[j + FP])
      else
        farLoc[j] = redis.call('HGET', KEYS[a], ARGV[j + FP])
      end
    end
  end
end
-- business key -> UUID of the waiting message holding it; false when none
local holder = {}
if #msgKeys > 0 then
  lookup(bkeys, msgKeys, holder)
end
-- business keys whose holder may wait in format 3 (far3.go: the index
-- marks the key by its fingerprint, not in :bkeys): an entry of the key's
-- kind at the fingerprint, but at the place a pull found another's; or
-- the key in the side table, which a collided entry or a tombstone sends
-- a lookup to. The caller's pull confirms a maybe against the element.
local farKey = false
if farK > 0 and #msgKeys > 0 then
  farKey = {}
  for j = first, last - 1, STRIDE do
    local k = kfp[j]
    local key = k and string.sub(ARGV[j + BKEY], 2)
    if k and not holder[key] and farKey[key] == nil then
      local low, a, b = struct.unpack('>i4I4I4', ARGV[k + 1])
      local shard = KEYS[a]
      if low < iS then shard = KEYS[b] end
      local e = redis.call('HGET', shard, ARGV[k])
      local maybe = false
      if e then
        -- (far3.go's fpLoc: 6 bytes a key's, 7 flagged, 1 a tombstone)
        local f, other = string.byte(e), string.sub(ARGV[k + 1], 13)
        if #e == 6 and e ~= other or #e == 7 and f % 4 >= 2 and string.sub(e, 2) ~= other then
          maybe = true
        elseif f % 2 == 1 and (#e == 7 or #e == 1) then
          maybe = redis.call('HEXISTS', fkc, key) == 1
        end
      end
      farKey[key] = maybe
    end
  end
end
local nWaiting, nReady = 0, 0
if maxWaiting > 0 then
  nWaiting = redis.call('ZCARD', waiting) + farN
end
if maxReady > 0 then
  nReady = redis.call('XLEN', stream)
end

-- check each call; collect the writes of those that pass
local status, ready, toWait = {}, {}, {}
local pending = {}   -- UUID -> index in toWait of a message accepted in this run
local removed = {}   -- UUIDs of messages waiting before this run that are replaced
local touched = {}   -- business keys whose holder changed
-- of those, made when needed: the ones held in the far tier (key -> its
-- :bkeys value, false for none), and the ones :bkeys may hold from before
local farHolder, inBkeys
-- The state of the call being checked: its messages to store, the
-- business keys whose holders it replaces, what it adds to the waiting set
-- and the ready stream, and its messages waiting in the far tier.
local adds, removes, dWait, dReady, pulls, pullkeys

-- Checks message m of the call being checked against the waiting messages
-- and the calls accepted before, noting in the call's state what it
-- stores. Returns the call's status when m fails it, else nil.
local function check(m)
  local id, w = ARGV[m + UUID], waits[m]
  local old = w and known[id]
  if w and farLoc[m] and not known[id] then
    pulls = pulls or {'pull'}
    pulls[#pulls + 1] = id
    return nil
  end
  if old then
    if old ~= ARGV[m + BODY] then
      return id
    end
    return nil -- byte-identical and waiting: a no-op
  end
  local bk = ARGV[m + BKEY]
  if bk ~= '' then
    local policy, key = string.sub(bk, 1, 1), string.sub(bk, 2)
    local h = holder[key]
    if not h and farKey and farKey[key] then
      -- its holder may wait in format 3: the caller finds it
      pullkeys = pullkeys or {'pullkey'}
      pullkeys[#pullkeys + 1] = key
      return nil
    end
    if h and string.byte(h, 1) == 0 then
      -- the holder waits in the far tier: rejected or kept first as any,
      -- else (or when it has this UUID) moved to the waiting set first (a
      -- pull), and compared there
      h = far_holder_id(h)
      if h ~= id and policy == 'r' then
        return {'key', key, h}
      elseif h ~= id and policy == 'k' then
        return nil -- dropped
      end
      pulls = pulls or {'pull'}
      pulls[#pulls + 1] = h
      return nil
    end
    if h and (h ~= id or not w) then
      if policy == 'r' then
        return {'key', key, h}
      elseif policy == 'k' then
        return nil -- dropped
      end
      removes[#removes + 1] = key
      dWait = dWait - 1
      if policy == 'd' then
        if pending[h] then
          local p = toWait[pending[h]]
          fixed[m], delay[m] = fixed[p], delay[p]
        else
          fixed[m] = tonumber(redis.call('ZSCORE', waiting, h))
        end
        if not w then
          -- an immediate message that now waits: its UUID must not
          -- be waiting already, but as the holder itself
          local o = known[id]
          if o == nil then
            o = redis.call('HGET', bodies, id)
          end
          if o and id ~= h then
            return id
          end
          w = true
          waits[m] = true
        end
      end
    end
  end
  adds[#adds + 1] = m
  if w then
    dWait = dWait + 1
  elseif ARGV[m + GROUP] == '' then
    dReady = dReady + 1
  end
  return nil
end

local j = first
for k = 1, calls do
  local stop = j + STRIDE * tonumber(ARGV[8 + ng + k])
  local bad = nil
  adds, removes, dWait, dReady, pulls, pullkeys = {}, {}, 0, 0, nil, nil
  for m = j, stop - 1, STRIDE do
    bad = check(m)
    if bad then
      break
    end
  end
  -- the pulls come first: the checks that stopped the loop run again then
  bad = pulls or pullkeys or bad
  if not bad and maxWaiting > 0 and dWait > 0 and nWaiting + dWait > maxWaiting then
    bad = {'full', 'waiting', nWaiting, dWait}
  end
  if not bad and maxReady > 0 and dReady > 0 and nReady + dReady > maxReady then
    bad = {'full', 'ready', nReady, dReady}
  end
  if bad then
    status[k] = bad
  else
    status[k] = 0
    nWaiting, nReady = nWaiting + dWait, nReady + dReady
    for _, key in ipairs(removes) do
      local h = holder[key]
      if pending[h] then
        toWait[pending[h]] = false
        pending[h] = nil
      else
        removed[#removed + 1] = h
      end
      known[h] = false
      holder[key] = false
      inBkeys = inBkeys or {}
      inBkeys[key] = true
      touched[#touched + 1] = key
    end
    for _, m in ipairs(adds) do
      if not waits[m] then
        ready[#ready + 1] = m
      else
        local id = ARGV[m + UUID]
        known[id] = ARGV[m + BODY]
        toWait[#toWait + 1] = m
        pending[id] = #toWait
        if ARGV[m + BKEY] ~= '' then
          local key = string.sub(ARGV[m + BKEY], 2)
          if holder[key] then
            inBkeys = inBkeys or {}
            inBkeys[key] = true
          end
          holder[key] = id
          touched[#touched + 1] = key
        end
      end
    end
  end
  j = stop
end

-- replaced messages that waited before this run
if #removed > 0 then
  redis.call('ZREM', waiting, unpack(removed))
  redis.call('HDEL', bodies, unpack(removed))
  redis.call('HDEL', bkeyof, unpack(removed))
  redis.call('HDEL', prio, unpack(removed))
  redis.call('HDEL', grpof, unpack(removed))
end

local fairs = {} -- the listed consumer groups' fair queues, opened when needed
local streamed = false
for _, m in ipairs(ready) do
  local g = ARGV[m + GROUP]
  if g == '' then
    redis.call('XADD', stream, '*', 'm', ARGV[m + BODY])
    streamed = true
  else
    local where = 'fresh'
    if ARGV[m + PRIO] == '1' and string.byte(g, 1) ~= 1 then where = 'prio' end
    for i = 1, ng do
      local k = 17 + GSTRIDE * (i - 1)
      local c = fairs[i]
      if not c then
        use_fair() -- (fair.lua's helpers: made for grouped messages only)
        c = fair_open(KEYS[k + GFQ], KEYS[k + GFRING], KEYS[k + GFPRIO], KEYS[k + GFWAIT], KEYS[k + GMETA])
        fairs[i] = c
      end
      if c.gv then
        fair_push(c, g, 1, ARGV[m + BODY], where)
      else
        redis.call('XADD', KEYS[k + GREDO], '*', 'm', ARGV[m + BODY], 'a', '1')
        streamed = true
      end
    end
  end
end
if #fairs > 0 then
  local now_ = now or now_ceil_ms()
  for _, c in pairs(fairs) do fair_close(c, bell, now_) end
end
if streamed then
  ring(bell)
end

local mustWake = false
local stored = {}
for _, m in ipairs(toWait) do
  if m then
    stored[#stored + 1] = m
  end
end
if #stored > 0 then
  local head = redis.call('ZRANGE', waiting, '0', '0', 'WITHSCORES')[2]
  local seqNo = redis.call('INCRBY', seq, string.format('%d', #stored)) - #stored
  if not now then
    -- only immediate messages that wait in a holder's place (d): taking
    -- its score, they need no clock unless the holder had no score
    now = now_ceil_ms()
  end
  local earliest = nil
  -- scores in publish order, the far tier's too, so equal due times keep
  -- that order across the tiers
  local scoreOf = {}
  for _, m in ipairs(stored) do
    seqNo = seqNo + 1
    scoreOf[m] = fixed[m] or (now + delay[m]) * 1024 + seqNo % 1024
  end
  -- Messages for the far tier, by bucket: one with no holder's score and
  -- a business key of under 256 bytes if any, due within its bucket give
  -- or take the slack, whose bucket is unpacked after now + the margin
  -- (and in format 3, due within 2^28 / 1024 ms of the bucket's start).
  -- Each bucket takes its messages in one RPUSH; a message's location is
  -- bucket * 2^24 + its position in the bucket, exact in a Lua number.
  local byBucket, farOrder, farFields = {}, {}, {}
  for _, m in ipairs(stored) do
    if ARGV[m + FBUCKETKEY] ~= '0' and not fixed[m] and #ARGV[m + BKEY] <= 256 then
      local due, first = now + delay[m], tonumber(ARGV[m + FSTART])
      if due >= first - farSlack and due < first + farWidth + farSlack and tonumber(ARGV[m + FUNPACK]) > now + farMargin
        and (not w3 or math.abs(scoreOf[m] - first * 1024) < 268435456) then
        local b = ARGV[m + FBUCKET]
        local list = byBucket[b]
        if not list then
          list = {}
          byBucket[b] = list
          local k = #farOrder
          farOrder[k + 1] = b
          farFields[2 * k + 1], farFields[2 * k + 2] = 'P:' .. b, 'L:' .. b
        end
        list[#list + 1] = m
      end
    end
  end
  local isFar, farMsgs = {}, {}
  local nFar, nKeyFar = 0, 0
  if #farOrder > 0 then
    -- per bucket: the elements popped by unpacking (none, unless Redis's
    -- clock went back) and the live count, read in one call and written in
    -- chunks
    local meta = {}
    lookup(fmeta, farFields, meta)
    local counts, added, earliestAt = {}, {}, nil
    for k, b in ipairs(farOrder) do
      local list, live = byBucket[b], tonumber(meta[farFields[2 * k]] or '0')
      local bucket = KEYS[tonumber(ARGV[list[1] + 7])]
      local len = 0
      local base1024 = tonumber(ARGV[list[1] + 9]) * 1024
      for c = 1, #list, CHUNK do
        local els = {}
        for i = c, math.min(c + CHUNK - 1, #list) do
          -- the element of format 2 (far.go): its due time from the
          -- bucket's first due ms, its business key and priority
          -- (or of format 3, far3.go: a 5-byte head)
          local m = list[i]
          local flags, bk = 0, ARGV[m + BKEY]
          if ARGV[m + PRIO] == '1' then flags = 1 end
          if bk ~= '' then
            flags = flags + 2
            bk = string.char(#bk - 1) .. string.sub(bk, 2)
          end
          if w3 then
            -- far3.go: bit 31 priority, bit 30 key, bit 29 the until
            -- metadata derived, the score's offset + 2^28; the key's
            -- length, then where the body holds the key's bytes (its
            -- metadata has it: stored once), or 65535 and the key; the
            -- until entry's place in the body (which goes without it) and
            -- its seconds less the due second's
            local hi = (flags % 2) * 2147483648 + math.floor(flags / 2) * 1073741824
            local body, derived = ARGV[m + BODY], ''
            local at = struct.unpack('>h', ARGV[m + FPLOC], 13)
            if at >= 0 and string.byte(body, at + 1) == 3 then
              -- the entry: code 3, the seconds (a zigzag varint), 0 (UTC)
              local v, i, mul, ended = 0, at + 2, 1, false
              while not ended and i <= #body and i < at + 10 do
                local c = string.byte(body, i)
                i, ended = i + 1, c < 128
                v, mul = v + (c % 128) * mul, mul * 128
              end
              local d = v / 2 - math.floor(scoreOf[m] / 1024000)
              if ended and string.byte(body, i) == 0 and v % 2 == 0 and d >= -128 and d < 128 then
                hi = hi + 536870912
                derived = string.char(at, d % 256)
                body = string.sub(body, 1, at) .. string.sub(body, i + 1)
              end
            end
            if bk ~= '' then
              local kat = string.find(body, string.sub(bk, 2), 1, true)
              if kat and kat <= 65535 then
                bk = string.sub(bk, 1, 1) .. struct.pack('>I2', kat - 1)
              else
                bk = string.sub(bk, 1, 1) .. '\255\255' .. string.sub(bk, 2)
              end
            end
            els[#els + 1] = '\3' .. struct.pack('>I4', hi + scoreOf[m] - base1024 + 268435456) .. bk .. derived .. body
          else
            els[#els + 1] = string.char(2, flags) .. struct.pack('>i4', scoreOf[m] - base1024) .. bk .. ARGV[m + BODY]
          end
        end
        len = redis.call('RPUSH', bucket, unpack(els))
      end
      local base = tonumber(meta[farFields[2 * k - 1]] or '0') + len - #list
      local loc = tonumber(b) * 16777216 + base
      if base + #list > 16777216 or loc + #list > 9007199254740992 then
        -- a location would not fit: these wait in the waiting set instead
        if len == #list then
          redis.call('DEL', bucket)
        else
          redis.call('LTRIM', bucket, '0', len - #list - 1)
        end
      else
        if w3 then use_fpindex() end
        for i, m in ipairs(list) do
          if w3 then
            -- its fingerprint's shard: h mod 2^L, or h mod 2^(L+1) below S
            local low, a, sb = struct.unpack('>i4I4I4', ARGV[m + FPLOC])
            local shard = KEYS[a]
            if low < 0 then low = -low - 1 end
            if low < iS then shard = KEYS[sb] end
            fi_insert(shard, fic, ARGV[m + FP], ARGV[m + FFIELD], tonumber(b), base + i - 1, false)
          else
            -- format 2's location: negated, less one (far.go's farLoc)
            redis.call('HSET', KEYS[tonumber(ARGV[m + FSHARD])], ARGV[m + FFIELD], -(loc + i - 1) - 1)
          end
          isFar[m] = true
          farMsgs[#farMsgs + 1] = m
          if ARGV[m + BKEY] ~= '' then
            -- the final holder of its key (:bkeys written below): marked far, in
            -- format 3 by the key's entry in the index instead
            local key = string.sub(ARGV[m + BKEY], 2)
            if w3 then
              local k = kfp[m]
              local low, a, sb = struct.unpack('>i4I4I4', ARGV[k + 1])
              local shard = KEYS[a]
              if low < iS then shard = KEYS[sb] end
              fi_insert(shard, fkc, ARGV[k], key, tonumber(b), base + i - 1, true)
              farHolder = farHolder or {}
              farHolder[key] = false
              nKeyFar = nKeyFar + 1
            else
              farHolder = farHolder or {}
              farHolder[key] = far_mark(ARGV[m + UUID], ARGV[m + FFIELD])
            end
          end
        end
        counts[#counts + 1] = farFields[2 * k]
        counts[#counts + 1] = live + #list
        if live == 0 then
          -- a bucket with live messages is in the far set already: unpack.lua
          -- and farpull.lua remove the entry and the counters together. (An
          -- allkeys-* eviction policy could evict one without the other; it
          -- can evict messages too, and schedulers warn against it.)
          local at = ARGV[list[1] + 10]
          added[#added + 1] = at
          added[#added + 1] = b
          at = tonumber(at)
          if earliestAt == nil or at < earliestAt then
            earliestAt = at
          end
        end
        nFar = nFar + #list
      end
    end
    for c = 1, #counts, CHUNK do
      redis.call('HSET', fmeta, unpack(counts, c, math.min(c + CHUNK - 1, #counts)))
    end
    if #added > 0 then
      local farHead = redis.call('ZRANGE', far, '0', '0', 'WITHSCORES')[2]
      if farHead == nil or earliestAt < tonumber(farHead) then
        mustWake = true -- a new bucket is the first to unpack
      end
      for c = 1, #added, CHUNK do
        redis.call('ZADD', far, 'NX', unpack(added, c, math.min(c + CHUNK - 1, #added)))
      end
    end
  end
  for c = 1, #stored, CHUNK do
    local h, z, o, pr, gr = {}, {}, {}, {}, {}
    for k = c, math.min(c + CHUNK - 1, #stored) do
      local m = stored[k]
      if ARGV[m + GROUP] ~= '' then
        gr[#gr + 1] = ARGV[m + UUID]
        gr[#gr + 1] = ARGV[m + GROUP]
      end
      if not isFar[m] then
        local score = scoreOf[m]
        h[#h + 1] = ARGV[m + UUID]
        h[#h + 1] = ARGV[m + BODY]
        -- a score as '%d' (it is a whole number of ms * 1024): Redis 7.0
        -- formats a Lua number with %.17g, about 4k instructions each
        z[#z + 1] = string.format('%d', score)
        z[#z + 1] = ARGV[m + UUID]
        if ARGV[m + BKEY] ~= '' then
          o[#o + 1] = ARGV[m + UUID]
          o[#o + 1] = string.sub(ARGV[m + BKEY], 2)
        end
        if ARGV[m + PRIO] == '1' then
          pr[#pr + 1] = ARGV[m + UUID]
          pr[#pr + 1] = 1
        end
        if earliest == nil or score < earliest then
          earliest = score
        end
      end
    end
    if #h > 0 then
      redis.call('HSET', bodies, unpack(h))
      redis.call('ZADD', waiting, unpack(z))
    end
    if #o > 0 then
      redis.call('HSET', bkeyof, unpack(o))
    end
    if #pr > 0 then
      redis.call('HSET', prio, unpack(pr))
    end
    if #gr > 0 then
      redis.call('HSET', grpof, unpack(gr))
    end
  end
  if nFar > 0 then
    -- The far counts, in one write: n, fm (n as this version counts it,
    -- at the caller's selectors: a caller whose selectors are not the
    -- filter's, or the rebuilt one's, sets wrong bits, so it moves n
    -- alone, and the filter is not trusted until rebuilt), the far
    -- filter's, and the format 3 index's shape. The filter: a new one,
    -- at the caller's selectors, when the far tier was empty (nothing is
    -- in it to miss); the bits while within its capacity (past it, it is
    -- not trusted until rebuilt: they would be wasted), counted; and the
    -- bits in the one a rebuild fills.
    local counts = {'n', farN + nFar}
    if nKeyFar > 0 then
      counts[3], counts[4] = 'nk', farK + nKeyFar
    end
    if farN == 0 then
      redis.call('DEL', ff)
      ffBlocks, ffAdded, farM, ffWithin, ffMode = FF_MIN, 0, 0, true, true
      if mode3 then
        counts[#counts + 1], counts[#counts + 2] = 'fs', '3'
      else
        redis.call('HDEL', fmeta, 'fs')
      end
    end
    if (ffMode or ffBlocks == 0) and (ffNextMode or ffNext == 0) then
      counts[#counts + 1], counts[#counts + 2] = 'fm', farM + nFar
    end
    if ffBlocks > 0 then
      if ffWithin then
        local unset = {}
        for _, m in ipairs(farMsgs) do
          if not ffSet[m] then unset[#unset + 1] = m end
        end
        ffadd(ff, ffBlocks, unset)
      end
      counts[#counts + 1], counts[#counts + 2] = 'fb', ffBlocks
      counts[#counts + 1], counts[#counts + 2] = 'fi', ffAdded + nFar
    end
    if ffNext > 0 then
      ffadd(ffn, ffNext, farMsgs)
      counts[#counts + 1], counts[#counts + 2] = 'fj', ffJ + nFar
    end
    if w3 then
      -- Splits, while the tier holds more than 48 messages per shard
      -- (far3.go's fpPerShard), as many as the caller gave keys for, in
      -- the order it gave them: only from the L and S it knew.
      local moved = not iSet
      if iL == fpL and iS == fpS then
        for k = 0, nsplit - 1 do
          -- (entries: the messages' and their business keys')
          if farN + farK + nFar + nKeyFar <= 48 * (2 ^ iL + iS) then break end
          fi_split(KEYS[tonumber(ARGV[base + 6 + 2 * k])], KEYS[tonumber(ARGV[base + 7 + 2 * k])], iL)
          iS, moved = iS + 1, true
          if iS == 2 ^ iL then iL, iS = iL + 1, 0 end
        end
      end
      if moved then
        counts[#counts + 1], counts[#counts + 2] = 'iL', iL
        counts[#counts + 1], counts[#counts + 2] = 'iS', iS
      end
    end
    redis.call('HSET', fmeta, unpack(counts))
  end
  if earliest and (head == nil or earliest < tonumber(head)) then
    mustWake = true
  end
end
-- The final holder of every business key that changed hands, in :bkeys
-- (the far tier's in format 2, none in format 3: its index marks the key),
-- written after the far tier's, so a key held far is written once (in
-- format 2) or not at all (in format 3, unless :bkeys held it before).
for _, key in ipairs(touched) do
  local f, h = farHolder and farHolder[key], holder[key]
  if f ~= nil then h = f end
  if h then
    redis.call('HSET', bkeys, key, h)
  elseif f == nil or inBkeys and inBkeys[key] then
    redis.call('HDEL', bkeys, key)
  end
end

-- 2 for reg, 1 for dormant: one command for both (as append.lua)
local flags = redis.call('EXISTS', reg, reg, dormant)
if (#ready > 0 or #stored > 0) and flags % 2 == 1 then
  redis.call('DEL', dormant)
  mustWake = true
end
if mustWake then
  redis.call('PUBLISH', wake, 'd')
end
local new = 0
if flags < 2 then
  redis.call('SET', reg, '1')
  new = 1
end
status[calls + 1] = new
status[calls + 2] = stale
status[calls + 3] = ffBits
if fpL > 0 then
  status[calls + 4], status[calls + 5] = iL, iS
end
return status
