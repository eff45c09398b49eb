-- Rate-limit analytics (API-v2.md §14.1). `ratelimit_counts`: every decision, passed or
-- denied, per namespace and time bucket (`width` and `bucket` as in `verification_counts`:
-- minutes roll up into hours after 24 h, hours into days after 30 days). `namespace_id`
-- is a namespace's id, or `verify:<name>` for the limits of keys and identities.
CREATE TABLE ratelimit_counts (
    workspace_id TEXT NOT NULL,
    namespace_id TEXT NOT NULL,
    width BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    passed BIGINT NOT NULL,
    denied BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, namespace_id, width, bucket)
);
CREATE INDEX ratelimit_counts_by_width ON ratelimit_counts (width, bucket);
-- The heaviest identifiers per namespace and hour: while an hour is open (`width` 0) each
-- instance adds what its sketch holds; once closed, the hour keeps its top 100 by total and
-- its top 100 by denials (`width` 3600000), and after 30 days each day its own (86400000).
CREATE TABLE ratelimit_identifiers (
    workspace_id TEXT NOT NULL,
    namespace_id TEXT NOT NULL,
    width BIGINT NOT NULL,
    bucket BIGINT NOT NULL,
    identifier TEXT NOT NULL,
    passed BIGINT NOT NULL,
    denied BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, namespace_id, width, bucket, identifier)
);
CREATE INDEX ratelimit_identifiers_by_width ON ratelimit_identifiers (width, bucket);
