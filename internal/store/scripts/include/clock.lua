--[[
  clock: Redis's clock (TIME: seconds and microseconds) in the units the
  scripts count in. An include (see scriptSource in scripts.go): put in
  front of the scripts that need it, not a script of its own.
]]

-- Redis's clock in µs.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Redis's clock in ms, rounded up: a due time is never earlier than now + delay.
local function now_ceil_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end

-- Redis's clock in ms, rounded down: entries older than now - retention expire.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
