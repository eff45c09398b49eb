-- How an API's keys are made (API-v2.md §24): 'plain' (every API before formats were) or
-- 'checksum' (GitHub's token shape with a CRC32 checksum).
ALTER TABLE apis ADD COLUMN key_format TEXT NOT NULL DEFAULT 'plain';
