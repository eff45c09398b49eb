-- keygate's all-or-nothing decision over several budgets (v2's ratelimit.multiLimit; see
-- multi.rs):
--   KEYS[1..n]       each entry's window key (two entries on one budget name one key)
--   KEYS[n+1..n+m]   overrides epoch keys that must still hold ARGV[2+3n+j] (0: absent)
--   ARGV[1]          n
--   ARGV[3i-1..3i+1] entry i: limit, cost, key TTL (ms)
-- Entries are decided in order, each on top of the earlier ones of the call (the decision
-- rule of the single script: cost 0 passes while used < limit; else used + cost <= limit).
-- If every entry fits, every cost is added (a key created here gets its expiry); if any
-- does not, nothing is written. Answers {-1} when an epoch changed (nothing done), else
-- {fitted, used} per entry: `used` after the entry when all passed, the budget as it is
-- (before the call) when not.
local n = tonumber(ARGV[1])
for j = n + 1, #KEYS do
  if (redis.call('GET', KEYS[j]) or '0') ~= ARGV[1 + 3 * n + (j - n)] then
    return {-1}
  end
end
local before, used, out, all = {}, {}, {}, true
for i = 1, n do
  local key = KEYS[i]
  if used[key] == nil then
    before[key] = tonumber(redis.call('GET', key) or '0')
    used[key] = before[key]
  end
  local u, limit, cost = used[key], tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local fits
  if cost == 0 then fits = u < limit else fits = u + cost <= limit end
  if fits then used[key] = u + cost else all = false end
  out[2 * i - 1], out[2 * i] = fits and 1 or 0, used[key]
end
if all then
  for i = 1, n do
    local cost = tonumber(ARGV[3 * i])
    if cost > 0 and redis.call('INCRBY', KEYS[i], cost) == cost then
      redis.call('PEXPIRE', KEYS[i], ARGV[3 * i + 1])
    end
  end
else
  for i = 1, n do
    out[2 * i] = before[KEYS[i]]
  end
end
return out
