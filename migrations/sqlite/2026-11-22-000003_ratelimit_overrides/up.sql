-- Rate-limit overrides: a limit and duration for an identifier or a `*` pattern in a
-- namespace. `seq` is the creation order within the namespace (ties between patterns).
CREATE TABLE ratelimit_overrides (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL,
    namespace_id  TEXT NOT NULL REFERENCES ratelimit_namespaces (id) ON DELETE CASCADE,
    identifier    TEXT NOT NULL,
    max_tokens    BIGINT NOT NULL,
    duration      BIGINT NOT NULL,
    is_async      BOOLEAN NOT NULL,
    seq           BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    UNIQUE (namespace_id, identifier)
);
