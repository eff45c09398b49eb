-- keygate's credit spend with the key's own rate limits, all or nothing (credits.rs):
--   KEYS[1] the counter, KEYS[2] its lock, KEYS[3] its shard's dirty set,
--   KEYS[3+i] limit i's window key (i = 1..m; all in the counter's slot)
--   ARGV[1..11]  key id, cost, refill start (-1: no refill), refill amount, the key's
--                creation, load (1: the row's counter follows), its remaining, last
--                refill, version, change number, the idle expiry
--   ARGV[12]     m
--   ARGV[10+3i], ARGV[11+3i], ARGV[12+3i]  limit i: limit, cost, key TTL (ms)
--   ARGV[13+3m]  k, then ARGV[13+3m+j] the value KEYS[3+m+j] must hold (j = 1..k; an
--                absent key holds '0'): the change counters' epoch and the counters the
--                caller's answer assumed (a single Redis only: they are in another slot)
-- Limits are decided in order, each on top of the earlier ones (cost 0 passes while
-- used < limit; else used + cost <= limit). Answers {code, remaining, then per limit
-- fitted (1/0) and used}: code 1 paid (limits taken), 0 not paid (nothing taken), 2 the
-- counter is missing, 3 locked (nothing decided, no limits answered), 4 the key has no
-- credits (limits taken), 5 a limit did not fit (nothing spent or taken). `used` is after
-- the limit when taken, else the budget as it is. Code 6: an assumed value moved, nothing
-- done.
local function int(x) return string.format('%.0f', x) end
local m = tonumber(ARGV[12])
local k = tonumber(ARGV[13 + 3 * m])
for j = 1, k do
  if (redis.call('GET', KEYS[3 + m + j]) or '0') ~= ARGV[13 + 3 * m + j] then return {6, 0} end
end
if redis.call('EXISTS', KEYS[2]) == 1 then return {3, 0} end
local c = redis.call('HMGET', KEYS[1], 'r', 'l', 'n', 'u')
local unlimited = c[4] == '1'
if not unlimited and not c[1] and ARGV[6] ~= '1' then return {2, 0} end
local before, used, fitted, all = {}, {}, {}, true
for i = 1, m do
  local key = KEYS[3 + i]
  if used[key] == nil then
    before[key] = tonumber(redis.call('GET', key) or '0')
    used[key] = before[key]
  end
  local u, limit, cost = used[key], tonumber(ARGV[10 + 3 * i]), tonumber(ARGV[11 + 3 * i])
  local fits
  if cost == 0 then fits = u < limit else fits = u + cost <= limit end
  if fits then used[key] = u + cost else all = false end
  fitted[i] = fits and 1 or 0
end
local function answer(code, r, taken)
  local out = {code, r}
  for i = 1, m do
    out[1 + 2 * i] = fitted[i]
    if taken then
      out[2 + 2 * i] = used[KEYS[3 + i]]
    else
      out[2 + 2 * i] = before[KEYS[3 + i]]
    end
  end
  return out
end
local function take()
  for i = 1, m do
    local cost = tonumber(ARGV[11 + 3 * i])
    if cost > 0 and redis.call('INCRBY', KEYS[3 + i], cost) == cost then
      redis.call('PEXPIRE', KEYS[3 + i], ARGV[12 + 3 * i])
    end
  end
end
if not all then return answer(5, 0, false) end
if unlimited then
  take()
  return answer(4, 0, true)
end
local r, l, n
if not c[1] then
  r, l, n = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[10])
  redis.call('HSET', KEYS[1], 'r', ARGV[7], 'l', l, 'v', ARGV[9], 'n', ARGV[10])
  redis.call('PEXPIRE', KEYS[1], ARGV[11])
else
  r, l, n = tonumber(c[1]), c[2], tonumber(c[3])
end
local changed = false
local at = tonumber(ARGV[3])
if at >= 0 then
  local last = tonumber(ARGV[5])
  if l ~= '' then last = tonumber(l) end
  if last < at then
    r, l, changed = tonumber(ARGV[4]), ARGV[3], true
  end
end
local cost = tonumber(ARGV[2])
local paid = 0
if r > 0 and r >= cost then
  paid = 1
  if cost > 0 then
    r, changed = r - cost, true
  end
  take()
end
if changed then
  n = n + 1
  redis.call('HSET', KEYS[1], 'r', int(r), 'l', l, 'n', int(n))
  redis.call('PERSIST', KEYS[1])
  redis.call('SADD', KEYS[3], ARGV[1])
end
return answer(paid, r, paid == 1)
