-- Credits (API-v2.md §12.1): a key's remaining uses (NULL: unlimited) and how they refill
-- (`daily` or `monthly` on `refill_day`, to `refill_amount`; `last_refill_at` records the
-- last refill). And what a reroll copies: the secret's prefix and random byte length
-- (NULL for keys made before, and for v1's form).
ALTER TABLE keys ADD COLUMN credits_remaining BIGINT;
ALTER TABLE keys ADD COLUMN refill_interval TEXT;
ALTER TABLE keys ADD COLUMN refill_amount BIGINT;
ALTER TABLE keys ADD COLUMN refill_day BIGINT;
ALTER TABLE keys ADD COLUMN last_refill_at BIGINT;
ALTER TABLE keys ADD COLUMN key_prefix TEXT;
ALTER TABLE keys ADD COLUMN byte_length BIGINT;
