ALTER TABLE apis DROP COLUMN key_format;
