--[[
  lookup: finding a waiting message by its UUID or by its business key, as
  Inspector and Publisher calls name it. An include (see scriptSource in
  scripts.go): put in front of the scripts that need it, not a script of
  its own.
]]

-- The UUID of the message named by ref: by "uuid", ref itself; by "key",
-- the UUID of the waiting message holding the business key ref in bkeys
-- (business key -> UUID), false when none does. Whether that message is
-- still waiting is for the caller to check.
local function lookup_id(bkeys, by, ref)
  if by == 'key' then
    return redis.call('HGET', bkeys, ref)
  end
  return ref
end
