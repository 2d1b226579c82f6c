--[[
  lookup: finding a waiting message by its UUID or by its business key, as
  Inspector and Publisher calls name it. An include (see scriptSource in
  scripts.go): put in front of the scripts that need it, not a script of
  its own.
]]

-- The UUID of the message named by ref: by "uuid", ref itself; by "key",
-- the UUID of the waiting message holding the business key ref in bkeys
-- (business key -> UUID), false when none does, or when the holder waits
-- in the far tier (bkeys holds "\0" and its UUID: the caller moves it to the
-- waiting set first, farpull.lua, and calls again). Whether that message
-- is still waiting is for the caller to check.
local function lookup_id(bkeys, by, ref)
  if by == 'key' then
    local id = redis.call('HGET', bkeys, ref)
    if id and string.byte(id, 1) == 0 then
      return false
    end
    return id
  end
  return ref
end
