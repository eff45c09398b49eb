-- GitHub's secret scanning (API-v2.md §24): the first report of each leaked key, so that the
-- same token reported again changes nothing more. Goes with the key.
CREATE TABLE leaked_keys (
    key_id TEXT PRIMARY KEY NOT NULL REFERENCES keys (id) ON DELETE CASCADE,
    workspace_id TEXT NOT NULL,
    url TEXT NOT NULL,
    source TEXT NOT NULL,
    action TEXT NOT NULL,
    reported_at BIGINT NOT NULL
);
