-- keygate's rate-limit decisions (see mod.rs) for a batch of f flushes, n fixed-window
-- decisions and g decisions of other algorithms (sliding windows, token buckets: the
-- functions of `algorithms.lua`, which this source follows), naming m checks (a key that
-- must still hold a value: an overrides epoch, a change counter or the counters' epoch):
--   KEYS[1..f]        each flush's window key; KEYS[f+1..f+n] each fixed decision's window
--                     key; then each algorithm decision's keys in turn (sliding: the
--                     current window's count, and the previous one's when its count is not
--                     given; bucket: its instant); then the m checks' keys
--   ARGV[1..3]        f, n, g
--   ARGV[2i+2..2i+3]  flush i: its tokens, key TTL (ms)
--   ARGV[b+4i-3..b+4i] (b = 3 + 2f) fixed decision i: its checks, limit, cost, key TTL
--                     (ms); its checks are one number, o + 1024 c + 1048576 e: the overrides
--                     check o, the counter check c and the counters' epoch check e (0: none,
--                     j: the j-th; a batch names fewer than 1024)
--   ARGV[a+1..]       (a = b + 4n, then past the decision before) algorithm decision i:
--                     its checks, then 's' (sliding), limit L, cost, duration D (ms), ms
--                     into the current window, the keys' TTL (ms), the previous window's
--                     count when the caller knows it (else -1): 8 numbers; or 'b'
--                     (bucket), L, cost, D, now (ms), floor(cost·D/L) (ms) and cost·D
--                     mod L (in 1/L ms), one token's (floor(D/L), D mod L), the expiry's
--                     slack (ms): 11 numbers
--   ARGV[v+j]         (v: past the last decision's numbers) the value the j-th check's key
--                     must hold (0 when the key is absent)
-- A flush adds tokens that `async: true` requests passed locally (deferred.rs), whatever
-- the count. Flushes run first: a batch never holds a flush queued after a decision on
-- the same window (deferred.rs), so this keeps each window's order.
-- Answers {answer, used} per flush (1, the count after), then per fixed decision: 1
-- passed, 0 denied, 2 stale overrides, 3 stale counter (nothing done for either); then
-- {answer, x, y} per algorithm decision (sliding: x = the previous window's count, y =
-- the current window's count after; bucket: x = the instant's ms, y = its remainder).
--
-- A charge adds first and takes back on a denial (nobody sees the difference: a script
-- runs alone), so a passing request costs one command. A key never holds 0: the only
-- charge that finds no key (INCRBY answers the cost) creates it, and sets its expiry
-- then; taking back such a charge deletes the key. Counts reach at most 2^53 - 1 plus one
-- cost, below 2^54: a double (a Lua number) that rounds such a count keeps it above any
-- limit, and the counts answered are Redis's own integers, each at most a limit.
local f, n, g = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 1, f do
  local tokens = ARGV[2 * i + 2]
  local used = redis.call('INCRBY', KEYS[i], tokens)
  if used == tonumber(tokens) then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 3])
  end
  out[2 * i - 1], out[2 * i] = 1, used
end
local b = 3 + 2 * f
-- Past the decisions' numbers (sliding 8, bucket 11) and keys (sliding 1 or 2, bucket 1).
local values, checked = b + 4 * n, f + n
for _ = 1, g do
  if ARGV[values + 2] ~= 's' then
    values, checked = values + 11, checked + 1
  elseif ARGV[values + 8] == '-1' then
    values, checked = values + 8, checked + 2
  else
    values, checked = values + 8, checked + 1
  end
end
local current = {[0] = true}
for j = 1, #KEYS - checked do
  current[j] = (redis.call('GET', KEYS[checked + j]) or '0') == ARGV[values + j]
end
-- 3 stale counter, 2 stale overrides, else nil.
local function stale(checks)
  if not (current[math.floor(checks / 1024) % 1024] and current[math.floor(checks / 1048576)]) then
    return 3
  elseif not current[checks % 1024] then
    return 2
  end
end
for i = 1, n do
  local key, a, o = KEYS[f + i], b + 4 * i - 3, 2 * (f + i)
  local limit, cost = tonumber(ARGV[a + 1]), ARGV[a + 2]
  local refused = stale(tonumber(ARGV[a]))
  if refused then
    out[o - 1], out[o] = refused, 0
  elseif cost == '0' then
    local used = tonumber(redis.call('GET', key) or '0')
    out[o - 1], out[o] = (used < limit) and 1 or 0, used
  else
    local used = redis.call('INCRBY', key, cost)
    local created = used == tonumber(cost)
    if used <= limit then
      if created then
        redis.call('PEXPIRE', key, ARGV[a + 3])
      end
      out[o - 1], out[o] = 1, used
    elseif created then
      redis.call('DEL', key)
      out[o - 1], out[o] = 0, 0
    else
      out[o - 1], out[o] = 0, redis.call('DECRBY', key, cost)
    end
  end
end
local o, a, k = 2 * (f + n), b + 4 * n, f + n + 1
for _ = 1, g do
  local refused = stale(tonumber(ARGV[a + 1]))
  local answer, x, y = refused, 0, 0
  local limit, cost, d = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  if ARGV[a + 2] == 's' then
    local known = tonumber(ARGV[a + 8])
    if not refused then
      answer, x, y = sliding(KEYS[k], KEYS[k + 1], limit, cost, ARGV[a + 4], d, tonumber(ARGV[a + 6]), ARGV[a + 7], known)
    end
    a, k = a + 8, (known < 0) and k + 2 or k + 1
  else
    if not refused then
      answer, x, y = bucket(KEYS[k], limit, cost, d, tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]),
        tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9]), tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11]))
    end
    a, k = a + 11, k + 1
  end
  out[o + 1], out[o + 2], out[o + 3] = answer, x, y
  o = o + 3
end
return out
