-- Dashboard sessions (docs/dashboard.md): a session is the random token in the browser's
-- cookie, stored here only as its SHA-256; it acts with its root key's permissions (read
-- on every request: a revoked or expired root key ends it) and ends after 12 h idle.
CREATE TABLE dashboard_sessions (
    token_hash TEXT PRIMARY KEY NOT NULL,
    workspace_id TEXT NOT NULL,
    root_key_id TEXT NOT NULL,
    csrf_token TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    seen_at BIGINT NOT NULL
);
CREATE INDEX dashboard_sessions_by_seen ON dashboard_sessions (seen_at);
