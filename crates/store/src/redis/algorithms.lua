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

-- The bucket's instant "ms:r" (`stored`, nil when none): z = ms + r/L (r < L); z <= now
-- is a full bucket (so is no instant: answered as now). A third field (":e", written by
-- earlier versions) is ignored. Answers ms, r, and the stored ms as it is.
local function parse(stored, limit, now)
  if not stored then
    return now, 0, now
  end
  local ms, r = string.match(stored, '^(%d+):(%d+)')
  ms, r = tonumber(ms), tonumber(r)
  if r >= limit then return ms + 1, 0, ms end -- the limit went down: round up
  return ms, r, ms
end

-- The bucket's instant at `key` (see `parse`), and whether it is stored.
local function instant(key, limit, now)
  local stored = redis.call('GET', key)
  local ms, r = parse(stored, limit, now)
  return ms, r, stored ~= nil
end

-- Sets the bucket's expiry for its new instant `m` when `m` is in a later D-long epoch than
-- the instant stored before (`was`, nil when the key is new): to the end of the epoch after
-- `m`'s, plus `slack`, so it is always past the end of the epoch after the stored instant's.
local function expire(key, m, was, d, now, slack)
  local epoch = divmod(m, d)
  if was == nil or epoch > divmod(was, d) then
    redis.call('PEXPIRE', key, (epoch + 2) * d + slack - now)
  end
end

-- z + q + s/L after a bucket's instant (ms, r) moved to now when full, as (m, t), t < L.
local function after(ms, r, now, limit, q, s)
  if ms < now or (ms == now and r == 0) then ms, r = now, 0 end
  local m, t = ms + q, r + s
  if r >= limit - s then m, t = m + 1, r - (limit - s) end
  return m, t
end

-- A token bucket (GCRA): the cost moves its instant by q + s/L ms (q = floor(cost·D/L),
-- s = cost·D mod L); one token by oq + os/L. Passes when the debt after it is at most D.
-- A charge writes first the instant a full bucket would have after it (most budgets are
-- full: one command, `SET ... GET`), and, when the old instant says the bucket was not,
-- writes what the old one gives (a pass) or the old value back (a denial). The key must
-- outlive its instant: its expiry is at least the end of the D-long epoch after the
-- instant's own (epochs floor(ms / D)) plus `slack`; a write that moves the instant into a
-- later epoch (or creates the key) sets it again, to two epochs past the new instant's,
-- so a busy bucket sets it about once a duration.
-- Answers {answer, the instant's ms, its remainder} after the call.
local function bucket(key, limit, cost, d, now, q, s, oq, os, slack)
  if cost > 0 and (q < d or (q == d and s == 0)) then
    local m, t = now + q, s
    local stored = redis.call('SET', key, string.format('%d:%d', m, t), 'KEEPTTL', 'GET')
    local ms, r, was = parse(stored, limit, now)
    if not stored then was = nil end
    if not (ms > now or (ms == now and r > 0)) then
      expire(key, m, was, d, now, slack)
      return 1, m, t
    end
    m, t = after(ms, r, now, limit, q, s)
    if m - now < d or (m - now == d and t == 0) then
      redis.call('SET', key, string.format('%d:%d', m, t), 'KEEPTTL')
      expire(key, m, was, d, now, slack)
      return 1, m, t
    end
    redis.call('SET', key, stored, 'KEEPTTL')
    return 0, ms, r
  end
  -- A read (one token's worth), or a cost more than a full bucket holds: nothing written.
  local ms, r = instant(key, limit, now)
  if cost == 0 then q, s = oq, os end
  local m, t = after(ms, r, now, limit, q, s)
  local passes = m - now < d or (m - now == d and t == 0)
  if ms < now or (ms == now and r == 0) then ms, r = now, 0 end
  return (passes and cost == 0) and 1 or 0, ms, r
end
