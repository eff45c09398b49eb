-- keygate's credit spends with their keys' own rate limits, each all or nothing
-- (credits.rs): ARGV[1] the number of spends, then each spend's keys and arguments in turn
-- (a spend's keys at KEYS[ko + i], its arguments at ARGV[ao + i], ko and ao where the
-- previous spend's end):
--   KEYS[ko+1] the counter, KEYS[ko+2] its lock, KEYS[ko+3] its shard's dirty set,
--   KEYS[ko+3+i] limit i's window key (i = 1..m; all in the counter's slot)
--   ARGV[ao+1..ao+11]  key id, cost, refill start (-1: no refill), refill amount, the key's
--                creation, load (1: the row's counter follows), its remaining, last
--                refill, version, change number, the idle expiry
--   ARGV[ao+12]  m
--   ARGV[ao+10+3i], ARGV[ao+11+3i], ARGV[ao+12+3i]  limit i: limit, cost, key TTL (ms)
--   ARGV[ao+13+3m]  k, then ARGV[ao+13+3m+j] the value KEYS[ko+3+m+j] must hold (j = 1..k;
--                an absent key holds '0'): the change counters' epoch and the counters the
--                caller's answer assumed (a single Redis only: they are in another slot)
-- Limits are decided in order, each on top of the earlier ones (cost 0 passes while
-- used < limit; else used + cost <= limit). Answers, per spend, {code, remaining, then per
-- limit fitted (1/0) and used}: code 1 paid (limits taken), 0 not paid (nothing taken), 2
-- the counter is missing, 3 locked (nothing decided, no limits answered), 4 the key has no
-- credits (limits taken), 5 a limit did not fit (nothing spent or taken). `used` is after
-- the limit when taken, else the budget as it is. Code 6: an assumed value moved, nothing
-- done. Spends do not change the change counters, so each is read once per call.
local function int(x) return string.format('%.0f', x) end
local seen = {}
local function current(key)
  local v = seen[key]
  if v == nil then
    v = redis.call('GET', key) or '0'
    seen[key] = v
  end
  return v
end

local function spend(ko, ao)
  local m = tonumber(ARGV[ao + 12])
  local k = tonumber(ARGV[ao + 13 + 3 * m])
  local width = {3 + m + k, 13 + 3 * m + k}
  for j = 1, k do
    if current(KEYS[ko + 3 + m + j]) ~= ARGV[ao + 13 + 3 * m + j] then return {6, 0}, width end
  end
  if redis.call('EXISTS', KEYS[ko + 2]) == 1 then return {3, 0}, width end
  local counter = KEYS[ko + 1]
  local c = redis.call('HMGET', counter, 'r', 'l', 'n', 'u')
  local unlimited = c[4] == '1'
  if not unlimited and not c[1] and ARGV[ao + 6] ~= '1' then return {2, 0}, width end
  local before, used, fitted, all = {}, {}, {}, true
  for i = 1, m do
    local key = KEYS[ko + 3 + i]
    if used[key] == nil then
      before[key] = tonumber(redis.call('GET', key) or '0')
      used[key] = before[key]
    end
    local u, limit, cost = used[key], tonumber(ARGV[ao + 10 + 3 * i]), tonumber(ARGV[ao + 11 + 3 * i])
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
        out[2 + 2 * i] = used[KEYS[ko + 3 + i]]
      else
        out[2 + 2 * i] = before[KEYS[ko + 3 + i]]
      end
    end
    return out, width
  end
  local function take()
    for i = 1, m do
      local cost = tonumber(ARGV[ao + 11 + 3 * i])
      if cost > 0 and redis.call('INCRBY', KEYS[ko + 3 + i], cost) == cost then
        redis.call('PEXPIRE', KEYS[ko + 3 + i], ARGV[ao + 12 + 3 * i])
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
    r, l, n = tonumber(ARGV[ao + 7]), ARGV[ao + 8], tonumber(ARGV[ao + 10])
    redis.call('HSET', counter, 'r', ARGV[ao + 7], 'l', l, 'v', ARGV[ao + 9], 'n', ARGV[ao + 10])
    redis.call('PEXPIRE', counter, ARGV[ao + 11])
  else
    r, l, n = tonumber(c[1]), c[2], tonumber(c[3])
  end
  local changed = false
  local at = tonumber(ARGV[ao + 3])
  if at >= 0 then
    local last = tonumber(ARGV[ao + 5])
    if l ~= '' then last = tonumber(l) end
    if last < at then
      r, l, changed = tonumber(ARGV[ao + 4]), ARGV[ao + 3], true
    end
  end
  local cost = tonumber(ARGV[ao + 2])
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
    redis.call('HSET', counter, 'r', int(r), 'l', l, 'n', int(n))
    -- A counter is in its dirty set exactly while it has no expiry (the write-behind's
    -- SETTLE gives it one as it leaves the set): only one that joins needs PERSIST.
    if redis.call('SADD', KEYS[ko + 3], ARGV[ao + 1]) == 1 then redis.call('PERSIST', counter) end
  end
  return answer(paid, r, paid == 1)
end

local out, ko, ao = {}, 0, 1
for e = 1, tonumber(ARGV[1]) do
  local answer, width = spend(ko, ao)
  out[e] = answer
  ko, ao = ko + width[1], ao + width[2]
end
return out
