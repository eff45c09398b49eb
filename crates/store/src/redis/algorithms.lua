-- keygate's sliding-window and token-bucket decisions (API-v2.md §26) for one budget, as
-- keygate_ratelimit::algorithm defines them, exact: every number handled below is an
-- integer under 2^53 (a double holds it exactly), products of two of them never formed.
--   KEYS[1]   sliding: the current window's count; bucket: the bucket's instant "ms:r"
--   KEYS[2]   sliding: the previous window's count (bucket: KEYS[1] again, unused)
--   KEYS[3..] the checks (keys that must still hold a value), when the caller names any
--   ARGV[1]   'sliding' or 'bucket'
--   ARGV[2]   limit L    ARGV[3] cost    ARGV[4] duration D (ms)    ARGV[5] now (ms)
--   ARGV[6]   sliding: ms into the current window; bucket: floor(cost·D/L) (ms)
--   ARGV[7]   bucket: cost·D mod L (in 1/L ms)
--   ARGV[8], ARGV[9]  bucket: floor(D/L) and D mod L (one token)
--   ARGV[10]  the key's TTL (ms)
--   ARGV[11]  the checks' kinds, one character each: 'o' overrides epoch, 'c' a change
--             counter or the counters' epoch; ARGV[12..] the values their keys must hold
-- Answers {answer, a, b}: answer 1 passed, 0 denied, 2 stale overrides, 3 stale counter
-- (nothing done for either); sliding: a = the previous window's weighted count, b = the
-- current window's count after; bucket: a = the instant's ms, b = its remainder.
-- Given back (ARGV[1] 'sliding_back' or 'bucket_back', no checks): the tokens of a pass
-- whose caller's next step failed. Sliding: KEYS[1] loses min(its count, cost); bucket:
-- the instant moves back by floor(cost·D/L) ms (ARGV[6]) and cost·D mod L (ARGV[7]), the
-- key deleted when that makes the bucket full. Answers {1, 0, 0}.
if ARGV[1] == 'sliding_back' then
  local used = tonumber(redis.call('GET', KEYS[1]) or '-1')
  if used > 0 then
    redis.call('DECRBY', KEYS[1], math.min(used, tonumber(ARGV[3])))
  end
  return {1, 0, 0}
end
if ARGV[1] == 'bucket_back' then
  local stored = redis.call('GET', KEYS[1])
  if stored then
    local limit, now = tonumber(ARGV[2]), tonumber(ARGV[5])
    local sep = string.find(stored, ':', 1, true)
    local ms, r = tonumber(string.sub(stored, 1, sep - 1)), tonumber(string.sub(stored, sep + 1))
    local q, s = tonumber(ARGV[6]), tonumber(ARGV[7])
    if r >= limit then ms, r = ms + 1, 0 end -- the limit went down: round up, as a decision does
    if r >= s then r = r - s else ms, r = ms - 1, r + limit - s end
    ms = ms - q
    if ms < now or (ms == now and r == 0) then
      redis.call('DEL', KEYS[1])
    else
      redis.call('SET', KEYS[1], string.format('%d:%d', ms, r), 'KEEPTTL')
    end
  end
  return {1, 0, 0}
end
local kinds = ARGV[11] or ''
local stale = 0
for j = 1, #kinds do
  if (redis.call('GET', KEYS[2 + j]) or '0') ~= ARGV[11 + j] then
    local answer = (kinds:sub(j, j) == 'c') and 3 or 2
    if answer > stale then stale = answer end
  end
end
if stale > 0 then
  return {stale, 0, 0}
end

local limit, cost, d, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl = ARGV[10]

-- floor(x / y) for integers 0 <= x, 0 < y, under 2^53: the quotient and the remainder.
local function divmod(x, y)
  local q = math.floor(x / y)
  local r = x - q * y
  if r < 0 then q, r = q - 1, r + y elseif r >= y then q, r = q + 1, r - y end
  return q, r
end

-- floor(p · u / d) for 0 <= p, 0 <= u <= d, all under 2^53: long multiplication by the
-- bits of u, keeping the running product as q·d + r (r < d), so no sum passes 2^53.
local function muldiv(p, u, dd)
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

if ARGV[1] == 'sliding' then
  local c = tonumber(redis.call('GET', KEYS[1]) or '0')
  local p = tonumber(redis.call('GET', KEYS[2]) or '0')
  local weighted = muldiv(p, d - tonumber(ARGV[6]), d)
  local room = limit - weighted - c -- may be negative: exact all the same
  if cost == 0 then
    return {(room > 0) and 1 or 0, weighted, c}
  end
  if room < cost then
    return {0, weighted, c}
  end
  local used = redis.call('INCRBY', KEYS[1], ARGV[3])
  if used == cost then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
  return {1, weighted, used}
end

-- The bucket: its instant z = ms + r/L (r < L); z <= now is a full bucket.
local ms, r = now, 0
local stored = redis.call('GET', KEYS[1])
if stored then
  local sep = string.find(stored, ':', 1, true)
  ms, r = tonumber(string.sub(stored, 1, sep - 1)), tonumber(string.sub(stored, sep + 1))
  if r >= limit then ms, r = ms + 1, 0 end -- the limit went down: round up
  if ms < now or (ms == now and r == 0) then ms, r = now, 0 end
end
-- z + q + s/L, as (ms, r) with r < L.
local function add(q, s)
  if r >= limit - s then return ms + q + 1, r - (limit - s) end
  return ms + q, r + s
end
-- Passes when the debt after it is at most D: z' − now <= D.
local function fits(m, s)
  return m - now < d or (m - now == d and s == 0)
end
if cost == 0 then
  local m, s = add(tonumber(ARGV[8]), tonumber(ARGV[9]))
  return {fits(m, s) and 1 or 0, ms, r}
end
local m, s = add(tonumber(ARGV[6]), tonumber(ARGV[7]))
if not fits(m, s) then
  return {0, ms, r}
end
redis.call('SET', KEYS[1], string.format('%d:%d', m, s), 'PX', ttl)
return {1, m, s}
