-- keygate's credit spends with their keys' own rate limits, each all or nothing
-- (credits.rs). KEYS: every key the call's spends name, each once, the assumed ones (see
-- below) first. ARGV[1]: a MessagePack array (one Lua table, read in place): the number
-- A of assumed keys at the head of KEYS, the number of spends, then each spend's fields
-- in turn (k: an index into KEYS; s: a string; else a number):
--   key id (s), counter (k), its lock (k), its shard's dirty set (k), cost,
--   refill start (-1: no refill), refill amount, the key's creation,
--   load (1: the row's counter follows, used where Redis holds none): remaining (s),
--   last refill (s, '' never), version (s), change number; the idle expiry (ms),
--   m, then per limit: window key (k), limit, cost, the window key's TTL (ms),
--   j, then per assumed value: its key (k, one of the A), the value (s) it must hold ('0'
--   when absent): the change counters' epoch and the counters the caller's answer assumed
--   (a single Redis only: they are in another slot). The A keys are read in one MGET.
-- Limits are decided in order, each on top of the earlier ones (cost 0 passes while
-- used < limit; else used + cost <= limit). Answers, per spend, {code, remaining, then per
-- limit fitted (1/0) and used}: code 1 paid (limits taken), 0 not paid (nothing taken), 2
-- the counter is missing, 3 locked (nothing decided, no limits answered), 4 the key has no
-- credits (limits taken), 5 a limit did not fit (nothing spent or taken). `used` is after
-- the limit when taken, else the budget as it is. Code 6: an assumed value moved, nothing
-- done. Spends do not change the change counters, so each is read once per call.
--
-- The counter's hash (credits.rs) carries two marks besides its values, so a spend reads
-- them with the values instead of asking other keys: `x`, set while an update's lock may
-- be held (the lock key itself says whether it is), and `d`, set while the counter is in
-- its dirty set (which it is exactly while it has no expiry).
local function int(x) return string.format('%.0f', x) end
local t = cmsgpack.unpack(ARGV[1])
local held = {}
if t[1] > 0 then
  local values = redis.call('MGET', unpack(KEYS, 1, t[1]))
  for i = 1, t[1] do held[i] = values[i] or '0' end
end

-- A spend's answer: code, remaining, then per limit (its window key's index at t[w],
-- every 4 from the first w) fitted and used (after the spend when taken, else before).
local function answer(code, remaining, m, w, fitted, used, before, taken)
  local out = {code, remaining}
  for i = 1, m do
    local key = t[w + 4 * (i - 1)]
    out[1 + 2 * i] = fitted[i]
    if taken then out[2 + 2 * i] = used[key] else out[2 + 2 * i] = before[key] end
  end
  return out
end

-- The spend whose fields start at t[o]: its answer, and where the next one starts.
local function spend(o)
  local m = t[o + 14]
  local w = o + 15 -- the first limit's window key
  local j = t[w + 4 * m]
  local a = w + 4 * m + 1 -- the first assumed key
  local next = a + 2 * j
  for i = 0, j - 1 do
    if held[t[a + 2 * i]] ~= t[a + 2 * i + 1] then return {6, 0}, next end
  end
  local counter = KEYS[t[o + 1]]
  local c = redis.call('HMGET', counter, 'r', 'l', 'n', 'u', 'x', 'd')
  if c[5] or not (c[1] or c[4]) then
    -- Marked locked, or no counter (one may be loaded only when no lock is held).
    if redis.call('EXISTS', KEYS[t[o + 2]]) == 1 then return {3, 0}, next end
    if c[5] then redis.call('HDEL', counter, 'x') end
  end
  local unlimited = c[4] == '1'
  if not unlimited and not c[1] and t[o + 8] ~= 1 then return {2, 0}, next end
  -- The credits, and the refill due, as they would be (nothing written yet).
  local r, l, n, load
  if unlimited then
  elseif not c[1] then
    r, l, n, load = tonumber(t[o + 9]), t[o + 10], t[o + 12], true
  else
    r, l, n = tonumber(c[1]), c[2], tonumber(c[3])
  end
  local changed = false
  if not unlimited and t[o + 5] >= 0 then
    local last = t[o + 7]
    if l ~= '' then last = tonumber(l) end
    if last < t[o + 5] then
      r, l, changed = t[o + 6], int(t[o + 5]), true
    end
  end
  local cost = t[o + 4]
  local pays = unlimited or (r > 0 and r >= cost)
  -- The limits: taken at once when the spend pays (each given back unless all fit), else
  -- only read.
  local before, used, fitted, all = {}, {}, {}, true
  for i = 1, m do
    local at = w + 4 * (i - 1)
    local k, limit, lc = t[at], t[at + 1], t[at + 2]
    local u = used[k]
    if pays and lc > 0 then
      local now = redis.call('INCRBY', KEYS[k], lc)
      if now == lc then redis.call('PEXPIRE', KEYS[k], t[at + 3]) end
      u = now - lc
      if before[k] == nil then before[k] = u end
      if u + lc <= limit then
        used[k], fitted[i] = now, 1
      else
        redis.call('DECRBY', KEYS[k], lc)
        used[k], fitted[i], all = u, 0, false
      end
    else
      if u == nil then
        u = tonumber(redis.call('GET', KEYS[k]) or '0')
        before[k] = u
      end
      local fits
      if lc == 0 then fits = u < limit else fits = u + lc <= limit end
      if fits then used[k], fitted[i] = u + lc, 1 else used[k], fitted[i], all = u, 0, false end
    end
  end
  if not all then
    if pays then
      -- Give back what was taken.
      for i = 1, m do
        local at = w + 4 * (i - 1)
        if fitted[i] == 1 and t[at + 2] > 0 then redis.call('DECRBY', KEYS[t[at]], t[at + 2]) end
      end
    end
    return answer(5, 0, m, w, fitted, used, before, false), next
  end
  if unlimited then return answer(4, 0, m, w, fitted, used, before, true), next end
  if load then
    redis.call('HSET', counter, 'r', t[o + 9], 'l', t[o + 10], 'v', t[o + 11], 'n', int(t[o + 12]))
    redis.call('PEXPIRE', counter, t[o + 13])
  end
  if pays and cost > 0 then r, changed = r - cost, true end
  if changed then
    n = n + 1
    if c[6] == '1' then
      redis.call('HSET', counter, 'r', int(r), 'l', l, 'n', int(n))
    else
      redis.call('HSET', counter, 'r', int(r), 'l', l, 'n', int(n), 'd', '1')
      if redis.call('SADD', KEYS[t[o + 3]], t[o]) == 1 then redis.call('PERSIST', counter) end
    end
  end
  return answer(pays and 1 or 0, r, m, w, fitted, used, before, pays), next
end

local out, o = {}, 3
for e = 1, t[2] do
  out[e], o = spend(o)
end
return out
