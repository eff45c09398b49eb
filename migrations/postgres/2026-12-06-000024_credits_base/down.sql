ALTER TABLE keys DROP COLUMN credits_base;
