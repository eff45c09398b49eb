-- The tokens of a sliding window's or a bucket's pass given back, when its caller's next
-- step failed (an all-or-nothing call whose later budget did not fit). Runs after
-- `algorithms.lua`'s functions.
--   KEYS[1]   sliding: the window's count; bucket: its instant
--   ARGV[1]   'sliding' or 'bucket'    ARGV[2] limit L    ARGV[3] cost    ARGV[4] now (ms)
--   ARGV[5], ARGV[6]  bucket: floor(cost·D/L) (ms) and cost·D mod L (in 1/L ms)
-- Sliding: the count loses min(itself, cost); bucket: the instant moves back by that much,
-- the key deleted when that makes the bucket full. Answers 1.
if ARGV[1] == 'sliding' then
  local used = tonumber(redis.call('GET', KEYS[1]) or '-1')
  if used > 0 then
    redis.call('DECRBY', KEYS[1], math.min(used, tonumber(ARGV[3])))
  end
  return 1
end
local limit, now = tonumber(ARGV[2]), tonumber(ARGV[4])
local ms, r, stored = instant(KEYS[1], limit, now)
if stored then
  local q, s = tonumber(ARGV[5]), tonumber(ARGV[6])
  if r >= s then r = r - s else ms, r = ms - 1, r + limit - s end
  ms = ms - q
  if ms < now or (ms == now and r == 0) then
    redis.call('DEL', KEYS[1])
  else
    redis.call('SET', KEYS[1], string.format('%d:%d', ms, r), 'KEEPTTL')
  end
end
return 1
