ALTER TABLE keys DROP COLUMN allowed_ips;
ALTER TABLE identities DROP COLUMN allowed_ips;
ALTER TABLE apis DROP COLUMN allowed_ips;
