--[[
  farmark: how bkeys marks a business key's holder that waits in the far
  tier (see far.go's FarHolderUUID). An include (see scriptSource in
  scripts.go): put in front of the scripts that need it, not a script of
  its own.
]]

-- The bkeys value marking id, with far index field field, as the far
-- holder of its key: "\0\1" and the field when that is the UUID's 16
-- bytes, else "\0" and the UUID.
local function far_mark(id, field)
  if #field == 16 and #id == 36 then
    return '\0\1' .. field
  end
  return '\0' .. id
end

-- Whether bkeys value h marks id (field its far index field) as a far
-- holder: as far_mark writes it, or as an older version did ("\0" .. id).
local function is_far_mark(h, id, field)
  return h == far_mark(id, field) or h == '\0' .. id
end

-- The UUID of the far holder that bkeys value h (beginning with "\0")
-- marks, as text.
local function far_holder_id(h)
  if #h == 18 and string.byte(h, 2) == 1 then
    return string.format('%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x', string.byte(h, 3, 18))
  end
  return string.sub(h, 2)
end
