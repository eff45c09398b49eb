-- keygate's rate-limit decisions (see mod.rs), in order, for a batch of n requests that
-- names m checks (a key that must still hold a value: an overrides epoch, a change counter
-- or the change counters' epoch):
--   KEYS[1..n]       each request's window key; KEYS[n+1..n+m] the checks' keys
--   ARGV[1]          n
--   ARGV[6i-4..6i+1] request i: its overrides check, its counter check and the counters'
--                    epoch check (0: none, j: the j-th), limit, cost, key TTL (ms)
--   ARGV[6n+1+j]     the value the j-th check's key must hold (0 when the key is absent)
-- Answers {answer, used} per request: 1 passed, 0 denied, 2 stale overrides, 3 stale
-- counter (nothing done for either).
--
-- A charge adds first and takes back on a denial (nobody sees the difference: a script
-- runs alone), so a passing request costs one command. A key never holds 0: the only
-- charge that finds no key (INCRBY answers the cost) creates it, and sets its expiry
-- then; taking back such a charge deletes the key. Counts reach at most 2^53 - 1 plus one
-- cost, below 2^54: a double (a Lua number) that rounds such a count keeps it above any
-- limit, and the counts answered are Redis's own integers, each at most a limit.
local n = tonumber(ARGV[1])
local current = {[0] = true}
for j = 1, #KEYS - n do
  current[j] = (redis.call('GET', KEYS[n + j]) or '0') == ARGV[6 * n + 1 + j]
end
local out = {}
for i = 1, n do
  local key, a = KEYS[i], 6 * i - 4
  local limit, cost = tonumber(ARGV[a + 3]), ARGV[a + 4]
  if not (current[tonumber(ARGV[a + 1])] and current[tonumber(ARGV[a + 2])]) then
    out[2 * i - 1], out[2 * i] = 3, 0
  elseif not current[tonumber(ARGV[a])] then
    out[2 * i - 1], out[2 * i] = 2, 0
  elseif cost == '0' then
    local used = tonumber(redis.call('GET', key) or '0')
    out[2 * i - 1], out[2 * i] = (used < limit) and 1 or 0, used
  else
    local used = redis.call('INCRBY', key, cost)
    local created = used == tonumber(cost)
    if used <= limit then
      if created then
        redis.call('PEXPIRE', key, ARGV[a + 5])
      end
      out[2 * i - 1], out[2 * i] = 1, used
    elseif created then
      redis.call('DEL', key)
      out[2 * i - 1], out[2 * i] = 0, 0
    else
      out[2 * i - 1], out[2 * i] = 0, redis.call('DECRBY', key, cost)
    end
  end
end
return out
