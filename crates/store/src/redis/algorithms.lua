-- keygate's sliding-window and token-bucket decisions (API-v2.md §26) for one budget, as
-- keygate_ratelimit::algorithm defines them, exact: every number handled below is an
-- integer under 2^53 (a double holds it exactly), products of two of them never formed.
-- Functions only: the scripts that run them are this source followed by `decide.lua`
-- (decisions, batched) or by `give_back.lua` (tokens given back).

-- floor(x / y) for integers 0 <= x, 0 < y, under 2^53: the quotient and the remainder.
local function divmod(x, y)
  local q = math.floor(x / y)
  local r = x - q * y
  if r < 0 then q, r = q - 1, r + y elseif r >= y then q, r = q + 1, r - y end
  return q, r
end

-- floor(p · u / d) for 0 <= p, 0 <= u <= d, all under 2^53: directly when p · u is under
-- 2^53 (a double product at or past 2^53 never rounds below it, so the test is exact);
-- else long multiplication by the bits of u, keeping the running product as q·d + r
-- (r < d), so no sum passes 2^53.
local function muldiv(p, u, dd)
  if p * u < 9007199254740992 then
    return (divmod(p * u, dd))
  end
  local a, b = divmod(p, dd)
  local q, r = 0, 0
  local bit = 4503599627370496 -- 2^52
  while bit >= 1 do
    q = q * 2
    if r >= dd - r then r, q = r - (dd - r), q + 1 else r = r * 2 end
    if u >= bit then
      u = u - bit
      q = q + a
      if r >= dd - b then r, q = r - (dd - b), q + 1 else r = r + b end
    end
    bit = bit / 2
  end
  return q
end

-- A sliding window: `current` and `previous` hold the two windows' counts; `into` is the
-- ms into the current window (D the duration); `cost` a number, `cost_arg` its string.
-- Answers {answer, the previous window's weighted count, the current one's after}.
local function sliding(current, previous, limit, cost, cost_arg, d, into, ttl)
  local counts = redis.call('MGET', current, previous)
  local c, p = tonumber(counts[1] or '0'), tonumber(counts[2] or '0')
  local weighted = muldiv(p, d - into, d)
  local room = limit - weighted - c -- may be negative: exact all the same
  if cost == 0 then
    return (room > 0) and 1 or 0, weighted, c
  end
  if room < cost then
    return 0, weighted, c
  end
  local used = redis.call('INCRBY', current, cost_arg)
  if used == cost then
    redis.call('PEXPIRE', current, ttl)
  end
  return 1, weighted, used
end

-- The bucket's instant "ms:r" at `key`: z = ms + r/L (r < L); z <= now is a full bucket.
local function instant(key, limit, now)
  local ms, r = now, 0
  local stored = redis.call('GET', key)
  if stored then
    local sep = string.find(stored, ':', 1, true)
    ms, r = tonumber(string.sub(stored, 1, sep - 1)), tonumber(string.sub(stored, sep + 1))
    if r >= limit then ms, r = ms + 1, 0 end -- the limit went down: round up
  end
  return ms, r, stored ~= nil
end

-- A token bucket (GCRA): the cost moves its instant by q + s/L ms (q = floor(cost·D/L),
-- s = cost·D mod L); one token by oq + os/L. Passes when the debt after it is at most D.
-- Answers {answer, the instant's ms, its remainder} after the call.
local function bucket(key, limit, cost, d, now, q, s, oq, os, ttl)
  local ms, r = instant(key, limit, now)
  if ms < now or (ms == now and r == 0) then ms, r = now, 0 end
  -- z + q + s/L, as (m, t) with t < L (one token's when the call only reads).
  if cost == 0 then q, s = oq, os end
  local m, t = ms + q, r + s
  if r >= limit - s then m, t = m + 1, r - (limit - s) end
  if not (m - now < d or (m - now == d and t == 0)) then
    return 0, ms, r
  end
  if cost == 0 then
    return 1, ms, r
  end
  redis.call('SET', key, string.format('%d:%d', m, t), 'PX', ttl)
  return 1, m, t
end
