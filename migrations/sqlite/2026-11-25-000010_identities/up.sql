-- Identities (API-v2.md §11): a customer of the workspace, whose keys share its meta and
-- its rate limits; `external_id` is the caller's name for it, unique in the workspace.
-- `ratelimits` holds the rate-limit configurations of identities and of keys (one owner
-- each): a name unique per owner, the limit, the window, and whether every verification
-- applies it. A key links to at most one identity.
CREATE TABLE identities (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    external_id   TEXT NOT NULL,
    meta          TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    UNIQUE (workspace_id, external_id)
);
CREATE TABLE ratelimits (
    id            TEXT PRIMARY KEY NOT NULL,
    workspace_id  TEXT NOT NULL REFERENCES workspaces (id),
    identity_id   TEXT REFERENCES identities (id) ON DELETE CASCADE,
    key_id        TEXT REFERENCES keys (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    max_tokens    BIGINT NOT NULL,
    duration      BIGINT NOT NULL,
    auto_apply    BOOLEAN NOT NULL,
    created_at    BIGINT NOT NULL,
    UNIQUE (identity_id, name),
    UNIQUE (key_id, name)
);
CREATE INDEX ratelimits_key ON ratelimits (key_id);
ALTER TABLE keys ADD COLUMN identity_id TEXT;
CREATE INDEX keys_identity ON keys (identity_id);
-- listIdentities pages by external_id in byte order (SQLite's default collation): the
-- UNIQUE index above serves it.
