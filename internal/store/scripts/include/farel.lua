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
    local w = struct.unpack('>I4', string.sub(e, 2, 5))
    local score = start * 1024 + w % 1073741824 - 536870912
    local at, key = 6, false
    if w % 2147483648 >= 1073741824 then
      local n = string.byte(e, 6)
      if #e < 7 + n then
        return nil
      end
      key, at = string.sub(e, 7, 6 + n), 7 + n
    end
    return score, string.sub(e, at), key, w >= 2147483648
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

-- Restores what a far message of format 2 keeps in its element, when it
-- moves to the waiting set as id (field its far index field): its business
-- key (bkeyof; bkeys marks a far holder, far_mark, and holds the UUID once
-- it waits) and its priority.
local function far_restore(bkeys, bkeyof, prio, id, field, key, isPrio)
  if key then
    redis.call('HSET', bkeyof, id, key)
    if is_far_mark(redis.call('HGET', bkeys, key), id, field) then
      redis.call('HSET', bkeys, key, id)
    end
  end
  if isPrio then
    redis.call('HSET', prio, id, 1)
  end
end
