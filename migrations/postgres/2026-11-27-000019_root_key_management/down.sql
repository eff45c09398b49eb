ALTER TABLE root_keys DROP COLUMN last_used_at;
ALTER TABLE root_keys DROP COLUMN end_chars;
ALTER TABLE root_keys DROP COLUMN enabled;
ALTER TABLE root_keys DROP COLUMN name;
