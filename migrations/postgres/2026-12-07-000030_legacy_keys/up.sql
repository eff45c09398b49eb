-- Keys from other systems (API-v2.md §25), waiting for their first use: the slow hash
-- their old system kept and the lookup part that finds them. The key itself is stored
-- under the placeholder hash `legacy:<key id>` until a verification matches the old hash
-- and stores it under keygate's; this row then goes. Goes with the key.
CREATE TABLE legacy_keys (
    key_id TEXT PRIMARY KEY NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
    workspace_id TEXT NOT NULL,
    lookup TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX legacy_keys_lookup ON legacy_keys (lookup);
CREATE INDEX legacy_keys_hash ON legacy_keys (hash);
