-- keygate's rate-limit decisions (see mod.rs) for a batch of f flushes and n decisions that
-- name m checks (a key that must still hold a value: an overrides epoch, a change counter
-- or the change counters' epoch):
--   KEYS[1..f]        each flush's window key; KEYS[f+1..f+n] each decision's window key;
--                     KEYS[f+n+1..f+n+m] the checks' keys
--   ARGV[1], ARGV[2]  f, n
--   ARGV[2i+1..2i+2]  flush i: its tokens, key TTL (ms)
--   ARGV[b+4i-3..b+4i] (b = 2 + 2f) decision i: its checks, limit, cost, key TTL (ms); its
--                     checks are one number, o + 1024 c + 1048576 e: the overrides check o,
--                     the counter check c and the counters' epoch check e (0: none, j: the
--                     j-th; a batch names fewer than 1024)
--   ARGV[b+4n+j]      the value the j-th check's key must hold (0 when the key is absent)
-- A flush adds tokens that `async: true` requests passed locally (deferred.rs), whatever
-- the count. Flushes run first: a batch never holds a flush queued after a decision on
-- the same window (deferred.rs), so this keeps each window's order.
-- Answers {answer, used} per flush (1, the count after), then per decision: 1 passed,
-- 0 denied, 2 stale overrides, 3 stale counter (nothing done for either).
--
-- A charge adds first and takes back on a denial (nobody sees the difference: a script
-- runs alone), so a passing request costs one command. A key never holds 0: the only
-- charge that finds no key (INCRBY answers the cost) creates it, and sets its expiry
-- then; taking back such a charge deletes the key. Counts reach at most 2^53 - 1 plus one
-- cost, below 2^54: a double (a Lua number) that rounds such a count keeps it above any
-- limit, and the counts answered are Redis's own integers, each at most a limit.
local f, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 1, f do
  local tokens = ARGV[2 * i + 1]
  local used = redis.call('INCRBY', KEYS[i], tokens)
  if used == tonumber(tokens) then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i + 2])
  end
  out[2 * i - 1], out[2 * i] = 1, used
end
local b = 2 + 2 * f
local current = {[0] = true}
for j = 1, #KEYS - f - n do
  current[j] = (redis.call('GET', KEYS[f + n + j]) or '0') == ARGV[b + 4 * n + j]
end
for i = 1, n do
  local key, a, o = KEYS[f + i], b + 4 * i - 3, 2 * (f + i)
  local checks, limit, cost = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]
  if not (current[math.floor(checks / 1024) % 1024] and current[math.floor(checks / 1048576)]) then
    out[o - 1], out[o] = 3, 0
  elseif not current[checks % 1024] then
    out[o - 1], out[o] = 2, 0
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
return out
