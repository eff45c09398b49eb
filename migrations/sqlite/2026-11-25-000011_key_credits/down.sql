ALTER TABLE keys DROP COLUMN byte_length;
ALTER TABLE keys DROP COLUMN key_prefix;
ALTER TABLE keys DROP COLUMN last_refill_at;
ALTER TABLE keys DROP COLUMN refill_day;
ALTER TABLE keys DROP COLUMN refill_amount;
ALTER TABLE keys DROP COLUMN refill_interval;
ALTER TABLE keys DROP COLUMN credits_remaining;
