-- The verification counts of each API per outcome and bucket, whatever the key, identity
-- or tags: what a whole-API read without those takes (a few rows per bucket instead of one
-- per key). Written with `verification_counts` in the same flush, rolled up and pruned
-- with it (`width` and `bucket` as there).
CREATE TABLE api_verification_counts (
    workspace_id TEXT NOT NULL,
    api_id TEXT NOT NULL,
    width BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    count BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, api_id, width, bucket, outcome)
);
CREATE INDEX api_verification_counts_by_width ON api_verification_counts (width, bucket);
