--[[
  stream: reading stream entry ids and XINFO replies. An include (see
  scriptSource in scripts.go): put in front of the scripts that need it,
  not a script of its own.
]]

-- The ms and sequence parts of a stream entry id.
local function parse_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

-- A table of the flat field/value list XINFO GROUPS and XINFO CONSUMERS
-- reply per group or consumer ({'name', 'g', 'pending', 0, ...}).
local function fields(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end
