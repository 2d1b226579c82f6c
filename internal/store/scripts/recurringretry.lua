-- include: clock
--[[
  recurringretry: takes over a claimed tick whose publish did not complete:
  the claimer's own retry (it knows the expiry it holds), or any process's
  once the claim expired (its claimer died or lost Redis).

  KEYS[1] claims  zset  "<schedule ID>@<tick ms>" -> claim expiry (Redis ms)
  ARGV[1] claim member
  ARGV[2] the expiry the caller holds, or "" to take an expired claim
  ARGV[3] claim lifetime (ms)

  Returns the new expiry when the caller now holds the claim, 0 otherwise.
]]
local claims = KEYS[1]
local member, held, lifetime = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local exp = redis.call('ZSCORE', claims, member)
if not exp then
  return 0
end
exp = tonumber(exp)
if held == '' then
  if exp > now then
    return 0
  end
elseif exp ~= tonumber(held) then
  return 0
end
redis.call('ZADD', claims, now + lifetime, member)
return now + lifetime
