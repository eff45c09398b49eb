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
-- ms into the current window (D the duration); `cost` a number, `cost_arg` its string;
-- `known` the previous window's count when the caller kept it (finished.rs), else -1.
-- Answers {answer, the previous window's count, the current one's after}. A charge adds
-- first and takes back on a denial, as a fixed window's does (decide.lua): a pass is one
-- command, and one more when the previous window is read.
local function sliding(current, previous, limit, cost, cost_arg, d, into, ttl, known)
  local p = known
  if p < 0 then
    p = tonumber(redis.call('GET', previous) or '0')
  end
  local weighted = muldiv(p, d - into, d)
  if weighted >= limit then
    return 0, p, 0 -- nothing remains whatever the current count
  end
  if cost == 0 then
    local c = tonumber(redis.call('GET', current) or '0')
    return (c < limit - weighted) and 1 or 0, p, c
  end
  local used = redis.call('INCRBY', current, cost_arg)
  local created = used == cost
  if used <= limit - weighted then
    if created then
      redis.call('PEXPIRE', current, ttl)
    end
    return 1, p, used
  elseif created then
    redis.call('DEL', current)
    return 0, p, 0
  end
  return 0, p, redis.call('DECRBY', current, cost_arg)
end

-- The bucket's instant "ms:r:e" at `key`: z = ms + r/L (r < L); z <= now is a full bucket;
-- e the instant (ms, the deciding instances' clock) the key's expiry was set for (0: not
-- known, as in the "ms:r" of earlier versions). Answers ms, r, e, and whether it is stored.
local function instant(key, limit, now)
  local stored = redis.call('GET', key)
  if not stored then
    return now, 0, 0, false
  end
  local ms, r, e = string.match(stored, '^(%d+):(%d+):?(%d*)$')
  ms, r, e = tonumber(ms), tonumber(r), tonumber(e) or 0
  if r >= limit then ms, r = ms + 1, 0 end -- the limit went down: round up
  return ms, r, e, true
end

-- A token bucket (GCRA): the cost moves its instant by q + s/L ms (q = floor(cost·D/L),
-- s = cost·D mod L); one token by oq + os/L. Passes when the debt after it is at most D.
-- The key must outlive its instant (the bucket is full after it): while the expiry set
-- before is more than `slack` ms past the new instant it is kept (`KEEPTTL`, the cheaper
-- write), else set again to 2D + q + slack ms from now (at least D + slack past the
-- instant, so a busy bucket sets it about once a duration).
-- Answers {answer, the instant's ms, its remainder} after the call.
local function bucket(key, limit, cost, d, now, q, s, oq, os, slack)
  local ms, r, e = instant(key, limit, now)
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
  if e - m > slack then
    redis.call('SET', key, string.format('%d:%d:%d', m, t, e), 'KEEPTTL')
  else
    local ttl = 2 * d + q + slack
    redis.call('SET', key, string.format('%d:%d:%d', m, t, now + ttl), 'PX', ttl)
  end
  return 1, m, t
end
