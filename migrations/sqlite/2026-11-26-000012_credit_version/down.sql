ALTER TABLE keys DROP COLUMN credit_seq;
ALTER TABLE keys DROP COLUMN credit_version;
