DROP INDEX IF EXISTS ratelimits_key;
DROP INDEX keys_identity;
ALTER TABLE keys DROP COLUMN identity_id;
DROP TABLE ratelimits;
DROP TABLE identities;
