-- include: farmark
--[[
  farel: decoding far bucket elements (see far.go for both formats). An
  include (see scriptSource in scripts.go): put in front of the scripts that
  need it, not a script of its own.
]]

-- Decodes element e of a far bucket of format v (1 or 2; a bucket of
-- format 2 holds elements of format 3 too) whose first due ms is start.
-- Returns score, body, key (false for none), prio (true or false); nil for
-- an element that cannot be read (of another format, or damaged). e must
-- not be "" (a blank element).
local function far_decode(v, start, e)
  if v ~= 2 then
    if #e < 9 or string.byte(e, 1) == 2 or string.byte(e, 1) == 3 then
      return nil
    end
    return struct.unpack('>d', e), string.sub(e, 9), false, false
  end
  if string.byte(e, 1) == 3 and #e >= 6 then
    -- far3.go: bit 31 priority, bit 30 a key, bit 29 the until metadata
    -- derived from the due time, the score's offset + 2^28
    local w = struct.unpack('>I4', string.sub(e, 2, 5))
    local score = start * 1024 + w % 536870912 - 268435456
    local keyed, derived = w % 2147483648 >= 1073741824, w % 1073741824 >= 536870912
    local at, key, n, koff = 6, false, 0, nil
    if keyed then
      -- its length, then where in the body its bytes are, or 65535 and
      -- the key
      if #e < at + 3 then
        return nil
      end
      n, koff = string.byte(e, at), struct.unpack('>I2', string.sub(e, at + 1, at + 2))
      at = at + 3
      if koff == 65535 then
        key, at, koff = string.sub(e, at, at + n - 1), at + n, nil
      end
    end
    local off, d
    if derived then
      -- the until entry's place in the body and its seconds less the
      -- due second's
      if #e < at + 2 then
        return nil
      end
      off, d = string.byte(e, at, at + 1)
      at = at + 2
    end
    -- the key points into the body as stored, its until entry left out
    local body = string.sub(e, at)
    if koff then
      key = string.sub(body, koff + 1, koff + n)
    end
    if derived then
      if off > #body then
        return nil
      end
      -- the entry: code 3, the seconds as a zigzag varint, 0 (UTC)
      if d >= 128 then d = d - 256 end
      local v, entry = 2 * (math.floor(score / 1024000) + d), '\3'
      while v >= 128 do
        entry, v = entry .. string.char(v % 128 + 128), math.floor(v / 128)
      end
      body = string.sub(body, 1, off) .. entry .. string.char(v, 0) .. string.sub(body, off + 1)
    end
    if keyed and (#key ~= n or n == 0) then
      return nil
    end
    return score, body, key, w >= 2147483648
  end
  if #e < 7 or string.byte(e, 1) ~= 2 then
    return nil
  end
  local flags = string.byte(e, 2)
  if flags > 3 then
    return nil
  end
  local score = start * 1024 + struct.unpack('>i4', string.sub(e, 3, 6))
  local at, key = 7, false
  if flags >= 2 then
    local n = string.byte(e, 7)
    if #e < 8 + n then
      return nil
    end
    key, at = string.sub(e, 8, 7 + n), 8 + n
  end
  return score, string.sub(e, at), key, flags % 2 == 1
end

-- Restores what a far message keeps in its element, when it moves to the
-- waiting set as id (field its far index field): its business key (bkeyof;
-- bkeys marks a far holder of format 2, far_mark, and holds the UUID once
-- it waits; of format 3, v3, bkeys holds nothing while the index marks
-- the key) and its priority.
local function far_restore(bkeys, bkeyof, prio, id, field, key, isPrio, v3)
  if key then
    redis.call('HSET', bkeyof, id, key)
    local h = redis.call('HGET', bkeys, key)
    if is_far_mark(h, id, field) or v3 and not h then
      redis.call('HSET', bkeys, key, id)
    end
  end
  if isPrio then
    redis.call('HSET', prio, id, '1')
  end
end
