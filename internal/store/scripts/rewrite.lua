#!lua flags=allow-oom
--[[
  rewrite: replaces stored bodies by their encoding at an older storage
  level (see level.go: the rollback's rewrite), each only if it is still
  the body the caller read, so a body settled or replaced meanwhile is left
  as it is. Flagged allow-oom: a rewrite shrinks nothing much, but it must
  not fail halfway for memory while the operator rolls back.

  KEYS[1] bodies   hash   a waiting set's or retry set's bodies (member
                          -> encoded message); or stream: a dead letter
                          stream (field m = encoded message)
  ARGV[1]          "h" for a hash, "s" for a stream
  then three arguments per body:
  ARGV[j]          the hash field, or the stream entry ID
  ARGV[j+1]        the body the caller read
  ARGV[j+2]        the body to store instead

  Returns the number of bodies replaced. A stream entry is replaced by a
  new entry (XADD *, the same fields but m) and deleted: stream entries
  cannot change, so a dead letter rewritten moves to the end of its stream.
]]
local bodies, kind = KEYS[1], ARGV[1]
local n = 0
for j = 2, #ARGV, 3 do
  local id, old, new = ARGV[j], ARGV[j + 1], ARGV[j + 2]
  if kind == 'h' then
    if redis.call('HGET', bodies, id) == old then
      redis.call('HSET', bodies, id, new)
      n = n + 1
    end
  else
    local e = redis.call('XRANGE', bodies, id, id)[1]
    if e then
      local fields, found = e[2], false
      for i = 1, #fields, 2 do
        if fields[i] == 'm' and fields[i + 1] == old then
          fields[i + 1] = new
          found = true
        end
      end
      if found then
        redis.call('XADD', bodies, '*', unpack(fields))
        redis.call('XDEL', bodies, id)
        n = n + 1
      end
    end
  end
end
return n
