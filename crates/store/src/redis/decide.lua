-- keygate's rate-limit decisions (see mod.rs): for request i, KEYS[2i-1] is the budget's
-- window key and KEYS[2i] the namespace's overrides epoch key; ARGV[4i-3..4i] are the
-- epoch the caller expects ('' for no check), the limit, the cost and the key's TTL (ms).
-- Answers {answer, used} per request, in order: 1 passed, 0 denied, 2 stale overrides.
local out = {}
local epochs = {}
for i = 1, #KEYS / 2 do
  local key, a = KEYS[2 * i - 1], 4 * (i - 1)
  local expected = ARGV[a + 1]
  local stale = false
  if expected ~= '' then
    local ek = KEYS[2 * i]
    local epoch = epochs[ek]
    if epoch == nil then
      epoch = redis.call('GET', ek) or '0'
      epochs[ek] = epoch
    end
    stale = epoch ~= expected
  end
  if stale then
    out[2 * i - 1], out[2 * i] = 2, 0
  else
    local used = tonumber(redis.call('GET', key) or '0')
    local limit, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if cost == 0 then
      out[2 * i - 1], out[2 * i] = (used < limit) and 1 or 0, used
    elseif cost <= limit - used then
      -- The cost as sent: a Lua number would be formatted with 14 digits.
      used = redis.call('INCRBY', key, ARGV[a + 3])
      redis.call('PEXPIRE', key, ARGV[a + 4])
      out[2 * i - 1], out[2 * i] = 1, used
    else
      out[2 * i - 1], out[2 * i] = 0, used
    end
  end
end
return out
