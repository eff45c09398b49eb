-- Verification analytics (API-v2.md §14): counts per series and time bucket. `width` is the
-- bucket's length (60000: a minute, 3600000: an hour, 86400000: a day; minutes roll up
-- into hours after 24 h, hours into days after 30 days) and `bucket` its start (Unix ms).
-- Absent parts are '' (an unknown key's id, a key without an API or identity); `tags` is
-- the sorted tag set as a JSON array. Several instances add to one row (upsert).
CREATE TABLE verification_counts (
    workspace_id TEXT NOT NULL,
    width BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    api_id TEXT NOT NULL,
    key_id TEXT NOT NULL,
    identity_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    tags TEXT NOT NULL,
    count BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, width, bucket, api_id, key_id, identity_id, outcome, tags)
);
CREATE INDEX verification_counts_by_api ON verification_counts (workspace_id, api_id, bucket);
CREATE INDEX verification_counts_by_key ON verification_counts (key_id, bucket);
CREATE INDEX verification_counts_by_width ON verification_counts (width, bucket);
